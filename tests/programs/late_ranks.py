"""Ranks ``LATE`` (``python late_ranks.py 3,4``) never reach the seventh sync; every rank has the
sync timeout of ``$HPCBSP_SYNC_TIMEOUT`` (the test gives 2 s).  Each rank that times out prints one JSON line, ``{"rank", "before",
"roll_call"}``: the point-to-point calls it made in the six timed supersteps before, and from
entering the seventh to giving up (``[sends, recvs]``, counted by ``tests/programs/p2pcount.c``
under ``LD_PRELOAD``; null without it), then fails as a program does (the error names the late
ranks)."""
import ctypes
import json
import sys
import time

import hpcbsp


def counts() -> list[int] | None:
    lib = ctypes.CDLL(None)
    try:
        sends, recvs = lib.hpcbsp_p2p_sends, lib.hpcbsp_p2p_recvs
    except AttributeError:
        return None
    sends.restype = recvs.restype = ctypes.c_long
    return [int(sends()), int(recvs())]


def less(a: list[int] | None, b: list[int] | None) -> list[int] | None:
    return None if a is None or b is None else [x - y for x, y in zip(a, b)]


def prog(bsp: "hpcbsp.BSP") -> None:
    late = {int(r) for r in sys.argv[1].split(",")}
    bsp.sync()
    start = counts()
    for _ in range(6):
        bsp.sync()
    before = counts()
    if bsp.pid in late:
        time.sleep(60)
    try:
        bsp.sync()
    except hpcbsp.SyncTimeout:
        # One write per line: unbuffered (PYTHONUNBUFFERED=1, as make test runs), print writes the
        # text and its newline apart, and the ranks that time out together interleave them.
        line = json.dumps({"rank": bsp.pid, "before": less(before, start), "roll_call": less(counts(), before)})
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        raise


if __name__ == "__main__":
    hpcbsp.run(prog)
