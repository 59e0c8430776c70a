# cython: language_level=3, boundscheck=False, wraparound=False
"""The SGD update ``w - lr * g`` in one pass over memory, with numpy's rounding.

numpy does it in two passes (``t = lr * g`` rounded to the arrays' dtype, then ``w - t``); this
loop rounds the same two operations the same way (setup.py builds with ``-ffp-contract=off``: no
fused multiply-add), so the bits are numpy's, while ``g`` and ``w`` are each read once.
"""

ctypedef fused real:
    float
    double


def sgd_step(real[::1] out, const real[::1] w, const real[::1] g, double lr):
    """``out[i] = w[i] - (real)lr * g[i]`` for every i (lengths checked by the caller; ``out``
    may be ``w`` or ``g`` itself: element i is read before it is written)."""
    cdef Py_ssize_t i, n = out.shape[0]
    cdef real step = <real>lr
    cdef real t
    with nogil:
        for i in range(n):
            t = step * g[i]
            out[i] = w[i] - t
