"""How the parameter server and its workers write the shared window
(``hpcbsp.elastic.transport.WindowStores``: the server's updates, a worker's copies of its gradient).

Oracles: a hand-written schedule.  A fake clock makes every update with ordinary stores take one
time per value and every update with non-temporal stores another (changed mid-run, as a new
placement of the two processes' cores would), and the kinds chosen, update by update, must be
the ones the rules of the class's docstring give, worked out here by hand.  The result of each update is numpy's
``w -= lr * g`` either way (the stores' own bit-exactness is tests/test_kernels_update.py's), and
a worker's copy is the source's bytes either way.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.elastic.transport import WindowStores
from hpcbsp.kernels import reference


class FakeCosts:
    """A clock on which an update costs ``cost[streaming]`` per value, and the step that advances it."""

    def __init__(self, ordinary: float, streaming: float):
        self.cost = {False: ordinary, True: streaming}
        self.now = 0.0
        self.kinds: list[bool] = []

    def clock(self) -> float:
        return self.now

    def step(self, w: np.ndarray, g: np.ndarray, lr: float, *, streaming: bool) -> np.ndarray:
        self.kinds.append(streaming)
        self.now += self.cost[streaming] * w.size
        w -= np.float32(lr) * g
        return w


def test_the_faster_kind_is_used_and_the_other_tried_every_explore_th_update():
    costs = FakeCosts(ordinary=1.7e-3, streaming=0.33e-3)  # the slow placement of the docstring
    stores = WindowStores(clock=costs.clock, step=costs.step)
    w, g = np.zeros(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    e = WindowStores.EXPLORE
    n = 3 * e + 8
    for _ in range(n):
        stores(w, g, 0.01)
    # By hand: ordinary first, then non-temporal, then non-temporal (faster) except at updates
    # e - 1, 2 e - 1, 3 e - 1 (counting from 0), which try ordinary again.
    want = [False, True] + [k % e != e - 1 for k in range(2, n)]
    assert costs.kinds == want
    assert stores.used == [1 + 3, n - 1 - 3]
    assert stores.mean_s == pytest.approx([1.7e-3, 0.33e-3], rel=1e-9)  # constant costs: the costs (clock rounding aside)


def test_a_chunk_and_a_whole_update_are_compared_per_value():
    """The pipelined window updates a chunk at a time, other policies the whole vector: a
    chunk's update is shorter, not faster."""
    costs = FakeCosts(ordinary=1.0, streaming=2.0)  # ordinary stores twice as fast per value
    stores = WindowStores(clock=costs.clock, step=costs.step)
    whole, chunk = np.zeros(100, dtype=np.float32), np.zeros(1, dtype=np.float32)
    g = np.ones(100, dtype=np.float32)
    stores(whole, g, 0.01)      # ordinary first: 100 s for 100 values
    stores(chunk, g[:1], 0.01)  # then non-temporal: 2 s for 1 value
    stores(chunk, g[:1], 0.01)  # by hand: 1 s a value against 2: ordinary
    assert costs.kinds == [False, True, False]
    assert stores.mean_s == pytest.approx([1.0, 2.0], rel=1e-9)


def test_a_change_of_placement_is_followed_at_the_next_try():
    costs = FakeCosts(ordinary=1.7e-3, streaming=0.33e-3)
    stores = WindowStores(clock=costs.clock, step=costs.step)
    w, g = np.zeros(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    for _ in range(10):
        stores(w, g, 0.01)
    costs.cost = {False: 0.17e-3, True: 0.32e-3}  # the fast placement from here on
    e = WindowStores.EXPLORE
    n = e + 46  # (updates in all, with the 10 above)
    for _ in range(n - 10):
        stores(w, g, 0.01)
    # By hand: non-temporal from update 2 until the try of ordinary at update e - 1 (now faster,
    # its stale mean replaced by the new time); ordinary from then on, and its own try of
    # non-temporal at update 2 e - 1 would come later than this run.
    want = [False, True] + [True] * (e - 1 - 2) + [False] * (n - (e - 1))
    assert costs.kinds == want


def test_a_lucky_try_is_undone_by_the_updates_after_it():
    costs = FakeCosts(ordinary=1.7e-3, streaming=0.33e-3)
    stores = WindowStores(clock=costs.clock, step=costs.step)
    w, g = np.zeros(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    e = WindowStores.EXPLORE
    for n in range(e + 3):
        if n == e - 1:  # the try of ordinary stores happens to be fast once
            costs.cost[False] = 0.1e-3
        elif n == e:
            costs.cost[False] = 1.7e-3
        stores(w, g, 0.01)
    # By hand: the try (update e - 1) makes ordinary look faster, so update e uses it and takes
    # 1.7 ms, raising its running mean to 0.1 + 0.25 (1.7 - 0.1) = 0.5 ms > 0.33: non-temporal
    # again from update e + 1.
    assert costs.kinds[e - 1:] == [False, False, True, True]
    assert stores.mean_s[0] == pytest.approx(0.1e-3 + WindowStores.ALPHA * (1.7e-3 - 0.1e-3), rel=1e-9)


def test_the_update_is_numpys_whichever_stores():
    rng = np.random.default_rng(3)
    w = rng.standard_normal(1001).astype(np.float32)
    g = rng.standard_normal(1001).astype(np.float32)
    want = w.copy()
    stores = WindowStores()  # the real clock and kernel
    for _ in range(5):
        reference.sgd_step(want, g, 0.05)
        stores(w, g, 0.05)
    assert w.tobytes() == want.tobytes() and sum(stores.used) == 5 and min(stores.used) >= 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_a_workers_copy_into_the_window_is_the_same_bytes_whichever_stores(dtype, offset):
    """A worker's copies of its gradient (``WindowStores(step=copy)``): oracle the source's bytes,
    special values (NaN payloads, signed zeros, infinities, subnormals) included, at every
    alignment of the destination and a length that is no multiple of a vector."""
    from hpcbsp.kernels.update import copy

    rng = np.random.default_rng(offset)
    raw = rng.integers(0, 256, 8 * 1031, dtype=np.uint8)  # every bit pattern, NaNs among them
    src = raw.view(dtype)[offset:]
    backing = np.zeros(src.size + 4, dtype=dtype)
    out = backing[offset:offset + src.size]
    stores = WindowStores(step=copy)
    for _ in range(4):
        backing[:] = 0
        stores(out, src)
        assert out.tobytes() == src.tobytes() and (backing[offset + src.size:] == 0).all()
    assert min(stores.used) >= 1  # (the first two writes try one kind each)
    with pytest.raises(ValueError, match="copy: out and src overlap"):
        copy(backing[1:5], backing[:4])
