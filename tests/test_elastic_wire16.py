"""16-bit gradients (float16, bfloat16) in the parameter server's shared-window slots.

    python -m pytest -q tests/test_elastic_wire16.py
    mpiexec -n 2 python -m pytest -q --only-mpi tests/test_elastic_wire16.py   (and -n 3)

Oracles:

* the kernels (``hpcbsp.kernels.update``: ``convert`` into and out of 16-bit gradients,
  ``sgd_step`` reading one): ``hpcbsp.elastic.wire.bfloat16_bits`` / ``bfloat16_values`` (numpy
  bit arithmetic) for bfloat16 and numpy's own float16 conversions, bit for bit, on every one of
  the 65,536 16-bit patterns (NaNs with their payloads, infinities, subnormals, signed zeros) and
  on float32 and float64 values at and beside the rounding ties; the update against numpy's
  ``w - lr * g`` of the decoded gradient (``hpcbsp.kernels.reference.sgd_step``).
* the slots' memory: the window's bytes worked out by hand.
* a training run (a deterministic schedule: BSP, whose every update is the mean of all the
  workers' gradients of a round; ASP with one worker) through the slots against the same run
  with the gradients as messages (``$HPCBSP_SLOT_MEMORY_SHARE`` too small for the slots: the
  message path, with the weights still in the window): the final weights bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.elastic.coordinator import Coordinator
from hpcbsp.elastic.policies import make_policy
from hpcbsp.elastic.slots import slot_window_bytes, slot_window_fits
from hpcbsp.elastic.wire import Wire, bfloat16_bits, bfloat16_values
from hpcbsp.kernels import reference
from hpcbsp.kernels.update import convert, sgd_step

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
STORAGE = {"bfloat16": np.uint16, "float16": np.float16}


def _bits(x: np.ndarray) -> bytes:
    return x.tobytes()


def _decoded(fmt: str, bits: np.ndarray) -> np.ndarray:
    """The oracle's float32 values of 16-bit patterns."""
    return bfloat16_values(bits) if fmt == "bfloat16" else bits.view(np.float16).astype(np.float32)


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_every_16_bit_pattern_decodes_to_the_oracles_float32_bits(fmt):
    g = ALL16.view(STORAGE[fmt])
    out = np.empty(g.size, dtype=np.float32)
    convert(out, g)
    assert _bits(out) == _bits(_decoded(fmt, ALL16))  # (NaN payloads, signalling ones too)


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_every_16_bit_pattern_decodes_to_the_float64_value(fmt):
    g = ALL16.view(STORAGE[fmt])
    out = np.empty(g.size, dtype=np.float64)
    convert(out, g)
    with np.errstate(invalid="ignore"):  # (signalling NaNs)
        want = _decoded(fmt, ALL16).astype(np.float64)
    nan = np.isnan(want)
    assert nan.sum() == (2 * 1023 if fmt == "float16" else 2 * 127)  # (all-ones exponent, mantissa not 0)
    assert np.array_equal(np.isnan(out), nan)
    assert _bits(out[~nan]) == _bits(want[~nan])  # (signed zeros, subnormals, infinities)


def _edge_float32() -> np.ndarray:
    """float32 bit patterns at bfloat16's ties and beside them, around every exponent, with the
    specials (±0, subnormals, the largest finite, ±inf, quiet and signalling NaNs)."""
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    bits = (hi[:, None] | lows[None, :]).ravel()  # (every exponent, sign and NaN kind)
    return bits.view(np.float32)


def test_float32_rounds_to_bfloat16_as_the_wire_does_ties_to_even():
    x = _edge_float32()
    out = np.empty(x.size, dtype=np.uint16)
    convert(out, x)
    assert _bits(out) == _bits(bfloat16_bits(x))
    # Hand-worked cases: a tie goes to the even neighbour, just past it up; the largest float32
    # rounds to inf; a signalling NaN comes out quiet with its top bits.
    cases = {0x3F808000: 0x3F80, 0x3F818000: 0x3F82, 0x3F808001: 0x3F81, 0x3F807FFF: 0x3F80,
             0x7F7FFFFF: 0x7F80, 0xFF800000: 0xFF80, 0x7F800001: 0x7FC0, 0x00008000: 0x0000,
             0x00018000: 0x0002, 0x80000000: 0x8000}
    got = np.empty(len(cases), dtype=np.uint16)
    convert(got, np.array(list(cases), dtype=np.uint32).view(np.float32))
    assert got.tolist() == list(cases.values())


@pytest.mark.parametrize("streaming", [False, True])
def test_float64_rounds_to_float32_then_to_bfloat16_as_the_wire_does(streaming):
    rng = np.random.default_rng(3)
    with np.errstate(invalid="ignore"):  # (signalling NaNs)
        ties = _edge_float32()[::7].astype(np.float64)
    ties = ties[np.isfinite(ties)]
    # Beside a float32 value by less than its half ulp: the float32 rounding decides, then bfloat16's.
    nudged = np.concatenate([ties * (1 + 2.0 ** -40), ties * (1 - 2.0 ** -40), ties])
    x = np.concatenate([nudged, rng.standard_normal(10_007) * 10.0 ** rng.integers(-45, 39, 10_007),
                        [np.nan, -np.nan, np.inf, -np.inf, 1e300, -1e300, 1e-300]])
    for lo in (0, 1, 3):  # (unaligned starts of the slot, for the non-temporal stores' prologue)
        out = np.empty(x.size + lo, dtype=np.uint16)[lo:]
        with np.errstate(over="ignore"):
            convert(out, x, streaming=streaming)
            want = bfloat16_bits(x)
        assert _bits(out) == _bits(want)


def _half_edges(dtype: type) -> np.ndarray:
    """Values at half's rounding ties and beside them: every float32 sign, exponent and top 10
    mantissa bits with the 13 bits below at 0, 1, just under, at and just over the tie, and all
    ones; for float64 the same below the top 10 mantissa bits, for the exponents from 2^-30 to
    2^20 (half's subnormals to beyond its range), with infinities and NaNs."""
    if dtype == np.float32:
        top = np.arange(1 << 19, dtype=np.uint32) << np.uint32(13)
        lows = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF], dtype=np.uint32)
        return (top[:, None] | lows[None, :]).ravel().view(np.float32)
    exps = np.arange(1023 - 30, 1023 + 21, dtype=np.uint64)
    exps = np.concatenate([exps, [0, 0x7FF]]).astype(np.uint64)  # (zeros and subnormals; inf and NaN)
    mant = np.arange(1 << 10, dtype=np.uint64) << np.uint64(42)
    top = ((exps[:, None] << np.uint64(52)) | mant[None, :]).ravel()
    top = np.concatenate([top, top | np.uint64(1 << 63)])
    lows = np.array([0, 1, (1 << 41) - 1, 1 << 41, (1 << 41) + 1, (1 << 42) - 1], dtype=np.uint64)
    return (top[:, None] | lows[None, :]).ravel().view(np.float64)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_and_float64_round_to_float16_as_numpy_does(dtype, streaming):
    """Straight from the float64 (no float32 on the way: that would round twice)."""
    rng = np.random.default_rng(5)
    with np.errstate(all="ignore"):
        x = np.concatenate([_half_edges(dtype), _edge_float32().astype(dtype)[::3],
                            rng.standard_normal(5000) * 10.0 ** rng.integers(-9, 6, 5000)]).astype(dtype)
        out = np.empty(x.size, dtype=np.float16)
        convert(out, x, streaming=streaming)
        want = x.astype(np.float16)
    assert _bits(out) == _bits(want)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_the_update_reading_a_16_bit_gradient_is_numpys_update_with_the_decoded_one(fmt, dtype, streaming):
    rng = np.random.default_rng(11)
    n = ALL16.size + 3001  # every pattern, and a tail that is no block's multiple
    bits = np.concatenate([ALL16, rng.integers(0, 1 << 16, 3001).astype(np.uint16)])
    g = bits.view(STORAGE[fmt])
    w = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(dtype)
    w[:5] = [0.0, -0.0, np.inf, np.nan, 1e-42]
    want = w.copy()
    with np.errstate(all="ignore"):
        reference.sgd_step(want, _decoded(fmt, bits).astype(dtype), 0.1 / 3)
        sgd_step(w, g, 0.1 / 3, streaming=streaming)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(w), nan)
    assert _bits(w[~nan]) == _bits(want[~nan])


def test_conversions_between_two_16_bit_types_or_into_ints_are_refused():
    with pytest.raises(ValueError, match="convert: .*not both 16-bit"):
        convert(np.empty(4, dtype=np.uint16), np.empty(4, dtype=np.float16))
    with pytest.raises(ValueError, match="convert: "):
        convert(np.empty(4, dtype=np.int32), np.empty(4, dtype=np.float32))
    with pytest.raises(ValueError, match="sgd_step: "):
        sgd_step(np.zeros(4, dtype=np.float32), np.zeros(4, dtype=np.int16), 0.1)


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("policy", ["asp", "bsp"])
def test_the_coordinator_applies_a_16_bit_gradient_as_its_decoded_float32(fmt, policy):
    """ASP applies each push alone, straight from the 16-bit bits; BSP holds them (decoded into
    its rows) and applies the mean: both as pushes of the decoded float32 gradients."""
    rng = np.random.default_rng(2)
    size, workers = 5003, 2
    w0 = rng.standard_normal(size).astype(np.float32)
    wire = Wire(fmt)
    bits = [wire.encode(rng.standard_normal(size).astype(np.float32), wire.alloc(1, size)[0]) for _ in range(4)]
    raw, decoded = Coordinator(make_policy(policy), workers, w0, 0.05), Coordinator(make_policy(policy), workers, w0, 0.05)
    for k, b in enumerate(bits):
        for coord, g in ((raw, b), (decoded, wire.decode(b))):
            coord.push(k % workers, g, float(k))
    assert raw.version == decoded.version > 0
    assert _bits(raw.weights) == _bits(decoded.weights)


def test_16_bit_slots_take_two_bytes_a_value_in_the_window():
    # Hand-worked: 1,000,003 float32 weights = 4,000,012 bytes, padded to 4,000,064; a bfloat16
    # slot 2,000,006 bytes, padded to 2,000,064; 15 of them.
    assert slot_window_bytes(1_000_003, 4, 15, 2) == 4_000_064 + 15 * 2_000_064
    assert slot_window_bytes(1_000_003, 4, 15) == 16 * 4_000_064


def test_the_16_bit_window_fits_where_the_float32_one_does_not(monkeypatch):
    monkeypatch.setenv("HPCBSP_SLOT_MEMORY_SHARE", "0.5")
    count, workers = 1 << 20, 15  # 64 MiB of float32 slots and weights, 34 MiB with bfloat16 slots
    memory = 100 << 20  # half of it: 50 MiB
    assert slot_window_fits(count, 4, workers, memory, grad_itemsize=2) == (True, "")
    fits, why = slot_window_fits(count, 4, workers, memory)
    assert not fits and "slots would take 64.0 MiB (1,048,576 weights of 4 bytes + 15 workers x 1,048,576 " \
                        "gradient values of 4 bytes)" in why and "HPCBSP_SLOT_MEMORY_SHARE=0.5" in why
    fits, why = slot_window_fits(count, 4, 31, memory, grad_itemsize=2)  # 4 + 31 x 2 = 66 MiB
    assert not fits and "66.0 MiB" in why and "31 workers x 1,048,576 gradient values of 2 bytes" in why


def _gradient(worker: int, iteration: int, weights: np.ndarray, dtype: type) -> np.ndarray:
    """Of the weights, the worker and the iteration alone: magnitudes from float16's subnormals
    to thousands (every rounding path of both formats, no overflow), some exact zeros."""
    rng = np.random.default_rng([worker, iteration])
    g = rng.standard_normal(weights.size) * 10.0 ** rng.integers(-9, 4, weights.size)
    g[::97] = 0.0
    return (g + 0.5 * weights).astype(dtype)


def _run(comm, fmt: str, policy: str, dtype: type, grad_dtype: type, slots: bool, monkeypatch) -> tuple[bytes | None, int]:
    """One training run; rank 0's final weights' bytes (None elsewhere), and this rank's pushes
    through a slot."""
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.transport import SharedWeights
    from hpcbsp.elastic.worker import work

    P = 300_001  # two chunks of float32, three of float64
    if slots:
        monkeypatch.delenv("HPCBSP_SLOT_MEMORY_SHARE", raising=False)
    else:
        monkeypatch.setenv("HPCBSP_SLOT_MEMORY_SHARE", "1e-12")  # the gradients as messages
    writes = [0]
    push = SharedWeights.push

    def counted(self, *args) -> None:
        writes[0] += 1
        push(self, *args)
    monkeypatch.setattr(SharedWeights, "push", counted)
    w0 = np.random.default_rng(7).standard_normal(P).astype(dtype)
    me = comm.Get_rank()
    if me == 0:
        res = serve(comm, make_policy(policy), w0, 0.01, max_updates=12, timeout=60.0, grad_format=fmt)
        return res.weights.tobytes(), writes[0]
    it = [0]

    def grad_fn(weights: np.ndarray) -> np.ndarray:
        it[0] += 1
        return _gradient(me - 1, it[0], weights, grad_dtype)
    work(comm, grad_fn, P, dtype=dtype, timeout=60.0, grad_format=fmt)
    return None, writes[0]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("grad_dtype", ["weights'", "float64", "float16"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("policy", ["bsp", "asp"])
@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_a_run_through_16_bit_slots_gives_the_message_runs_weights_bit_for_bit(fmt, policy, dtype, grad_dtype,
                                                                               monkeypatch, capfd):
    """BSP at any number of workers, ASP with one (the schedules that fix every update's
    gradients); the gradient function returns the weights' dtype or float64 (converted into the
    slot as it is written), or float16 (copied into a float16 slot, encoded first for a
    bfloat16 one)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        if policy == "asp" and comm.Get_size() > 2:
            pytest.skip("ASP's order of updates with two workers or more is the arrivals' (not a fixed schedule)")
        gdt = {"float64": np.float64, "float16": np.float16}.get(grad_dtype, dtype)
        through_slots, slot_writes = _run(comm, fmt, policy, dtype, gdt, True, monkeypatch)
        as_messages, message_writes = _run(comm, fmt, policy, dtype, gdt, False, monkeypatch)
        if comm.Get_rank() == 0:
            assert through_slots == as_messages
            assert "gradients as messages" in capfd.readouterr().err  # (the second run's fall-back)
        else:
            assert slot_writes > 0 and message_writes == 0
    finally:
        comm.Free()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_a_simulated_runs_roundtrip_is_what_encode_then_decode_give(fmt, dtype):
    """The simulator's and the tests' replays round as the messages and the slots do (a float64
    gradient rounded once, straight to half; to float32, then to bfloat16, as the wire does)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(20_000) * 10.0 ** rng.integers(-9, 4, 20_000)).astype(dtype)
    wire = Wire(fmt)
    assert _bits(wire.roundtrip(x)) == _bits(wire.decode(wire.encode(x, wire.alloc(1, x.size)[0])))
