"""Fine-grained puts: the put workload's words as single-element puts to random ranks (other than
the sender) and random offsets, as one ``put_elements`` call, against the same words as
vectorised puts; for scale, a sample of them sent by one ``put`` call each.

Beside them, the floor of an implementation of the element puts with BSPlib's buffered semantics
that moves the values as messages, part by part: read the call's inputs once (ranks, offsets,
values); move the values to their ranks in one ``Alltoallv`` (the values alone, 8 bytes a word:
the offsets, at least 20 bits each for this table, are not counted); scatter the values at random
into the table, the faster of numpy's ``table[offsets] = values`` and this package's prefetching
loop on a record packed beforehand.  A lower bound: packing's writes are not counted either.  (On
one node this package's records do not move: :mod:`hpcbsp.runtime.superstep.arena`.)  And where
the element puts' time goes, on one rank alone: packing them, applying one destination's record,
numpy's random scatter of the same words against a contiguous copy of them.
"""
from __future__ import annotations

import time
from statistics import median
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcbsp.kernels import elements

from .common import median_or_nan, per_call, put_iters
from .puts import Puts

#: At most this many words are sent one put call each (the figure is scaled to all of them).
SAMPLE = 20_000


class ElementPuts:
    """The element puts' workload over ``puts`` (its words, coarray and communicator): random
    ranks and offsets drawn from a generator seeded by the rank, and the floor's buffers
    (collective to make: the floor's counts are exchanged)."""

    def __init__(self, puts: Puts):
        self.puts = puts
        bsp, comm, src, target = puts.bsp, puts.comm, puts.src, puts.target
        p, me, others = bsp.nprocs, bsp.pid, puts.others
        rng = np.random.default_rng(100 + me)
        self.words = words = src.size
        self.pids = np.asarray(others, dtype=np.int64)[rng.integers(0, len(others), words)] if others \
            else np.zeros(words, dtype=np.int64)
        self.offsets = rng.integers(0, target.local.size, words)
        self.sizes = np.asarray(target.sizes, dtype=np.int64)
        self.table = np.zeros(target.local.size)
        self.scatter_offsets = rng.integers(0, self.table.size, words)
        table_size = np.array([self.table.size], dtype=np.int64)
        own, own_counts, _ = elements.pack_elements(np.zeros(words, dtype=np.int64), self.scatter_offsets, src,
                                                    table_size)
        assert own is not None and isinstance(own_counts, np.ndarray)
        self.own, self.own_count = own, int(own_counts[0])
        self.width = elements.offset_width(table_size)
        self.value_bytes = np.bincount(self.pids, minlength=p).astype(np.int64) * 8  # per destination
        self.recv_bytes = np.asarray(comm.alltoall(self.value_bytes.tolist()), dtype=np.int64)
        self.recv_values = np.empty(int(self.recv_bytes.sum()), dtype=np.uint8)
        self.send_at = np.concatenate([[0], np.cumsum(self.value_bytes)[:-1]])
        self.recv_at = np.concatenate([[0], np.cumsum(self.recv_bytes)[:-1]])

    def put_elements(self) -> None:
        self.puts.target.put_elements(self.pids, self.offsets, self.puts.src)
        self.puts.bsp.sync("put_elements")

    def put_one_by_one(self) -> None:
        put, src = self.puts.target.put, self.puts.src
        for i in range(min(self.words, SAMPLE)):
            put(int(self.pids[i]), src[i:i + 1], int(self.offsets[i]))
        self.puts.bsp.sync("put one by one")

    def read_inputs(self) -> None:
        for arr in (self.pids, self.offsets, self.puts.src.view(np.int64)):
            np.bitwise_or.reduce(arr)

    def move_values(self) -> None:
        self.puts.comm.Alltoallv([self.puts.src.view(np.uint8), (self.value_bytes, self.send_at), MPI.BYTE],
                                 [self.recv_values, (self.recv_bytes, self.recv_at), MPI.BYTE])  # (order moot)

    def scatter_numpy(self) -> None:
        self.table[self.scatter_offsets] = self.puts.src

    def scatter_ours(self) -> None:
        elements.apply_elements(self.table, self.own, self.own_count, width=self.width)


def against_vectorised(el: ElementPuts, iters: int, rounds: int) -> dict[str, Any]:
    """The element puts against vectorised puts of the same words, and the floor part by part, in
    rounds of their own: seconds per superstep (medians) and each round's ratios."""
    n, comm, puts = put_iters(iters), el.puts.comm, el.puts
    vector_puts, elems = [], []
    floor: dict[str, list[float]] = {"read": [], "move": [], "scatter": []}
    for _ in range(rounds):
        vector_puts.append(per_call(puts.put, n, comm))
        elems.append(per_call(el.put_elements, n, comm))
        if el.words:
            floor["read"].append(per_call(el.read_inputs, n, comm))
            floor["move"].append(per_call(el.move_values, n, comm))
            floor["scatter"].append(min(per_call(el.scatter_numpy, n, comm), per_call(el.scatter_ours, n, comm)))
    return {"vector_put_s": median(vector_puts), "elements_s": median(elems), "words": el.words,
            "elements_ratios": [e / q for e, q in zip(elems, vector_puts)],
            "floor_parts_s": {key: median_or_nan(v) for key, v in floor.items()},
            "floor_ratios": [sum(parts_) / q for *parts_, q in zip(*floor.values(), vector_puts)]}


def one_by_one(el: ElementPuts, rounds: int) -> dict[str, float]:
    """The words as one put call each: seconds per superstep, timed on a sample and scaled."""
    singles = [per_call(el.put_one_by_one, 1, el.puts.comm) * el.words / min(el.words, SAMPLE)
               for _ in range(min(rounds, 3) if el.words else 0)]
    return {"singles_s": median_or_nan(singles)}


def parts(el: ElementPuts, rounds: int) -> dict[str, float]:
    """Where the element puts' time goes, on this rank alone (best of the rounds, seconds):
    packing them, applying one destination's record (scaled to all the words), numpy's random
    scatter of the same words and a contiguous copy of them."""
    src, table = el.puts.src, el.table
    out: dict[str, list[float]] = {"pack": [], "apply": [], "numpy_scatter": [], "copy": []}
    for _ in range(rounds if el.words else 0):  # (one rank alone sends nothing)
        t0 = time.perf_counter()
        packed, el_counts, el_starts = elements.pack_elements(el.pids, el.offsets, src, el.sizes)
        t1 = time.perf_counter()
        assert packed is not None and isinstance(el_counts, np.ndarray) and isinstance(el_starts, np.ndarray)
        d = int(np.argmax(el_counts))
        elements.apply_elements(table, packed[el_starts[d]:el_starts[d + 1]], int(el_counts[d]),
                                width=elements.offset_width(el.sizes))
        t2 = time.perf_counter()
        table[el.scatter_offsets] = src
        t3 = time.perf_counter()
        table[:src.size] = src
        t4 = time.perf_counter()
        for key, dt in zip(out, (t1 - t0, (t2 - t1) * el.words / max(int(el_counts[d]), 1), t3 - t2, t4 - t3)):
            out[key].append(dt)
    return {f"{key}_s": min(v) if v else float("nan") for key, v in out.items()}
