# cython: language_level=3
"""Exact, reproducible summation of float64: a fixed-point superaccumulator.

A finite double is ``m * 2**(e - 1075)`` with an integer mantissa ``m < 2**53`` (implicit bit
included) and the 11-bit exponent field ``e`` (subnormals: ``e = 0``, scale as ``e = 1``).  The
sum of any doubles is therefore an integer multiple of ``2**-1074``, which we keep exactly in
``NCHUNK`` signed int64 chunks of 32 bits each (chunk ``i`` weighs ``2**(32*i - 1074)``).  The
values reach the chunks by one of two exact paths, chosen per block of ``XS_BLOCK`` values:

* **extraction** (the fast path: ``exactsum_blocks.h``, its glue and known-answer test in
  ``exactsum_extraction.pxi``): a block whose values lie within about ``2**48`` of its largest
  one is split, by two rounds of adding and subtracting a power-of-two constant, into two
  integers exactly; their sum goes into the chunks.  Vectorised, it runs at a good fraction of
  ``np.sum``'s speed.  It needs round-to-nearest and honoured subnormals, checked on every call;
* **integer bins** (``exactsum_bins.pxi``; any values, any range): each mantissa, as an unsigned
  integer, is added into a bin indexed by the top 12 bits of the double (sign and exponent):
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
MPI SUM Allreduce); :func:`round_state` (``exactsum_rounding.pxi``) then rounds once, correctly,
to float64, in integer arithmetic: the result is the same whatever the floating-point environment.

This file holds the state's layout and the chunk arithmetic both paths share, the choice of path
per block (``_accumulate``) and the functions Python calls; the three algorithms are included.
"""
import numpy as np
from libc.math cimport ldexp
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

cdef enum:
    NCHUNK = 67            # 67 * 32 bits cover 2**-1074 .. beyond n * 2**1024 for any n < 2**63
    I_NAN = NCHUNK         # counters after the chunks
    I_POSINF = NCHUNK + 1
    I_NEGINF = NCHUNK + 2
    I_COUNT = NCHUNK + 3
    STATE_LEN = NCHUNK + 4

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


# -- The chunks: adding integers into them, carrying (both paths end here) ---------------------

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


cdef inline void _add_int(int64_t* st, int64_t v, Py_ssize_t pos) noexcept nogil:
    """chunks += v * 2**pos (in units of 2**-1074)."""
    if v > 0:
        _add_chunks(st, <uint64_t>v, pos, False)
    elif v < 0:
        _add_chunks(st, <uint64_t>0 - <uint64_t>v, pos, True)


include "exactsum_bins.pxi"
include "exactsum_extraction.pxi"


# -- Accumulating: blocks by extraction where it applies, else by the bins ----------------------

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


include "exactsum_rounding.pxi"
