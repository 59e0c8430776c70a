# The exact sum's general path (included by _exactsum.pyx): integer bins indexed by sign and
# exponent, flushed into the chunks every BLOCK values; and the bins' memory, shared between calls.

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

cdef enum:
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
