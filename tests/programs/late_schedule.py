"""A known rank is late in known supersteps: ``python late_schedule.py SCHEDULE OUT.json [N]``.

``cycle``: rank ``k mod P`` sleeps 30 ms in superstep k; ``last``: rank ``P - 1`` sleeps 30 ms in
supersteps 5 to 24 (and no other rank sleeps).  N supersteps (default 30), labelled ``stepK``;
the ledger is saved to OUT.json.  The live watch is whatever ``$HPCBSP_LATENESS`` says."""
import sys
import time

import hpcbsp

SLEEP_S = 0.030


def late_rank(schedule: str, k: int, nprocs: int) -> int | None:
    """The rank that sleeps in superstep ``k`` (the tests' oracle uses the same rule)."""
    if schedule == "cycle":
        return k % nprocs
    return nprocs - 1 if 5 <= k < 25 else None


def main() -> None:
    schedule, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    with hpcbsp.BSP() as bsp:
        for k in range(steps):
            if late_rank(schedule, k, bsp.nprocs) == bsp.pid:
                time.sleep(SLEEP_S)
            bsp.sync(f"step{k}")
        bsp.ledger.save(out)


if __name__ == "__main__":
    main()
