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

The 16-bit gradients of the wire (hpcbsp/elastic/wire.py) as uint16 bit patterns: ``BF16``
(bfloat16, the top half of a float32) or ``F16`` (IEEE half).  ``sgd_step_wire`` is the SGD
update with such a gradient, each value decoded as it is read (exact: every bfloat16 and half is
a float32), so the bits are those of the update with the gradient decoded first;
``widen`` decodes into float32 or float64; ``bfloat16_from`` rounds float32 or float64 values to
bfloat16 as wire.bfloat16_bits does (a float64 to float32 first, then to nearest even; a NaN
keeps its top bits, made quiet).  The non-temporal variants decode or encode a block of values
at a time into a buffer on the stack (within L1) and store the block with the kernels above.
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
    static inline float hpcbsp_from_bf16(uint16_t b) {
        union { uint32_t u; float f; } v;
        v.u = (uint32_t)b << 16;
        return v.f;
    }
    static inline float hpcbsp_from_f16(uint16_t h) {
        union { uint32_t u; float f; } v;
        uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h & 0x7c00u, m = h & 0x03ffu;
        float x;
        if (e == 0x7c00u) { v.u = sign | 0x7f800000u | (m << 13); return v.f; }  /* inf, NaN (payload kept) */
        if (e == 0) { x = (float)m * 5.9604644775390625e-08f; return sign ? -x : x; }  /* m * 2^-24, exact */
        v.u = sign | (((uint32_t)(h & 0x7fffu) << 13) + 0x38000000u);  /* rebias 15 -> 127 */
        return v.f;
    }
    static inline float hpcbsp_from16(uint16_t h, int bf16) {
        return bf16 ? hpcbsp_from_bf16(h) : hpcbsp_from_f16(h);
    }
    static inline uint16_t hpcbsp_to_bf16(float x) {
        union { uint32_t u; float f; } v;
        v.f = x;
        if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x0040u);
        return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
    }
    """
    void hpcbsp_copy_stream(char *out, const char *src, Py_ssize_t n) nogil
    void hpcbsp_sgd_stream_f(float *out, const float *w, const float *g, float step, Py_ssize_t n) nogil
    void hpcbsp_sgd_stream_d(double *out, const double *w, const double *g, double step, Py_ssize_t n) nogil

    float hpcbsp_from16(unsigned short h, int bf16) nogil
    unsigned short hpcbsp_to_bf16(float x) nogil

#: A block of values decoded or encoded on the stack before its non-temporal stores.
cdef enum:
    BLOCK = 1024

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


def sgd_step_wire(real[::1] out, const real[::1] w, const unsigned short[::1] g, double lr, bint bf16):
    """``out[i] = w[i] - (real)lr * decode(g[i])``: :func:`sgd_step` with a 16-bit gradient
    (bfloat16 where ``bf16``, else IEEE half), decoded as it is read."""
    cdef Py_ssize_t i, n = out.shape[0]
    cdef real step = <real>lr
    cdef real t
    with nogil:
        if bf16:
            for i in range(n):
                t = step * <real>hpcbsp_from16(g[i], 1)
                out[i] = w[i] - t
        else:
            for i in range(n):
                t = step * <real>hpcbsp_from16(g[i], 0)
                out[i] = w[i] - t


def sgd_step_wire_streaming(real[::1] out, const real[::1] w, const unsigned short[::1] g, double lr,
                            bint bf16):
    """:func:`sgd_step_wire`'s bits, written with non-temporal stores (a block at a time)."""
    cdef Py_ssize_t lo, i, m, n = out.shape[0]
    cdef real block[BLOCK]
    with nogil:
        lo = 0
        while lo < n:
            m = min(<Py_ssize_t>BLOCK, n - lo)
            for i in range(m):
                block[i] = <real>hpcbsp_from16(g[lo + i], bf16)
            if real is float:
                hpcbsp_sgd_stream_f(&out[lo], &w[lo], block, <float>lr, m)
            else:
                hpcbsp_sgd_stream_d(&out[lo], &w[lo], block, lr, m)
            lo += m


def widen(real[::1] out, const unsigned short[::1] g, bint bf16):
    """``out[i] = decode(g[i])`` (bfloat16 where ``bf16``, else IEEE half; exact)."""
    cdef Py_ssize_t i, n = out.shape[0]
    with nogil:
        for i in range(n):
            out[i] = <real>hpcbsp_from16(g[i], bf16)


def bfloat16_from(unsigned short[::1] out, const real[::1] x, bint streaming):
    """``out[i]``: the bfloat16 nearest ``(float)x[i]``, ties to even (see the module docstring),
    with non-temporal stores where ``streaming``."""
    cdef Py_ssize_t lo, i, m, n = out.shape[0]
    cdef unsigned short block[BLOCK]
    if n == 0:
        return
    with nogil:
        if not streaming:
            for i in range(n):
                out[i] = hpcbsp_to_bf16(<float>x[i])
        lo = n if not streaming else 0
        while lo < n:
            m = min(<Py_ssize_t>BLOCK, n - lo)
            for i in range(m):
                block[i] = hpcbsp_to_bf16(<float>x[lo + i])
            hpcbsp_copy_stream(<char *>&out[lo], <const char *>block, 2 * m)
            lo += m
