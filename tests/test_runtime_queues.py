"""Typed queues at several rank counts (run under mpiexec -n 2 and -n 3).

Oracles: the records every rank sent, known to every rank from the rank numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

mpi = pytest.mark.mpi(min_size=2)



@mpi
def test_queue_order_by_source_then_send_order(bsp):
    q = bsp.queue(np.int64)
    dests = np.arange(6) % bsp.nprocs
    q.send(dests, 100 * bsp.pid + np.arange(6))
    q.send(0, [100 * bsp.pid + 50])
    bsp.sync()
    got = q.received()
    expected = []
    for src in range(bsp.nprocs):
        expected += [100 * src + i for i in range(6) if i % bsp.nprocs == bsp.pid]
        if bsp.pid == 0:
            expected.append(100 * src + 50)
    np.testing.assert_array_equal(got, expected)
    bsp.sync()
    assert q.received().size == 0, "a queue holds only the previous superstep's records"


@mpi
def test_structured_dtype_queue(bsp):
    dt = np.dtype([("key", np.int64), ("val", np.float32), ("tag", "S3")])
    q = bsp.queue(dt)
    recs = np.zeros(bsp.nprocs, dtype=dt)
    recs["key"] = np.arange(bsp.nprocs) + 10 * bsp.pid
    recs["val"] = bsp.pid / 2
    recs["tag"] = b"abc"
    q.send(np.arange(bsp.nprocs), recs)
    bsp.sync()
    got = q.received()
    assert got.dtype == dt
    np.testing.assert_array_equal(got["key"], [10 * s + bsp.pid for s in range(bsp.nprocs)])
    np.testing.assert_array_equal(got["val"], np.arange(bsp.nprocs, dtype=np.float32) / 2)
    assert set(got["tag"].tolist()) == {b"abc"}


@mpi
def test_queue_batch_counts_one_message_per_destination(bsp):
    q = bsp.queue(np.int64)
    right = (bsp.pid + 1) % bsp.nprocs
    q.send(right, np.arange(10))
    bsp.sync()
    rec = bsp.ledger[-1]
    assert (rec.bytes_out, rec.msgs_out, rec.bytes_in, rec.msgs_in) == (80, 1, 80, 1)
