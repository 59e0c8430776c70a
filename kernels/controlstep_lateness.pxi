# The lateness watch of the control step (included by _controlstep.pyx, after its enums and
# _now): which rank arrived last at each of the last LATE_WINDOW supersteps, from the record's
# sixth field, and the one line when one rank was late in LATE_COUNT of them.

cdef class Lateness:
    """Who arrived last at the control steps of the last :data:`LATE_WINDOW` supersteps.

    ``Lateness(rows, rank, threshold, said)``: ``rows`` is the ledger's :class:`Rows` (a rank's
    work in a superstep began when its last row ended), ``rank`` this rank, ``threshold`` the
    seconds by which the latest rank's work must exceed the earliest's for it to count as late,
    ``said`` None or ``said(rank, count, window, mean_seconds)``, called when one rank was late
    in at least :data:`LATE_COUNT` of the last :data:`LATE_WINDOW` steps (at most once per
    window).  :meth:`packed` is this rank's ``late`` field; :meth:`observe` reads a reduced one.
    ``last_rank`` and ``last_by`` (seconds) are the last step's latest rank and its lead over the
    earliest (what one MAX reduction gives: not the median, which the offline report uses).
    """

    cdef Rows _rows
    cdef int64_t _me
    cdef public double threshold
    cdef public object said
    cdef int64_t _ring[LATE_WINDOW_C]
    cdef double _by[LATE_WINDOW_C]
    cdef int _pos
    cdef int64_t _seen
    cdef int64_t _quiet_until
    cdef readonly int64_t last_rank
    cdef readonly double last_by

    def __init__(self, Rows rows not None, int64_t rank, double threshold, object said=None):
        if not 0 <= rank < (1 << RANK_BITS_C):
            raise ValueError(f"Lateness: rank {rank} does not fit in {RANK_BITS} bits")
        self._rows = rows
        self._me = rank
        self.threshold = threshold
        self.said = said
        for i in range(LATE_WINDOW_C):
            self._ring[i] = -1
            self._by[i] = 0.0
        self._pos = 0
        self._seen = 0
        self._quiet_until = 0
        self.last_rank = -1
        self.last_by = 0.0

    cdef inline int64_t _packed(self, double now) noexcept:
        cdef double work = now - self._rows._last_end
        cdef int64_t us = <int64_t>(work * 1e6) if work > 0 else 0
        return (us << RANK_BITS_C) | self._me

    def packed(self):
        """This rank's ``late`` field now."""
        return self._packed(_now())

    cdef int _observe(self, int64_t top, int64_t bottom) except -1:
        cdef int64_t rank = top & ((1 << RANK_BITS_C) - 1)
        cdef double by = <double>((top >> RANK_BITS_C) - (bottom >> RANK_BITS_C)) * 1e-6
        cdef int k, count = 0, at = self._pos
        cdef double total = 0.0
        self.last_rank = rank
        self.last_by = by
        self._pos = at + 1 if at + 1 < LATE_WINDOW_C else 0
        self._seen += 1
        if by <= self.threshold:
            self._ring[at] = -1
            return 0
        self._ring[at] = rank
        self._by[at] = by
        if self._seen < self._quiet_until:
            return 0
        for k in range(LATE_WINDOW_C):
            if self._ring[k] == rank:
                count += 1
                total += self._by[k]
        if count >= LATE_COUNT_C:
            self._quiet_until = self._seen + LATE_WINDOW_C
            if self.said is not None:
                self.said(rank, count, LATE_WINDOW_C, total / count)
        return 0

    def pack(self, bytearray buf not None, int64_t kind, int64_t step, int64_t sig, int64_t data, int64_t gets):
        """Write the 12-word record (the 5 fields, this rank's ``late`` field, their negations)
        into ``buf``: the Python control step's, in one call."""
        cdef int64_t r[12]
        cdef int i
        if len(buf) < sizeof(r):
            raise ValueError(f"Lateness.pack: a buffer of {len(buf)} bytes, not {sizeof(r)}")
        r[0] = kind
        r[1] = step
        r[2] = sig
        r[3] = data
        r[4] = gets
        r[5] = self._packed(_now())
        for i in range(6):
            r[6 + i] = -r[i]
        memcpy(<char *>buf, r, sizeof(r))

    def unpack(self, bytearray buf not None):
        """Read a reduced 12-word record from ``buf``: observe its ``late`` field (where the kind,
        step and signature agree: otherwise it means nothing and the caller raises) and return
        the 10 words of the plain record, ``(kind, step, sig, data, gets, -kind, ..., -gets)``."""
        cdef int64_t r[12]
        if len(buf) < sizeof(r):
            raise ValueError(f"Lateness.unpack: a buffer of {len(buf)} bytes, not {sizeof(r)}")
        memcpy(r, <char *>buf, sizeof(r))
        if not (r[0] + r[6] or r[1] + r[7] or r[2] + r[8]):
            self._observe(r[5], -r[11])
        return (r[0], r[1], r[2], r[3], r[4], r[6], r[7], r[8], r[9], r[10])

    def observe(self, int64_t top, int64_t bottom):
        """Read a reduced record's ``late`` field (``top``, its MAX) and the negation of its
        negation's MAX (``bottom``, the earliest rank's field)."""
        self._observe(top, bottom)
