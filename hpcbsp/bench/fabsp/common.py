"""What the sections of ``python -m hpcbsp.bench fabsp`` share: the targets they report and
how they time and print (the slowest rank's best time; rank 0 prints)."""
from __future__ import annotations

from typing import Callable

from ...apps.irregular.report import Outcome
from ...runtime import BSP

HIST_TARGET_BSP = 1.0
TARGET_ROUTED = 0.8  # issue 33: 2d routing >= 0.8x direct at the same rank count on one node
TARGET_RMA = 5.0  # issue 20: FA-BSP >= 5x one RMA operation per update
#: Issue 20's bar: bale's best tuned C aggregation (exstack, exstack2 or conveyors, buffers
#: tuned), in updates per second per rank at 2 ranks, measured by the issue on another day on
#: this kind of 2-core VM.  Fixed figures: the ratio says something only on a machine like it.
BALE_TUNED = {"histogram": 151.6e6, "index_gather": 67.9e6}


def best(bsp: BSP, repeat: int, once: Callable[[bool], Outcome]) -> tuple[float, int, bool]:
    """Best (smallest) slowest-rank time of ``repeat`` runs; the first run is checked."""
    best, updates, ok = float("inf"), 0, True
    for i in range(repeat):
        out = once(i == 0)
        seconds = float(bsp.allreduce(out.seconds, op="max"))
        ok = ok and bool(bsp.allreduce(0 if out.ok is False else 1, op="min"))
        best, updates = min(best, seconds), out.updates
    return best, updates, ok


def say(bsp: BSP, text: str) -> None:
    if bsp.pid == 0:
        print(text, flush=True)
