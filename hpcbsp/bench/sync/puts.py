"""Put throughput against a hand-written ``Alltoallv``, and a small superstep's fixed cost.

Every rank sends M MiB in total, split evenly over the other ranks, as one put per destination
(into its own slot of the destination's coarray: sources other than the destination in ascending
order), and the sync delivers it; the baseline packs the same bytes into one send buffer and
calls one ``Alltoallv`` into a receive buffer.  The put, the baseline, ``hpput`` and the baseline
again take turns in rounds of their own, so that each side follows the other, not a third
measurement (timed between other measurements, the ratio moved with what ran just before each
side: docs/notes/performance-journal.md, "The put under Intel MPI").  Each block of a side first runs
``WARMUP_FRACTION`` of its calls untimed (as the OSU benchmarks' "skip" iterations): a side's
first supersteps after the other's run up to twice as long, decaying over about four, and the
put's more than the pack's (docs/notes/performance-journal.md, "The put's warm-up"); a program repeating its
superstep meets the steady state.  The first call of each block is timed on its own and reported
beside.  A third side, taking its turn after the baseline, is the baseline with one meeting
more: pack, an ``Allreduce`` of the control step's 80-byte record, then the ``Alltoallv``.  A
put cannot land before every rank agreed on what the superstep moves (the control step), so
this is the floor of any put with BSP's semantics; the put's gap to it is the runtime's own
work, the rest of its gap to the baseline is that one meeting (docs/notes/performance-journal.md,
"Issue 44 item 2: where the 8 MiB put's time goes").  The small superstep: an ``hpput`` of 64
KiB to every other rank and its sync (one large put per destination: the bulk exchange) against
a bare ``Alltoallv`` of the same bytes, no pack on either side, alternating.
"""
from __future__ import annotations

from statistics import median
from typing import Any

import numpy as np
from mpi4py import MPI

import hpcbsp

from .common import SMALL_BYTES, WARMUP_FRACTION, per_call, put_iters


def _displacements(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]])


class Puts:
    """The puts' workload on ``bsp`` and the baseline's buffers on ``comm`` (its own communicator):
    ``src``, this rank's words (seeded by its rank); ``target``, the coarray they go into
    (collective to make)."""

    def __init__(self, bsp: "hpcbsp.BSP", comm: MPI.Comm, mib: float):
        self.bsp, self.comm = bsp, comm
        p, me = bsp.nprocs, bsp.pid
        self.others = [q for q in range(p) if q != me]
        self.per_dest = per_dest = int(mib * 2**20) // max(len(self.others), 1) // 8
        self.src = np.random.default_rng(me).standard_normal(per_dest * len(self.others))
        self.target = bsp.coarray(per_dest * max(p - 1, 1), dtype=np.float64, name="target")
        # slot of source s on rank q: sources other than q in ascending order
        self.slot = {q: (me if me < q else me - 1) for q in self.others}
        self.counts = np.array([0 if q == me else per_dest for q in range(p)], dtype=np.int64)
        self.displs = _displacements(self.counts)
        self.sendbuf = np.empty(per_dest * len(self.others))
        self.recvbuf = np.empty(per_dest * len(self.others))
        self.record = np.zeros(10, dtype=np.int64)  # the size of the control step's record
        self.small = small = min(SMALL_BYTES // 8, per_dest)
        self.small_counts = np.array([0 if q == me else small for q in range(p)], dtype=np.int64)
        self.small_displs = _displacements(self.small_counts)
        self.small_src = np.ascontiguousarray(self.src[:small])
        self.small_send = np.tile(self.small_src, max(len(self.others), 1))  # the same bytes for every destination
        self.small_recv = np.empty(small * max(len(self.others), 1))

    @property
    def nbytes(self) -> int:
        """The bytes this rank sends in one superstep."""
        return self.per_dest * len(self.others) * 8

    def _chunks(self) -> list[tuple[int, np.ndarray, int]]:
        d = self.per_dest
        return [(q, self.src[i * d:(i + 1) * d], self.slot[q] * d) for i, q in enumerate(self.others)]

    def put(self) -> None:
        for q, part, offset in self._chunks():
            self.target.put(q, part, offset=offset)
        self.bsp.sync("put")

    def hpput(self) -> None:  # unbuffered: src stays unchanged until the sync
        for q, part, offset in self._chunks():
            self.target.hpput(q, part, offset=offset)
        self.bsp.sync("hpput")

    def alltoallv(self) -> None:
        self.sendbuf[:] = self.src  # packing the same bytes into one send buffer
        self.comm.Alltoallv([self.sendbuf, (self.counts, self.displs), MPI.DOUBLE],
                            [self.recvbuf, (self.counts, self.displs), MPI.DOUBLE])

    def alltoallv_agreed(self) -> None:
        """The baseline with the control step's meeting before its ``Alltoallv``."""
        self.sendbuf[:] = self.src
        self.comm.Allreduce(MPI.IN_PLACE, self.record, op=MPI.MAX)
        self.comm.Alltoallv([self.sendbuf, (self.counts, self.displs), MPI.DOUBLE],
                            [self.recvbuf, (self.counts, self.displs), MPI.DOUBLE])

    def hpput_small(self) -> None:
        for q in self.others:
            self.target.hpput(q, self.small_src, offset=self.slot[q] * self.per_dest)
        self.bsp.sync("hpput small")

    def alltoallv_small(self) -> None:
        self.comm.Alltoallv([self.small_send, (self.small_counts, self.small_displs), MPI.DOUBLE],
                            [self.small_recv, (self.small_counts, self.small_displs), MPI.DOUBLE])

    def check(self) -> None:
        """One more put superstep, then: rank q's slot for source s holds s's data."""
        self.put()
        p, me, d = self.bsp.nprocs, self.bsp.pid, self.per_dest
        for s in range(p):
            if s == me:
                continue
            mine = s if s < me else s - 1
            expect = np.random.default_rng(s).standard_normal(d * (p - 1))
            i = [q for q in range(p) if q != s].index(me)
            assert np.array_equal(self.target.local[mine * d:(mine + 1) * d], expect[i * d:(i + 1) * d])


def throughput(puts: Puts, iters: int, rounds: int) -> dict[str, Any]:
    """The put and hpput against pack + ``Alltoallv`` in rounds of put, pack + ``Alltoallv``, pack
    + ``Allreduce`` + ``Alltoallv``, hpput, pack + ``Alltoallv``: seconds per superstep
    (medians), each round's ratios, the first superstep of the blocks and the warm-up's length."""
    n, comm = put_iters(iters), puts.comm
    warm = max(1, int(n * WARMUP_FRACTION))
    out: dict[str, list[float]] = {k: [] for k in ("put", "alltoallv", "agreed", "hpput", "alltoallv_h",
                                                   "put_first", "alltoallv_first")}
    for _ in range(rounds):
        out["put_first"].append(per_call(puts.put, 1, comm))
        out["put"].append(per_call(puts.put, n, comm, warm - 1))
        out["alltoallv_first"].append(per_call(puts.alltoallv, 1, comm))
        out["alltoallv"].append(per_call(puts.alltoallv, n, comm, warm - 1))
        out["agreed"].append(per_call(puts.alltoallv_agreed, n, comm, warm))
        out["hpput"].append(per_call(puts.hpput, n, comm, warm))
        out["alltoallv_h"].append(per_call(puts.alltoallv, n, comm, warm))
    return {**{f"{k}_s": median(v) for k, v in out.items()}, "warmup": warm, "bytes": puts.nbytes,
            "put_ratios": [a / q for a, q in zip(out["alltoallv"], out["put"])],
            "agreed_ratios": [a / q for a, q in zip(out["agreed"], out["put"])]}


def small_superstep(puts: Puts, iters: int, rounds: int) -> dict[str, Any]:
    """The small superstep (hpput and sync) against its bare ``Alltoallv``, alternating: seconds
    per call (medians) and the bytes of each put."""
    n, comm = max(10, iters // 10), puts.comm
    small_puts, small_a2a = [], []
    for _ in range(rounds):
        small_puts.append(per_call(puts.hpput_small, n, comm))
        small_a2a.append(per_call(puts.alltoallv_small, n, comm))
    return {"small_bytes": 8 * puts.small, "small_put_s": median(small_puts),
            "small_alltoallv_s": median(small_a2a)}
