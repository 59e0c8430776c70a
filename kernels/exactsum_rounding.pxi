# The exact sum's rounding (included by _exactsum.pyx): a state to the nearest float64, in integer
# arithmetic only, so the result does not depend on the floating-point environment.

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
