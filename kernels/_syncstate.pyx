# cython: language_level=3
"""What the compiled empty sync writes, kept in C: a context's superstep :class:`Counter` and its
ledger's :class:`Rows`.

:class:`Rows` keeps a ledger row as two int64 and two doubles (32 bytes: its label as the number
of a distinct label, its traffic only where it is not None), so that appending one costs a store,
not four Python objects (a tuple, two floats, an int: about 0.2 us and 150 bytes a superstep).
:class:`Counter` is the superstep counter, ``value``.  The compiled control step
(``kernels/_controlstep.pyx``: ``RecordStep.agree_row`` and ``plain_sync``) appends a row and
moves the counter through their C interface (``hpcbsp/kernels/_syncstate.pxd``, beside the module),
without the interpreter; the runtime's ledger (:mod:`hpcbsp.runtime.superstep.ledger`) and its
``superstep`` property read them from Python.
"""
from libc.stdint cimport int64_t
from libc.stdlib cimport free, realloc


cdef class Counter:
    """A context's superstep counter, ``value``, kept in C: the compiled sync (``plain_sync``)
    reads and moves it without a Python attribute lookup, the context's ``superstep`` property
    through this attribute."""


cdef class Rows:
    """A ledger's raw rows ``(index, label, t_sync, t_end, traffic)``, append only.

    ``append(row)`` takes such a tuple; ``rows[i]`` (negative ``i`` too) and iteration give them
    back as tuples, equal to what was appended.  A row is stored as two int64 and two doubles
    (32 bytes): its label as the number of the first equal label seen (each distinct label is
    kept once, so that a program labelling every superstep alike adds nothing per row), and its
    ``traffic`` only where it is not None.
    """

    def __cinit__(self):
        self._rows = NULL
        self._n = 0
        self._cap = 0
        self._label_ids = {}
        self._label_list = []
        self._odd_labels = {}
        self._traffic = {}

    def __dealloc__(self):
        free(self._rows)

    cdef int push(self, int64_t index, object label, double t_sync, double t_end, object traffic) except -1:
        cdef Py_ssize_t cap
        cdef _Row *grown
        if self._n == self._cap:
            cap = self._cap * 2 if self._cap else 1024
            grown = <_Row *>realloc(self._rows, cap * sizeof(_Row))
            if grown == NULL:
                raise MemoryError(f"the ledger could not grow to {cap} rows")
            self._rows = grown
            self._cap = cap
        self._rows[self._n].index = index
        self._rows[self._n].t_sync = t_sync
        self._rows[self._n].t_end = t_end
        self._rows[self._n].label = self._label_id(label)
        if traffic is not None:
            self._traffic[self._n] = traffic
        self._n += 1
        return 0

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
            found = len(self._label_list)
            self._label_list.append(label)
            self._label_ids[label] = found
        elif type(self._label_list[<Py_ssize_t>found]) is not type(label):
            # equal to a known label but of another type (1 and 1.0, "a" and a str subclass)
            self._odd_labels[self._n] = label
            return -2
        return <int64_t>found

    cdef object _label(self, Py_ssize_t i):
        cdef int64_t k = self._rows[i].label
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

    def __len__(self):
        return self._n

    def __getitem__(self, Py_ssize_t i):
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("ledger row index out of range")
        return (self._rows[i].index, self._label(i), self._rows[i].t_sync, self._rows[i].t_end,
                self._traffic.get(i))
