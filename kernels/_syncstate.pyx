# cython: language_level=3
"""What the compiled empty sync writes, kept in C: a context's superstep :class:`Counter` and its
ledger's :class:`Rows`.

:class:`Rows` keeps the ledger's most recent rows in a ring of ``window`` rows (80 bytes each: two
int64 for the index and the label's number, three times, five traffic counts) and running
aggregates over every row ever appended (count, totals and maxima of each metric, the same per
label), so that its memory does not grow with the number of supersteps.  Appending one costs a
store and a few additions, not Python objects.  A ``sink`` (a callable, given the rows) is called
whenever ``flush_every`` rows have been appended since ``flushed``: it writes them out (the
ledger's stream) and moves ``flushed``; ``flush_every`` is at most the window, so that no row
leaves the ring before the sink has seen it.  :class:`Counter` is the superstep counter,
``value``.  The compiled control step (``kernels/_controlstep.pyx``: ``RecordStep.agree_row`` and
``plain_sync``) appends a row and moves the counter through their C interface
(``hpcbsp/kernels/_syncstate.pxd``, beside the module), without the interpreter; the runtime's
ledger (:mod:`hpcbsp.runtime.superstep.ledger`) and its ``superstep`` property read them.
"""
from libc.stdint cimport int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

#: The metrics of a row, in the order of the aggregates' tuples.
METRICS = ("work_s", "sync_s", "bytes_out", "bytes_in", "msgs_out", "msgs_in", "records")
#: The fields of a row as ``rows[i]`` gives them (and of its 80 bytes, in this order).
FIELDS = ("index", "label", "t_began", "t_sync", "t_end", "bytes_out", "bytes_in", "msgs_out", "msgs_in",
          "records")
#: Each field's type in the 80 bytes, as numpy spells it (int64 or float64): the stream's dtype.
FIELD_TYPES = ("i8", "i8", "f8", "f8", "f8", "i8", "i8", "i8", "i8", "i8")
#: Distinct labels kept by number and aggregated each on its own; later ones share the slot
#: ``OTHER`` of :meth:`Rows.by_label` (and their rows keep their own label while in the window).
MAX_LABELS = 4096
#: The key of :meth:`Rows.by_label` under which unhashable labels and those beyond
#: ``MAX_LABELS`` are aggregated together.
OTHER = "(other labels)"

cdef Py_ssize_t _SLOT = 1 + 2 * NMETRICS


cdef class Counter:
    """A context's superstep counter, ``value``, kept in C: the compiled sync (``plain_sync``)
    reads and moves it without a Python attribute lookup, the context's ``superstep`` property
    through this attribute."""


cdef class Rows:
    """A ledger's raw rows in a ring of ``window`` rows, with aggregates over all of them.

    ``append((index, label, t_sync, t_end, traffic))`` takes a row (``traffic``: None or an object
    with ``bytes_out``, ``bytes_in``, ``msgs_out``, ``msgs_in`` and ``records``; only its counts
    are kept).  ``len(rows)`` counts every row appended; ``rows[i]`` (``0 <= i < len``, or
    negative from the end) gives row ``i`` while it is in the window (``first <= i``, else
    IndexError) as ``(index, label, t_began, t_sync, t_end, bytes_out, bytes_in, msgs_out,
    msgs_in, records)``, ``t_began`` being the previous row's ``t_end`` (``origin`` for the
    first); iteration gives the rows in the window.  A label is kept as the number of the first
    equal label seen (each distinct label once, up to ``MAX_LABELS``); others stay with their row.
    """

    def __cinit__(self, Py_ssize_t window=1 << 30, double origin=0.0):
        if window < 1:
            raise ValueError(f"a ledger window of {window} rows: it holds at least 1")
        self._rows = NULL
        self._n = 0
        self._cap = 0
        self._head = 0
        self.window = window
        self.origin = origin
        self._last_end = origin
        self._label_ids = {}
        self._label_list = []
        self._odd_labels = {}
        self._by_label = NULL
        self._slots = 0
        self.sink = None
        self.flushed = 0
        self.flush_every = min(window, 4096)
        for k in range(NMETRICS):
            self._total[k] = 0.0
            self._max[k] = 0.0

    def __dealloc__(self):
        free(self._rows)
        free(self._by_label)

    cdef int push(self, int64_t index, object label, double t_sync, double t_end, object traffic) except -1:
        if traffic is None:
            return self._store(index, label, t_sync, t_end, 0, 0, 0, 0, 0)
        return self._store(index, label, t_sync, t_end, traffic.bytes_out, traffic.bytes_in, traffic.msgs_out,
                           traffic.msgs_in, traffic.records)

    cdef int _store(self, int64_t index, object label, double t_sync, double t_end, int64_t bytes_out,
                    int64_t bytes_in, int64_t msgs_out, int64_t msgs_in, int64_t records) except -1:
        cdef Py_ssize_t cap, slot, k
        cdef _Row *grown
        cdef _Row *row
        cdef double values[NMETRICS]
        cdef double *agg
        if self._n == self._cap and self._cap < self.window:  # grow the ring up to the window
            cap = min(self._cap * 2 if self._cap else 1024, self.window)
            grown = <_Row *>realloc(self._rows, cap * sizeof(_Row))
            if grown == NULL:
                raise MemoryError(f"the ledger could not grow to {cap} rows")
            self._rows = grown
            self._cap = cap
            self._head = self._n  # (it had wrapped to 0: the rows so far fill slots 0 to _n - 1)
        slot = self._head  # _n % _cap: the ring wraps only once it holds the whole window
        self._head = slot + 1 if slot + 1 < self._cap else 0
        row = &self._rows[slot]
        if self._n >= self._cap and row.label == -2:  # the row leaving the window
            self._odd_labels.pop(self._n - self._cap, None)
        row.index = index
        row.label = self._label_id(label)
        row.t_began = self._last_end
        row.t_sync = t_sync
        row.t_end = t_end
        row.bytes_out = bytes_out
        row.bytes_in = bytes_in
        row.msgs_out = msgs_out
        row.msgs_in = msgs_in
        row.records = records
        self._last_end = t_end
        values[0] = t_sync - row.t_began
        values[1] = t_end - t_sync
        values[2] = <double>bytes_out
        values[3] = <double>bytes_in
        values[4] = <double>msgs_out
        values[5] = <double>msgs_in
        values[6] = <double>records
        agg = self._slot(row.label)
        agg[0] += 1.0
        for k in range(NMETRICS):
            self._total[k] += values[k]
            agg[1 + k] += values[k]
            if self._n == 0 or values[k] > self._max[k]:
                self._max[k] = values[k]
            if agg[0] == 1.0 or values[k] > agg[1 + NMETRICS + k]:
                agg[1 + NMETRICS + k] = values[k]
        self._n += 1
        if self.sink is not None and self._n - self.flushed >= self.flush_every:
            self.sink(self)
        return 0

    cdef double *_slot(self, int64_t label) except NULL:
        """The aggregate of a label's number (slot 0: None, 1: the others, 2 + k: label k)."""
        cdef Py_ssize_t want = 0 if label == -1 else 1 if label == -2 else 2 + <Py_ssize_t>label
        cdef Py_ssize_t slots, k
        cdef double *grown
        if want >= self._slots:
            slots = max(want + 1, 2 * self._slots, 8)
            grown = <double *>realloc(self._by_label, slots * _SLOT * sizeof(double))
            if grown == NULL:
                raise MemoryError("the ledger could not grow its per-label aggregates")
            for k in range(self._slots * _SLOT, slots * _SLOT):
                grown[k] = 0.0
            self._by_label = grown
            self._slots = slots
        return &self._by_label[want * _SLOT]

    cdef int64_t _label_id(self, object label) except -3:
        cdef object found
        if label is None:
            return -1
        try:
            found = self._label_ids.get(label)
        except TypeError:  # unhashable: kept for its row alone
            self._odd_labels[self._n] = label
            return -2
        if found is None:  # a new label
            if len(self._label_list) >= MAX_LABELS:
                self._odd_labels[self._n] = label
                return -2
            found = len(self._label_list)
            self._label_list.append(label)
            self._label_ids[label] = found
        elif type(self._label_list[<Py_ssize_t>found]) is not type(label):
            # equal to a known label but of another type (1 and 1.0, "a" and a str subclass)
            self._odd_labels[self._n] = label
            return -2
        return <int64_t>found

    cdef object _label(self, Py_ssize_t i):
        cdef int64_t k = self._rows[i % self._cap].label
        if k == -1:
            return None
        if k == -2:
            return self._odd_labels[i]
        return self._label_list[<Py_ssize_t>k]

    def append(self, tuple row):
        """Append ``(index, label, t_sync, t_end, traffic)``."""
        if len(row) != 5:
            raise ValueError(f"a ledger row has 5 fields (index, label, t_sync, t_end, traffic), not {len(row)}")
        self.push(row[0], row[1], row[2], row[3], row[4])

    @property
    def first(self):
        """The number of the oldest row still in the window."""
        return self._n - min(self._n, self._cap)

    def __len__(self):
        return self._n

    def __getitem__(self, Py_ssize_t i):
        cdef _Row *row
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"ledger row {i} out of range: {self._n} rows were recorded")
        if i < self._n - self._cap:
            raise IndexError(f"ledger row {i} has left the window of the last {self.window} rows "
                             "(HPCBSP_LEDGER_WINDOW); the aggregates still count it")
        row = &self._rows[i % self._cap]
        return (row.index, self._label(i), row.t_began, row.t_sync, row.t_end, row.bytes_out, row.bytes_in,
                row.msgs_out, row.msgs_in, row.records)

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(self.first, self._n):
            yield self[i]

    def raw(self, Py_ssize_t start, Py_ssize_t stop):
        """Rows ``start`` to ``stop`` (absolute numbers, in the window) as their 80-byte records,
        in order (for a numpy structured view)."""
        cdef Py_ssize_t i, at = 0
        cdef bytearray out
        cdef char *dest
        if not (self.first <= start <= stop <= self._n):
            raise IndexError(f"ledger rows {start} to {stop}: the window holds {self.first} to {self._n}")
        out = bytearray((stop - start) * sizeof(_Row))
        dest = out
        for i in range(start, stop):
            memcpy(dest + at, &self._rows[i % self._cap], sizeof(_Row))
            at += sizeof(_Row)
        return bytes(out)

    def labels(self):
        """The distinct labels by number (a row's label field ``k >= 0`` is ``labels()[k]``)."""
        return list(self._label_list)

    def totals(self):
        """The sum of each metric (:data:`METRICS`) over every row appended."""
        return tuple(self._total[k] for k in range(NMETRICS))

    def maxima(self):
        """The largest value of each metric over every row appended (zeros before the first)."""
        return tuple(self._max[k] for k in range(NMETRICS))

    def by_label(self):
        """``{label: (count, totals, maxima)}`` over every row appended, for each label that has
        rows (None included; :data:`OTHER` for the unhashable ones and those beyond
        :data:`MAX_LABELS`)."""
        cdef Py_ssize_t s, k
        cdef double *agg
        out = {}
        for s in range(self._slots):
            agg = &self._by_label[s * _SLOT]
            if agg[0] == 0.0:
                continue
            key = None if s == 0 else OTHER if s == 1 else self._label_list[s - 2]
            out[key] = (int(agg[0]), tuple(agg[1 + k] for k in range(NMETRICS)),
                        tuple(agg[1 + NMETRICS + k] for k in range(NMETRICS)))
        return out
