"""scatter_add and gather against their numpy oracles (np.add.at and fancy indexing)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbsp import kernels
from hpcbsp.kernels import reference

TABLE_DTYPES = [np.float64, np.float32, np.int64, np.int32]
INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def random_values(rng, dtype, n):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    return rng.integers(-1000, 1000, n).astype(dtype)


@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_scatter_add_matches_add_at(dtype):
    rng = np.random.default_rng(0)
    table = random_values(rng, dtype, 50)
    idx = rng.integers(0, 50, 2000)          # many repeats: they must accumulate
    values = random_values(rng, dtype, 2000)
    expect = table.copy()
    reference.scatter_add(expect, idx, values)
    kernels.scatter_add(table, idx, values)
    # Same additions in the same order: equal bits, floats included.
    np.testing.assert_array_equal(table, expect)


@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_scatter_add_scalar_is_a_histogram(dtype):
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 17, 999)
    table = np.zeros(17, dtype=dtype)
    kernels.scatter_add(table, idx, 1)
    np.testing.assert_array_equal(table, np.bincount(idx, minlength=17).astype(dtype))
    expect = table.copy()
    reference.scatter_add(expect, idx, 3)
    kernels.scatter_add(table, idx, 3)
    np.testing.assert_array_equal(table, expect)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.integers(0, n - 1), max_size=100),
    st.integers(0, 2**32 - 1))))
def test_scatter_add_and_gather_random(case):
    size, idx, seed = case
    rng = np.random.default_rng(seed)
    idx = np.array(idx, dtype=np.int64)
    table = rng.standard_normal(size)
    values = rng.standard_normal(idx.size)
    expect = table.copy()
    np.add.at(expect, idx, values)
    kernels.scatter_add(table, idx, values)
    np.testing.assert_array_equal(table, expect)
    np.testing.assert_array_equal(kernels.gather(table, idx), table[idx])


@pytest.mark.parametrize("idx_dtype", INDEX_DTYPES)
def test_any_integer_index_dtype(idx_dtype):
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 100, 500).astype(idx_dtype)
    table = np.zeros(100)
    kernels.scatter_add(table, idx, 1.5)
    np.testing.assert_array_equal(table, 1.5 * np.bincount(idx.astype(np.int64), minlength=100))
    np.testing.assert_array_equal(kernels.gather(table, idx), table[idx])


def test_strided_table_and_values_update_in_place():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((30, 2))
    view = base[::3, 1]                       # 10 entries, stride 48 bytes
    idx = rng.integers(0, 10, 200)
    values = rng.standard_normal(400)[::2]    # strided values
    expect = base.copy()
    np.add.at(expect[::3, 1], idx, values)
    kernels.scatter_add(view, idx, values)
    np.testing.assert_array_equal(base, expect)
    np.testing.assert_array_equal(kernels.gather(base[::-1, 0], idx), base[::-1, 0][idx])


def test_multidimensional_indices_keep_their_shape():
    rng = np.random.default_rng(4)
    table = rng.standard_normal(20)
    idx = rng.integers(0, 20, (4, 5))
    got = kernels.gather(table, idx)
    assert got.shape == (4, 5)
    np.testing.assert_array_equal(got, table[idx])
    values = rng.standard_normal((4, 5))
    expect = table.copy()
    np.add.at(expect, idx, values)
    kernels.scatter_add(table, idx, values)
    np.testing.assert_array_equal(table, expect)


def test_gather_into_out_and_other_dtypes():
    table = np.arange(10, dtype=np.int32) * 7
    out = np.empty(3, dtype=np.int32)
    assert kernels.gather(table, [9, 0, 9], out=out) is out
    assert out.tolist() == [63, 0, 63]
    # dtypes without a compiled loop are still checked, then gathered by numpy
    for table in (np.array([True, False, True]), np.arange(3, dtype=np.int16),
                  np.array([1 + 2j, 3j, 4])):
        np.testing.assert_array_equal(kernels.gather(table, [2, 0]), table[[2, 0]])
        with pytest.raises(IndexError, match="index 3 at position 1 is out of bounds for a table of size 3"):
            kernels.gather(table, [0, 3])


def test_empty_and_single():
    table = np.ones(4)
    kernels.scatter_add(table, np.empty(0, dtype=np.int64), np.empty(0))
    kernels.scatter_add(table, [], 5.0)
    assert table.tolist() == [1, 1, 1, 1]
    assert kernels.gather(table, []).shape == (0,)
    kernels.scatter_add(table, [3], [2.0])
    assert table.tolist() == [1, 1, 1, 3]
    one = np.zeros(1)
    kernels.scatter_add(one, [0, 0], 1.0)
    assert one.tolist() == [2.0]


@pytest.mark.parametrize("bad, pos", [(8, 0), (-1, 2), (2**40, 1)])
def test_bad_index_is_named_and_table_untouched(bad, pos):
    table = np.arange(8.0)
    idx = np.array([0, 7, 3])
    idx[pos] = bad
    msg = rf"index {bad} at position {pos} is out of bounds for a table of size 8"
    with pytest.raises(IndexError, match=msg):
        kernels.scatter_add(table, idx, 1.0)
    assert table.tolist() == list(np.arange(8.0))
    with pytest.raises(IndexError, match=msg):
        kernels.gather(table, idx)


@pytest.mark.parametrize("n", [4095, 4096, 4097, 3 * 4096 + 5])
def test_the_first_bad_index_is_found_across_the_vectorised_blocks(n):
    # The check tests blocks of 4096 indices in one pass and searches only a failing block:
    # bad indices at block edges, several in one block, and two in different blocks.
    rng = np.random.default_rng(n)
    for positions in ([0], [n - 1], [4095 % n], [min(4096, n - 1)], [n // 2, n - 2], [n - 1, 1]):
        idx = rng.integers(0, 10, n)
        for p, value in zip(positions, (10, -3)):
            idx[p] = value
        first = int(np.flatnonzero((idx < 0) | (idx >= 10))[0])  # numpy's answer
        with pytest.raises(IndexError, match=rf"index {idx[first]} at position {first} is out"):
            kernels.gather(np.zeros(10), idx)
    kernels.gather(np.zeros(10), rng.integers(0, 10, n))  # all valid: no error


@pytest.mark.parametrize("dtype", TABLE_DTYPES)
@pytest.mark.parametrize("scalar", [False, True], ids=["values", "scalar"])
def test_many_updates_apply_block_by_block_and_a_late_bad_index_restores_the_table(dtype, scalar):
    # More updates than twice the table: the kernel keeps a copy of the table and tests and
    # applies 4096 indices at a time.  Oracle: np.add.at for the valid case; for a bad index in
    # a later block (earlier blocks already applied), the table must come back bit-identical.
    rng = np.random.default_rng(3)
    m, n = 37, 5 * 4096 + 11
    idx = rng.integers(0, m, n)
    vals = 1 if scalar else random_values(rng, dtype, n)
    start = random_values(rng, dtype, m)
    table, expect = start.copy(), start.copy()
    kernels.scatter_add(table, idx, vals)
    np.add.at(expect, idx, vals)
    np.testing.assert_array_equal(table, expect)  # same order of additions: same bits
    for pos in (n - 1, 3 * 4096, 4096 + 7):
        bad = idx.copy()
        bad[pos] = m if pos % 2 else -1
        table = start.copy()
        with pytest.raises(IndexError, match=rf"at position {pos} is out of bounds for a table of size {m}"):
            kernels.scatter_add(table, bad, vals)
        assert table.tobytes() == start.tobytes()


def test_indices_at_the_bounds():
    table = np.zeros(5)
    kernels.scatter_add(table, [0, 4], [1.0, 2.0])
    assert table.tolist() == [1, 0, 0, 0, 2]
    assert kernels.gather(table, [4, 0]).tolist() == [2, 1]
    with pytest.raises(IndexError, match="size 0"):
        kernels.gather(np.zeros(0), [0])


def test_bad_arguments():
    with pytest.raises(TypeError, match="same_kind"):
        kernels.scatter_add(np.zeros(3, dtype=np.int64), [0], 1.5)
    with pytest.raises(TypeError, match="not supported"):
        kernels.scatter_add(np.zeros(3, dtype=np.int16), [0], 1)
    frozen = np.zeros(3)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kernels.scatter_add(frozen, [0], 1.0)
    with pytest.raises(ValueError, match="shape"):
        kernels.scatter_add(np.zeros(3), [0, 1], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="1-D"):
        kernels.gather(np.zeros((2, 2)), [0])
    with pytest.raises(TypeError, match="integers"):
        kernels.gather(np.zeros(3), [0.5])
    with pytest.raises(ValueError, match="out must be"):
        kernels.gather(np.zeros(3), [0, 1], out=np.empty(3))
