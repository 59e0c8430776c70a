# cython: language_level=3
"""Exact, reproducible summation of float64: a fixed-point superaccumulator.

A finite double is ``m * 2**(e - 1075)`` with an integer mantissa ``m < 2**53`` (implicit bit
included) and the 11-bit exponent field ``e`` (subnormals: ``e = 0``, scale as ``e = 1``).  The
sum of any doubles is therefore an integer multiple of ``2**-1074``, which we keep exactly in
``NCHUNK`` signed int64 chunks of 32 bits each (chunk ``i`` weighs ``2**(32*i - 1074)``).  The
values reach the chunks by one of two exact paths, chosen per block of ``XS_BLOCK`` values:

* **extraction** (``exactsum_blocks.h``, the fast path): a block whose values lie within about
  ``2**48`` of its largest one is split, by two rounds of adding and subtracting a power-of-two
  constant, into two integers exactly; their sum goes into the chunks.  Vectorised, it runs at a
  good fraction of ``np.sum``'s speed.  It needs round-to-nearest and honoured subnormals,
  checked on every call;
* **integer bins** (any values, any range): each mantissa, as an unsigned integer, is added
  into a bin indexed by the top 12 bits of the double (sign and exponent):
  ``bins[bits >> 52] += m``.  A bin takes at most ``2**11 - 1`` such adds before it could
  overflow, so every ``BLOCK`` elements the bins in use (tracked in groups of 64) are *flushed*
  into the chunks: the rare carry normalisation.  ``NSET`` interleaved bin sets keep consecutive
  elements of similar size from forming one long store-to-load dependency chain.  A table lookup
  by the same 12 bits gives the implicit bit to OR in (none for zeros and subnormals, whose
  exponent field 0 weighs as field 1), so they need no branch; only infinities and NaNs take one.

Either way the chunks end normalised: chunks ``0..NCHUNK-2`` in ``[0, 2**32)``, the top chunk
holding the sign.  The state handed out is the normalised chunks plus counters of NaNs, +inf,
-inf and elements.  Integer addition of states is exact and associative, and with chunks below
``2**32``, 2**30 states can be added in int64 with room to spare (the runtime adds them with an
MPI SUM Allreduce); :func:`round_state` then rounds once, correctly, to float64, in integer
arithmetic: the result is the same whatever the floating-point environment.
"""
import numpy as np
from libc.math cimport ldexp
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__GNUC__) || defined(__clang__)
    /* p + k doubles, formed as an integer: as a pointer it would be undefined past the end */
    #define HPCBSP_PREFETCH_AT(p, k) \
        __builtin_prefetch((const void *)((uintptr_t)(p) + (uintptr_t)(k) * sizeof(double)))
    #else
    #define HPCBSP_PREFETCH_AT(p, k) ((void)0)
    #endif
    """
    # A hint, never a fault (an address past the end is fine): the hot loop's stores into the
    # bins leave the hardware prefetcher behind on long arrays, by 3x in measurements here.
    void HPCBSP_PREFETCH_AT(const double* p, Py_ssize_t k) nogil

cdef extern from "exactsum_blocks.h":
    int hpcbsp_fp_env_allows_extraction() noexcept nogil
    int hpcbsp_exact_block_f64(const double* p, Py_ssize_t n, int64_t* hi, int64_t* lo,
                               int* pos) noexcept nogil
    enum:
        XS_BLOCK "HPCBSP_XS_BLOCK"
        XS_LEVEL_SHIFT "HPCBSP_XS_LEVEL_SHIFT"
        XS_AVAILABLE "HPCBSP_XS_AVAILABLE"
    long hpcbsp_xs_get_mxcsr() noexcept nogil
    void hpcbsp_xs_set_mxcsr(long value) noexcept nogil

cdef enum:
    NCHUNK = 67            # 67 * 32 bits cover 2**-1074 .. beyond n * 2**1024 for any n < 2**63
    I_NAN = NCHUNK         # counters after the chunks
    I_POSINF = NCHUNK + 1
    I_NEGINF = NCHUNK + 2
    I_COUNT = NCHUNK + 3
    STATE_LEN = NCHUNK + 4
    NBIN = 4096            # sign bit + 11 exponent bits
    # Bin set k starts SET_STRIDE * k words into the bins.  NBIN words alone would put the same
    # bin of every set exactly 32 KiB apart, a multiple of 4 KiB: loads and stores to them then
    # alias in the CPU's store-to-load disambiguation and serialise the interleaved sets (2.6x
    # slower on an AMD EPYC here).  24 more words shift each set by 192 bytes.
    SET_STRIDE = NBIN + 24
    NSET = 4
    # Each set gets one element in NSET, so a bin takes at most 2047 mantissas (< 2**53 each)
    # per block: 2047 * (2**53 - 1) < 2**64, the capacity of a uint64 bin.
    BLOCK = NSET * 2047
    PREFETCH_AHEAD = 512   # elements (4 KiB of float64)
    BINS_RUN = BLOCK       # values the bins take when the fast path refuses a block

STATE_LENGTH = STATE_LEN

cdef uint64_t MANT = (<uint64_t>1 << 52) - 1
cdef uint64_t IMPLICIT = <uint64_t>1 << 52
cdef uint64_t SIGN = <uint64_t>1 << 63
cdef uint64_t INF_BITS = <uint64_t>0x7FF << 52
cdef int64_t MASK32 = 0xFFFFFFFF


cdef inline uint64_t _bits(const double* q) noexcept nogil:
    """The bit pattern of *q (memcpy is the well-defined way to read it; it compiles to a load)."""
    cdef uint64_t b
    memcpy(&b, q, 8)
    return b


cdef void _count_special(uint64_t b, int64_t* st) noexcept nogil:
    """Count an infinity or a NaN (never binned)."""
    if b & MANT:
        st[I_NAN] += 1
    elif b & SIGN:
        st[I_NEGINF] += 1
    else:
        st[I_POSINF] += 1


# Per top-12-bit pattern (sign and exponent): what to OR into the mantissa before binning it.
# The implicit bit for normal numbers, 0 for zeros and subnormals (exponent field 0, which
# weigh as field 1 without the implicit bit), and SIGN for infinities and NaNs: the flag that
# sends them to _count_special.
cdef uint64_t _IMPLICIT_OF[NBIN]
cdef Py_ssize_t _i
for _i in range(NBIN):
    _IMPLICIT_OF[_i] = SIGN if (_i & 0x7FF) == 0x7FF else (0 if (_i & 0x7FF) == 0 else IMPLICIT)


cdef inline void _add_chunks(int64_t* chunks, uint64_t u, Py_ssize_t pos, bint neg) noexcept nogil:
    """chunks += (-1 if neg else 1) * u * 2**pos (in units of 2**-1074), as three 32-bit pieces."""
    cdef Py_ssize_t ix = pos >> 5
    cdef int low = pos & 31
    cdef uint64_t c0 = (u << low) & <uint64_t>MASK32
    cdef uint64_t rest = u >> (32 - low)       # shift in 1..32, never 64
    cdef uint64_t c1 = rest & <uint64_t>MASK32
    cdef uint64_t c2 = rest >> 32
    if neg:
        chunks[ix] -= <int64_t>c0
        chunks[ix + 1] -= <int64_t>c1
        chunks[ix + 2] -= <int64_t>c2
    else:
        chunks[ix] += <int64_t>c0
        chunks[ix + 1] += <int64_t>c1
        chunks[ix + 2] += <int64_t>c2


cdef inline void _normalise(int64_t* chunks) noexcept nogil:
    """Propagate carries: chunks 0..NCHUNK-2 into [0, 2**32), the top chunk takes the rest."""
    cdef Py_ssize_t i
    cdef int64_t carry
    for i in range(NCHUNK - 1):
        carry = chunks[i] >> 32          # arithmetic shift: floor division by 2**32
        chunks[i] = chunks[i] & MASK32
        chunks[i + 1] += carry


cdef void _flush(uint64_t* bins, uint64_t touched, int64_t* st) noexcept nogil:
    """Move every bin of the touched groups (64 bins each, every set) into the chunks, clear
    them and normalise the chunks.

    Bins 0 and 0x800 hold subnormal mantissas, which weigh as exponent field 1 (zeros add 0).
    """
    cdef Py_ssize_t k, g, i, e
    cdef uint64_t v
    cdef uint64_t* row
    for k in range(NSET):
        row = bins + k * SET_STRIDE
        for g in range(NBIN // 64):
            if not (touched >> g) & 1:
                continue
            for i in range(g * 64, g * 64 + 64):
                v = row[i]
                if v != 0:
                    e = i & 0x7FF
                    # e == 0x7FF cannot happen: infinities and NaNs are counted, never binned.
                    _add_chunks(st, v, e - 1 if e else 0, i >= 0x800)
                    row[i] = 0
    _normalise(st)


cdef void _accumulate_bins(const double* p, Py_ssize_t sp, Py_ssize_t n, uint64_t* bins,
                           int64_t* st) noexcept nogil:
    """The general path: any values, any range.  Leaves the chunks normalised."""
    cdef Py_ssize_t start = 0, end, i, k
    cdef uint64_t b, idx, touched, imp
    while start < n:
        end = n if n - start < BLOCK else start + BLOCK
        # Bit g of ``touched``: some bin in 64*g .. 64*g+63 was used in this block (any set).
        touched = 0
        i = start
        # Element i goes to bin set (i - start) % NSET: at most BLOCK / NSET adds per bin.
        while i + NSET <= end:
            HPCBSP_PREFETCH_AT(p, (i + PREFETCH_AHEAD) * sp)
            for k in range(NSET):
                b = _bits(p + (i + k) * sp)
                idx = b >> 52
                touched |= (<uint64_t>1) << (idx >> 6)
                imp = _IMPLICIT_OF[idx]
                if imp & SIGN:
                    _count_special(b, st)
                else:
                    bins[k * SET_STRIDE + idx] += (b & MANT) | imp
            i += NSET
        while i < end:
            b = _bits(p + i * sp)
            idx = b >> 52
            touched |= (<uint64_t>1) << (idx >> 6)
            k = (i - start) % NSET
            imp = _IMPLICIT_OF[idx]
            if imp & SIGN:
                _count_special(b, st)
            else:
                bins[k * SET_STRIDE + idx] += (b & MANT) | imp
            i += 1
        _flush(bins, touched, st)
        start = end


cdef inline void _add_int(int64_t* st, int64_t v, Py_ssize_t pos) noexcept nogil:
    """chunks += v * 2**pos (in units of 2**-1074)."""
    if v > 0:
        _add_chunks(st, <uint64_t>v, pos, False)
    elif v < 0:
        _add_chunks(st, <uint64_t>0 - <uint64_t>v, pos, True)


# The fast path's known-answer test: -1 not run yet, then 0 failed or 1 passed.  Run the first
# time the floating-point environment allows extraction (a data race between threads is benign:
# each computes the same answer).
cdef int _extraction_trusted = -1


cdef bint _extraction_self_test(uint64_t* bins) noexcept nogil:
    """Compare the fast path with the integer bins on one block whose exact sum needs every bit
    of both extraction levels.  A compiler that reassociated the extraction arithmetic (flags
    that no predefined macro reveals) fails it, and the fast path then stays off."""
    cdef double x[40]
    cdef int64_t by_bins[STATE_LEN]
    cdef int64_t by_extraction[STATE_LEN]
    cdef int64_t hi = 0, lo = 0
    cdef int pos = 0
    cdef Py_ssize_t i
    for i in range(STATE_LEN):
        by_bins[i] = 0
        by_extraction[i] = 0
    for i in range(40):
        x[i] = (-1.0 if i % 3 == 0 else 1.0) * (1.0 + ldexp(<double>i, -50))
    x[7] = ldexp(3.0, -60)
    x[13] = -(ldexp(1.0, -45) + ldexp(1.0, -97))   # 53 significant bits
    x[22] = ldexp(5.0, -99)
    x[31] = -0.0
    if not hpcbsp_exact_block_f64(x, 40, &hi, &lo, &pos):
        return False
    _add_int(by_extraction, hi, pos)
    _add_int(by_extraction, lo, pos - XS_LEVEL_SHIFT)
    _normalise(by_extraction)
    _accumulate_bins(x, 1, 40, bins, by_bins)
    for i in range(NCHUNK):
        if by_bins[i] != by_extraction[i]:
            return False
    return True


cdef bint _extraction_verified(uint64_t* bins) noexcept nogil:
    """The known-answer test's verdict, running the test the first time (``bins``: zeroed
    bins this caller holds, left zeroed)."""
    global _extraction_trusted
    if _extraction_trusted < 0:
        _extraction_trusted = 1 if _extraction_self_test(bins) else 0
    return _extraction_trusted == 1


cdef inline bint _extraction_allowed(uint64_t* bins) noexcept nogil:
    """The fast path may run now: compiled in, passed its known-answer test, and the calling
    thread's floating-point environment is round-to-nearest without FTZ/DAZ."""
    return hpcbsp_fp_env_allows_extraction() and _extraction_verified(bins)


cdef void _accumulate(const double* p, Py_ssize_t sp, Py_ssize_t n, uint64_t* bins,
                      int64_t* st) noexcept nogil:
    """Add p[0], p[sp], ... p[(n-1)*sp] into the chunks and counters; leaves them normalised.

    Blocks of XS_BLOCK values take the extraction fast path (exactsum_blocks.h) where it applies;
    a block it refuses, and the next few with it (a wide range tends to persist), take the bins.
    """
    cdef Py_ssize_t start = 0, m, j, pending = 0
    cdef int64_t hi, lo
    cdef int pos
    cdef const double* src
    cdef double buf[XS_BLOCK]
    if not _extraction_allowed(bins):
        _accumulate_bins(p, sp, n, bins, st)
        st[I_COUNT] += n
        return
    while start < n:
        m = n - start if n - start < XS_BLOCK else XS_BLOCK
        if sp == 1:
            src = p + start
        else:
            for j in range(m):
                buf[j] = p[(start + j) * sp]
            src = buf
        if hpcbsp_exact_block_f64(src, m, &hi, &lo, &pos):
            _add_int(st, hi, pos)
            _add_int(st, lo, pos - XS_LEVEL_SHIFT)
            pending += 1
            # Each block adds below 2**33 to a chunk: normalise long before int64 could overflow.
            if pending == 1 << 20:
                _normalise(st)
                pending = 0
            start += m
        else:
            m = n - start if n - start < BINS_RUN else BINS_RUN
            _accumulate_bins(p + start * sp, sp, m, bins, st)
            start += m
    _normalise(st)
    st[I_COUNT] += n


# The bins of one accumulation: 128 KiB, too much to calloc per call (that maps fresh pages).
# Every flush clears the bins it used, so this buffer is all zeros between calls; a second
# thread arriving while it is in use (the flag is tested and set under the GIL) gets its own.
cdef uint64_t _shared_bins[NSET * SET_STRIDE]
cdef bint _shared_busy = False


cdef uint64_t* _take_bins(bint* own) except NULL:
    """The shared bins, or (``*own`` set) fresh ones when another thread holds them.  Call with
    the GIL held; hand them back with :func:`_give_back_bins`."""
    global _shared_busy
    cdef uint64_t* bins
    own[0] = _shared_busy
    if own[0]:
        bins = <uint64_t*>calloc(NSET * SET_STRIDE, sizeof(uint64_t))
        if bins == NULL:
            raise MemoryError("exact sum: cannot allocate the accumulator bins")
        return bins
    _shared_busy = True
    return _shared_bins


cdef void _give_back_bins(uint64_t* bins, bint own) noexcept:
    global _shared_busy
    if own:
        free(bins)
    else:
        _shared_busy = False


def accumulate(const double[:] x, int64_t[::1] state):
    """Add the float64 values ``x`` exactly into ``state`` in place; a normalised state stays
    normalised.  Returns nothing.
    """
    if state.shape[0] != STATE_LEN:
        raise ValueError(f"exact-sum state must have length {STATE_LEN}, not {state.shape[0]}")
    cdef Py_ssize_t n = x.shape[0]
    if n == 0:
        return
    if x.strides[0] % 8 != 0:
        raise ValueError(f"array stride {x.strides[0]} is not a multiple of 8")
    cdef Py_ssize_t sp = x.strides[0] // 8
    cdef bint own
    cdef uint64_t* bins = _take_bins(&own)
    with nogil:
        _accumulate(&x[0], sp, n, bins, &state[0])
    _give_back_bins(bins, own)


def normalised(const int64_t[:] state):
    """A normalised copy of a state (for instance a sum of states): chunks below the top one in
    ``[0, 2**32)``, the same exact value."""
    if state.shape[0] != STATE_LEN:
        raise ValueError(f"exact-sum state must have length {STATE_LEN}, not {state.shape[0]}")
    out = np.array(state, dtype=np.int64)
    cdef int64_t[::1] view = out
    _normalise(&view[0])
    return out


cdef uint64_t _round_magnitude(const int64_t* c) noexcept nogil:
    """The bits of the float64 nearest to sum(c[i] * 2**(32*i - 1074)), ties to even, for
    normalised, non-negative chunks (+inf beyond the float64 range).

    The 64 bits from the highest set bit down go into ``w``; every bit below them only matters
    as a "sticky" bit (is the rest non-zero?), which is ORed into the lowest bit of ``w``.  ``w``
    is then rounded to 53 bits and the double assembled from its fields, all in integers: the
    result does not depend on the floating-point rounding mode or on flush-to-zero settings.
    A sum below 2**-1022 is a multiple of 2**-1074 under 2**52, which needs no rounding and is
    its own subnormal bit pattern.
    """
    cdef Py_ssize_t h = NCHUNK - 1, j
    cdef uint64_t w, below, top, mant, rest
    cdef int lz = 0
    cdef int64_t field
    while h >= 0 and c[h] == 0:
        h -= 1
    if h < 0:
        return 0
    top = <uint64_t>c[h]
    if top >> 32:
        return INF_BITS            # at least 2**(32*66 + 32 - 1074): far beyond float64
    while not (top << lz) & (<uint64_t>1 << 31):
        lz += 1
    # w = chunks h, h-1 and the top lz bits of h-2, left-aligned (missing chunks are 0): its
    # bit 63 is set and its bit 0 weighs 2**(32*(h-1) - lz - 1074).
    w = (top << 32) | (<uint64_t>c[h - 1] if h >= 1 else 0)
    below = <uint64_t>c[h - 2] if h >= 2 else 0
    if lz:
        w = (w << lz) | (below >> (32 - lz))
        below &= (<uint64_t>1 << (32 - lz)) - 1
    for j in range(h - 2):
        below |= <uint64_t>c[j]
    w |= below != 0
    # The top 53 bits, rounded to nearest, ties to even, by the 11 below them (sticky included).
    mant = w >> 11
    rest = w & 0x7FF
    if rest > 0x400 or (rest == 0x400 and (mant & 1)):
        mant += 1
    # The value is mant * 2**(field - 1075), mant in [2**52, 2**53]
    field = 32 * (h - 1) - lz - 1074 + 11 + 1075
    if mant >> 53:
        mant >>= 1
        field += 1
    if field >= 0x7FF:
        return INF_BITS
    if field >= 1:
        return (<uint64_t>field << 52) | (mant & MANT)
    # Subnormal: exact, mant's low 1 - field bits are zero.
    return mant >> (1 - field)


def round_state(const int64_t[:] state):
    """The float64 nearest (ties to even) to the exact sum held in ``state``.

    IEEE rules for special values: any NaN, or both infinities, give NaN; one kind of infinity
    gives that infinity; a finite exact sum beyond the float64 range gives +-inf; an exact zero
    is +0.0 (as ``math.fsum`` and ``np.sum`` give, even when every element is -0.0).
    """
    if state.shape[0] != STATE_LEN:
        raise ValueError(f"exact-sum state must have length {STATE_LEN}, not {state.shape[0]}")
    cdef int64_t c[STATE_LEN]
    cdef Py_ssize_t i
    cdef bint negative
    for i in range(STATE_LEN):
        c[i] = state[i]
    if c[I_NAN] > 0 or (c[I_POSINF] > 0 and c[I_NEGINF] > 0):
        return float("nan")
    if c[I_POSINF] > 0:
        return float("inf")
    if c[I_NEGINF] > 0:
        return float("-inf")
    _normalise(c)
    negative = c[NCHUNK - 1] < 0
    if negative:
        # Two's complement of the whole number: negate every chunk, carry again.
        for i in range(NCHUNK):
            c[i] = -c[i]
        _normalise(c)
    cdef uint64_t b = _round_magnitude(c)
    cdef double r
    if negative:
        b |= SIGN
    memcpy(&r, &b, 8)
    return r


# -- For the tests: look at the fast path directly ------------------------------------------------

def _extraction_ready():
    """True when blocks may take the extraction fast path now: compiled in, known-answer test
    passed, round-to-nearest, no flush-to-zero, no denormals-are-zero."""
    cdef bint own
    cdef uint64_t* bins = _take_bins(&own)
    cdef bint allowed = _extraction_allowed(bins)
    _give_back_bins(bins, own)
    return allowed


def _extraction_self_test_passed():
    """The known-answer test's verdict (runs it now if it has not run): True or False."""
    cdef bint own
    cdef uint64_t* bins = _take_bins(&own)
    cdef bint verified = _extraction_verified(bins)
    _give_back_bins(bins, own)
    return verified


def _extract_block(const double[::1] x):
    """The fast path's answer for one block, ``(hi, lo, pos)`` meaning
    ``hi * 2**(pos - 1074) + lo * 2**(pos - 51 - 1074)``, or None where it refuses the block."""
    cdef int64_t hi = 0, lo = 0
    cdef int pos = 0
    if x.shape[0] > XS_BLOCK:
        raise ValueError(f"a block holds at most {XS_BLOCK} values")
    if x.shape[0] == 0:
        return (0, 0, XS_LEVEL_SHIFT)
    if not hpcbsp_exact_block_f64(&x[0], x.shape[0], &hi, &lo, &pos):
        return None
    return (hi, lo, pos)


def _set_ftz_daz(bint ftz, bint daz):
    """Set the SSE flush-to-zero and denormals-are-zero flags; returns a token for
    :func:`_restore_fp_flags`, or None where the CPU has no such register."""
    cdef long old = hpcbsp_xs_get_mxcsr()
    if old < 0:
        return None
    # FTZ is bit 15, DAZ bit 6
    hpcbsp_xs_set_mxcsr((old & ~0x8040) | (0x8000 if ftz else 0) | (0x0040 if daz else 0))
    return old


def _restore_fp_flags(long token):
    """Write back the register value a :func:`_set_ftz_daz` call returned (or any other)."""
    hpcbsp_xs_set_mxcsr(token)


def _fp_env_ready():
    """True when the calling thread's floating-point environment allows the fast path (the
    per-call probe alone, without the known-answer test)."""
    return bool(hpcbsp_fp_env_allows_extraction())


#: Whether the fast path was compiled in (GCC-compatible compiler, no fast-math flags).
XS_COMPILED_IN = bool(XS_AVAILABLE)
XS_BLOCK_VALUES = XS_BLOCK
XS_SHIFT = XS_LEVEL_SHIFT
