# The exact sum's fast path (included by _exactsum.pyx): the C of exactsum_blocks.h, which turns a
# block into two integers by error-free extraction, and its known-answer test against the bins.

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


# -- Testing hooks (hpcbsp.kernels.exact_sum_fastpath): the fast path looked at directly --------

def extraction_ready():
    """True when blocks may take the extraction fast path now: compiled in, known-answer test
    passed, round-to-nearest, no flush-to-zero, no denormals-are-zero."""
    cdef bint own
    cdef uint64_t* bins = _take_bins(&own)
    cdef bint allowed = _extraction_allowed(bins)
    _give_back_bins(bins, own)
    return allowed


def extraction_self_test_passed():
    """The known-answer test's verdict (runs it now if it has not run): True or False."""
    cdef bint own
    cdef uint64_t* bins = _take_bins(&own)
    cdef bint verified = _extraction_verified(bins)
    _give_back_bins(bins, own)
    return verified


def extract_block(const double[::1] x):
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


def set_ftz_daz(bint ftz, bint daz):
    """Set the SSE flush-to-zero and denormals-are-zero flags; returns a token for
    :func:`restore_fp_flags`, or None where the CPU has no such register."""
    cdef long old = hpcbsp_xs_get_mxcsr()
    if old < 0:
        return None
    # FTZ is bit 15, DAZ bit 6
    hpcbsp_xs_set_mxcsr((old & ~0x8040) | (0x8000 if ftz else 0) | (0x0040 if daz else 0))
    return old


def restore_fp_flags(long token):
    """Write back the register value a :func:`set_ftz_daz` call returned (or any other)."""
    hpcbsp_xs_set_mxcsr(token)


def fp_env_ready():
    """True when the calling thread's floating-point environment allows the fast path (the
    per-call probe alone, without the known-answer test)."""
    return bool(hpcbsp_fp_env_allows_extraction())


#: Whether the fast path was compiled in (GCC-compatible compiler, no fast-math flags).
XS_COMPILED_IN = bool(XS_AVAILABLE)
XS_BLOCK_VALUES = XS_BLOCK
XS_SHIFT = XS_LEVEL_SHIFT
