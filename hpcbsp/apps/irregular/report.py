"""Timing and the report every irregular app prints: updates per second per rank, the oracle
check, the memory of its mailboxes (FA-BSP modes: what the routing makes each rank send to and
the buffers it held, against the routing's own count), the ledger summary (or one JSON line)."""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...fabsp.engine import Engine
from ...runtime import BSP
from ...runtime.superstep.ledgersummary import gather_summary
from ...util.text import plural


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


def mailbox_memory(bsp: BSP) -> dict[str, Any] | None:
    """Collective: the memory of this context's mailboxes, the most over ranks (None without
    mailboxes): ``routing``; ``peers``, the most ranks one rank sends to, and ``model_peers``,
    the routing's own count of them (:meth:`~hpcbsp.fabsp.routing.Routing.neighbour_counts`);
    ``buffers`` and ``buffer_bytes``, the most aggregation buffers one rank held at once (all its
    mailboxes together); ``bound_bytes``, what they and the messages in flight can reach."""
    engine = Engine.existing(bsp)
    boxes = list(engine.boxes) if engine is not None else []
    if not boxes:
        return None
    mems = [box.memory() for box in boxes]
    mine = np.array([max(int(m["peers"]) for m in mems), sum(int(m["buffers"]) for m in mems),
                     sum(int(m["buffer_bytes"]) for m in mems), sum(int(m["bound_bytes"]) for m in mems)],
                    dtype=np.int64)
    most = bsp.allreduce(mine, op="max")
    model = max(int(box.route.neighbour_counts().max()) for box in boxes) if bsp.nprocs > 1 else 0
    return {"routing": ",".join(sorted({str(m["routing"]) for m in mems})), "peers": int(most[0]),
            "model_peers": model, "buffers": int(most[1]), "buffer_bytes": int(most[2]),
            "bound_bytes": int(most[3])}


def report(bsp: BSP, app: str, mode: str, out: Outcome, args: argparse.Namespace | None = None,
           unit: str = "updates") -> int:
    """Print the figures (rank 0), save the ledger if asked, return the exit status (the same on
    every rank).  ``unit`` names what ``out.updates`` counts (updates, reads, queries, ...)."""
    seconds = float(bsp.allreduce(out.seconds, op="max"))
    updates = int(bsp.allreduce(out.updates, op="sum"))
    checked = out.ok is not None
    ok = bool(bsp.allreduce(1 if (out.ok or not checked) else 0, op="min"))
    memory = mailbox_memory(bsp)
    ledger = getattr(args, "ledger", None)
    if ledger:
        bsp.ledger.save(ledger)  # (streamed since the start by cli.run_app: every superstep)
    summary = gather_summary(bsp.ledger)  # (the window and the totals of all; on rank 0, None elsewhere)
    if bsp.pid == 0:
        assert summary is not None
        rate = updates / bsp.nprocs / seconds if seconds > 0 else float("inf")
        if getattr(args, "json", False):
            print(json.dumps({"app": app, "mode": mode, "ranks": bsp.nprocs, "unit": unit,
                              "per_rank": updates / bsp.nprocs, "seconds": seconds,
                              "rate_per_rank": rate if seconds > 0 else None,
                              "check": None if not checked else ok, "detail": out.detail,
                              "mailboxes": memory}))
            return 0 if ok else 1
        check = ("check against the serial oracle: " + ("OK" if ok else "FAILED")) if checked \
            else "check skipped (--no-check)"
        print(f"{app} [{mode}] on {plural(bsp.nprocs, 'rank')}: {updates / bsp.nprocs:,.0f} {unit} per rank "
              f"in {seconds:.3f} s = {rate:,.0f} {unit}/s per rank; {check}")
        if out.detail:
            print(f"  {out.detail}")
        if memory is not None:
            print(f"  mailboxes (routing {memory['routing']}): a rank sends to at most {memory['peers']} ranks "
                  f"(the routing's count: {memory['model_peers']}), held at most {memory['buffers']} buffers "
                  f"({memory['buffer_bytes'] / 2**20:.2f} MiB; bound {memory['bound_bytes'] / 2**20:.2f} MiB)")
        print(summary.text())
        if ledger:
            print(f"ledger written to {ledger}")
    return 0 if ok else 1


if __name__ == "__main__":
    import sys

    from ...util.args.parser import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.irregular.report", "run python -m hpcbsp.apps.irregular.histogram, "
                           "index_gather, bfs, triangles or toposort (--help for options)"))
