"""The lateness watch's cost (:mod:`hpcbsp.runtime.superstep.lateness`): two contexts on the same
ranks, one ``lateness="off"`` and one with the watch on (a threshold of 1000 ms, which no empty
sync reaches, so no line is written), their empty syncs timed alternately in the same rounds
(the slowest rank's mean per call, medians over the rounds; the ratio is the median of the
rounds' on/off ratios).  The watch adds two words to the
control step's reduction and a clock reading and a few additions per step."""
from __future__ import annotations

from typing import Any

import hpcbsp

from .common import median_or_nan, per_call

#: The watch's threshold in the timed context, in milliseconds: never reached by an empty sync.
THRESHOLD_MS = 1000.0


def lateness_cost(bsp: "hpcbsp.BSP", iters: int, rounds: int) -> dict[str, Any]:
    """Empty sync latency with the lateness watch off and on (medians over ``rounds``)."""
    ctx = {"off": hpcbsp.BSP(bsp.comm, lateness="off"), "on": hpcbsp.BSP(bsp.comm, lateness=THRESHOLD_MS)}
    out: dict[str, list[float]] = {name: [] for name in ctx}
    try:
        for _ in range(rounds):
            for name, c in ctx.items():
                out[name].append(1e6 * per_call(c.sync, iters, bsp.comm, warmup=iters // 10))
    finally:
        for c in ctx.values():
            c.close()
    ratios = [on / off for on, off in zip(out["on"], out["off"])]
    return {**{f"late_{name}_us": median_or_nan(v) for name, v in out.items()}, "late_ratio": median_or_nan(ratios)}
