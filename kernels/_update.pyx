# cython: language_level=3, boundscheck=False, wraparound=False
"""The SGD update ``w - lr * g`` in one pass over memory, with numpy's rounding.

numpy does it in two passes (``t = lr * g`` rounded to the arrays' dtype, then ``w - t``); this
loop rounds the same two operations the same way (setup.py builds with ``-ffp-contract=off``: no
fused multiply-add), so the bits are numpy's, while ``g`` and ``w`` are each read once.

``sgd_step_streaming`` computes the same bits and writes them with non-temporal stores (SSE2's
``movntps``/``movntpd``; plain stores where the CPU has no SSE2): the result goes to memory, not
into this core's caches, and no copy of the lines held by another core's cache is fetched
first.  For memory that another process reads next (a shared-memory window) that can be several
times faster than ordinary stores, or slower: see hpcbsp/elastic/transport.py.

``copy_streaming`` copies bytes with the same non-temporal stores (SSE2's ``movntdq``): a worker
writing its gradient into the window where the server reads it next.
"""

cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    static void hpcbsp_sgd_stream_f(float *out, const float *w, const float *g, float step, Py_ssize_t n) {
        Py_ssize_t i = 0;
        float t;
    #if defined(__SSE2__)
        for (; i < n && ((uintptr_t)(out + i) & 15); i++) { t = step * g[i]; out[i] = w[i] - t; }
        __m128 s = _mm_set1_ps(step);
        for (; i + 4 <= n; i += 4)
            _mm_stream_ps(out + i, _mm_sub_ps(_mm_loadu_ps(w + i), _mm_mul_ps(s, _mm_loadu_ps(g + i))));
        _mm_sfence();
    #endif
        for (; i < n; i++) { t = step * g[i]; out[i] = w[i] - t; }
    }
    static void hpcbsp_sgd_stream_d(double *out, const double *w, const double *g, double step, Py_ssize_t n) {
        Py_ssize_t i = 0;
        double t;
    #if defined(__SSE2__)
        for (; i < n && ((uintptr_t)(out + i) & 15); i++) { t = step * g[i]; out[i] = w[i] - t; }
        __m128d s = _mm_set1_pd(step);
        for (; i + 2 <= n; i += 2)
            _mm_stream_pd(out + i, _mm_sub_pd(_mm_loadu_pd(w + i), _mm_mul_pd(s, _mm_loadu_pd(g + i))));
        _mm_sfence();
    #endif
        for (; i < n; i++) { t = step * g[i]; out[i] = w[i] - t; }
    }
    static void hpcbsp_copy_stream(char *out, const char *src, Py_ssize_t n) {
        Py_ssize_t i = 0;
    #if defined(__SSE2__)
        for (; i < n && ((uintptr_t)(out + i) & 15); i++) out[i] = src[i];
        for (; i + 16 <= n; i += 16)
            _mm_stream_si128((__m128i *)(out + i), _mm_loadu_si128((const __m128i *)(src + i)));
        _mm_sfence();
    #endif
        for (; i < n; i++) out[i] = src[i];
    }
    """
    void hpcbsp_copy_stream(char *out, const char *src, Py_ssize_t n) nogil
    void hpcbsp_sgd_stream_f(float *out, const float *w, const float *g, float step, Py_ssize_t n) nogil
    void hpcbsp_sgd_stream_d(double *out, const double *w, const double *g, double step, Py_ssize_t n) nogil

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


def sgd_step_streaming(real[::1] out, const real[::1] w, const real[::1] g, double lr):
    """:func:`sgd_step`'s bits, written with non-temporal stores (see the module docstring)."""
    cdef Py_ssize_t n = out.shape[0]
    if n == 0:
        return
    with nogil:
        if real is float:
            hpcbsp_sgd_stream_f(&out[0], &w[0], &g[0], <float>lr, n)
        else:
            hpcbsp_sgd_stream_d(&out[0], &w[0], &g[0], lr, n)



def copy_streaming(unsigned char[::1] out, const unsigned char[::1] src):
    """``out[:] = src`` (bytes; lengths checked by the caller, the two apart) with non-temporal
    stores, fenced before it returns (see the module docstring)."""
    cdef Py_ssize_t n = out.shape[0]
    if n == 0:
        return
    with nogil:
        hpcbsp_copy_stream(<char *>&out[0], <const char *>&src[0], n)
