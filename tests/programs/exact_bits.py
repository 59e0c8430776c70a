"""``allreduce(exact=True)`` of 20 000 fixed values split over the ranks in blocks: rank 0 prints
the sum as ``float.hex`` (tests/test_p2p_counts.py compares it at 1, 2, 3 and 5 ranks)."""
import numpy as np

import hpcbsp
from hpcbsp.runtime.api.distribution import block_range


def values() -> np.ndarray:
    rng = np.random.default_rng(44)
    return rng.standard_normal(20_000) * 10.0 ** rng.integers(-12, 13, 20_000)


def prog(bsp: "hpcbsp.BSP") -> None:
    x = values()
    lo, hi = block_range(x.size, bsp.nprocs, bsp.pid)
    total = bsp.allreduce(x[lo:hi], exact=True)
    if bsp.pid == 0:
        print(float(total).hex())


if __name__ == "__main__":
    hpcbsp.run(prog)
