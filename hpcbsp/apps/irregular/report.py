"""Timing and the report every irregular app prints: updates per second per rank, the oracle
check, the ledger summary (or one JSON line)."""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Callable

from ...runtime import BSP
from ...runtime.ledger import summarize
from ...util.args import plural


@dataclass
class Outcome:
    """One run of an app on this rank."""

    updates: int        #: records this rank sent (the app's unit of work)
    seconds: float      #: wall time of the timed part on this rank
    ok: bool | None     #: the oracle check on this rank (None: not checked)
    detail: str = ""    #: one line for the report (rank 0's is printed)


def timed(bsp: BSP, body: Callable[[], object]) -> tuple[float, object]:
    """Run ``body`` between two syncs; return this rank's seconds and ``body``'s result.

    ``body`` must end with a sync (so every rank's time covers the whole exchange).
    """
    bsp.sync("start")
    t0 = time.perf_counter()
    result = body()
    return time.perf_counter() - t0, result


def report(bsp: BSP, app: str, mode: str, out: Outcome, args: argparse.Namespace | None = None,
           unit: str = "updates") -> int:
    """Print the figures (rank 0), save the ledger if asked, return the exit status (the same on
    every rank).  ``unit`` names what ``out.updates`` counts (updates, reads, queries, ...)."""
    seconds = float(bsp.allreduce(out.seconds, op="max"))
    updates = int(bsp.allreduce(out.updates, op="sum"))
    checked = out.ok is not None
    ok = bool(bsp.allreduce(1 if (out.ok or not checked) else 0, op="min"))
    ledger = getattr(args, "ledger", None)
    if ledger:
        bsp.ledger.save(ledger)
    records = bsp.ledger.gather()  # (the list on rank 0, None elsewhere)
    if bsp.pid == 0:
        assert records is not None
        rate = updates / bsp.nprocs / seconds if seconds > 0 else float("inf")
        if getattr(args, "json", False):
            print(json.dumps({"app": app, "mode": mode, "ranks": bsp.nprocs, "unit": unit,
                              "per_rank": updates / bsp.nprocs, "seconds": seconds,
                              "rate_per_rank": rate if seconds > 0 else None,
                              "check": None if not checked else ok, "detail": out.detail}))
            return 0 if ok else 1
        check = ("check against the serial oracle: " + ("OK" if ok else "FAILED")) if checked \
            else "check skipped (--no-check)"
        print(f"{app} [{mode}] on {plural(bsp.nprocs, 'rank')}: {updates / bsp.nprocs:,.0f} {unit} per rank "
              f"in {seconds:.3f} s = {rate:,.0f} {unit}/s per rank; {check}")
        if out.detail:
            print(f"  {out.detail}")
        print(summarize(records))
        if ledger:
            print(f"ledger written to {ledger}")
    return 0 if ok else 1


if __name__ == "__main__":
    import sys

    from ...util.args import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.irregular.report", "run python -m hpcbsp.apps.irregular.histogram, "
                           "index_gather, bfs, triangles or toposort (--help for options)"))
