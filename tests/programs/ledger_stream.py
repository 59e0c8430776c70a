"""Streams, windows and aggregates of the superstep ledger (run under mpiexec -n P).

    python tests/programs/ledger_stream.py OUT STEPS WINDOW

Two contexts, one after the other, each running the same STEPS supersteps (a pattern of empty,
labelled and data-moving ones: rank r puts ``8 * (1 + (i + r) % 5)`` bytes to rank r + 1 every
third superstep, nothing to itself) and streaming its ledger:

1. with ``$HPCBSP_LEDGER_WINDOW`` above STEPS: ``OUT/unbounded.json`` is ``bsp.ledger.gather()``
   (every record), ``OUT/saved.json`` what ``save`` wrote from the stream (``OUT/one``);
2. with the window WINDOW: ``OUT/window.json`` is its gather (the window), ``OUT/two`` the stream
   (merged by the test), and ``OUT/rank-R.json`` each rank's aggregates, length and first row,
   and the bytes, requests and label counts the program itself put (the independent oracle).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

import hpcbsp

LABELS = ("compute", "halo", None)


def supersteps(bsp: "hpcbsp.BSP", steps: int) -> dict[str, object]:
    """The pattern; what this rank put to other ranks, by hand."""
    x = bsp.coarray(8, dtype=np.int64)
    right = (bsp.pid + 1) % bsp.nprocs
    sent = {"bytes_out": 0, "msgs_out": 0, "labels": {}}
    for i in range(steps):
        label = LABELS[i % 3]
        if i % 3 == 1:
            n = 1 + (i + bsp.pid) % 5
            x.put(right, np.arange(n), offset=0)
            if right != bsp.pid:
                sent["bytes_out"] += 8 * n
                sent["msgs_out"] += 1
        bsp.sync(label)
        sent["labels"][str(label)] = sent["labels"].get(str(label), 0) + 1
    return sent


def main(out: str, steps: int, window: int) -> None:
    os.environ["HPCBSP_LEDGER_WINDOW"] = str(steps + 10)
    with hpcbsp.BSP() as bsp:
        bsp.ledger.stream(os.path.join(out, "one"))
        supersteps(bsp, steps)
        records = bsp.ledger.gather()
        bsp.ledger.save(os.path.join(out, "saved.json"))
    if records is not None:
        with open(os.path.join(out, "unbounded.json"), "w") as fh:
            json.dump(records, fh)
    os.environ["HPCBSP_LEDGER_WINDOW"] = str(window)
    with hpcbsp.BSP() as bsp:
        bsp.ledger.stream(os.path.join(out, "two"))
        sent = supersteps(bsp, steps)
        agg = bsp.ledger.aggregates
        mine = {"len": len(bsp.ledger), "first": bsp.ledger.first, "window": bsp.ledger.window, "sent": sent,
                "count": agg.count, "totals": agg.totals, "maxima": agg.maxima,
                "by_label": {str(k): [v.count, v.totals, v.maxima] for k, v in agg.by_label.items()},
                "last": bsp.ledger[-1].as_dict(), "window_records": [r.as_dict() for r in bsp.ledger]}
        with open(os.path.join(out, f"rank-{bsp.pid}.json"), "w") as fh:
            json.dump(mine, fh)
        records = bsp.ledger.gather()
    if records is not None:
        with open(os.path.join(out, "window.json"), "w") as fh:
            json.dump(records, fh)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
