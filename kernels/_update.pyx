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
``widen`` decodes into float32 or float64; ``narrow`` rounds float32 or float64 values to
bfloat16 as wire.bfloat16_bits does (a float64 to float32 first, then to nearest even; a NaN
keeps its top bits, made quiet) or to half as numpy does (to nearest even, straight from either;
a NaN keeps its top payload bits).  The non-temporal variants decode or encode a block of values
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
    #include <string.h>
    static inline uint32_t hpcbsp_fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
    static inline float hpcbsp_bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
    static inline uint64_t hpcbsp_dbits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
    static inline double hpcbsp_bitsd(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
    /* Decoding (exact; branch-free, so that the loops vectorize). */
    static inline float hpcbsp_from_bf16(uint16_t b) { return hpcbsp_bitsf((uint32_t)b << 16); }
    static inline float hpcbsp_from_f16(uint16_t h) {
        /* exponent and mantissa placed as a float's, scaled by 2^112 (exact: subnormal halves
           become normal floats); an all-ones exponent made a float's (inf, NaN: payload kept) */
        uint32_t em = h & 0x7fffu;
        uint32_t u = hpcbsp_fbits(hpcbsp_bitsf(em << 13) * 5.192296858534828e+33f);
        return hpcbsp_bitsf(u | ((uint32_t)(h & 0x8000u) << 16) | (em > 0x7bffu ? 0x7f800000u : 0u));
    }
    /* Encoding: bfloat16 as wire.bfloat16_bits; half as numpy's npy_floatbits_to_halfbits and
       npy_doublebits_to_halfbits (to nearest even, straight from the float or the double; a
       NaN keeps its top payload bits, and stays a NaN). */
    static inline uint16_t hpcbsp_to_bf16(float x) {
        uint32_t u = hpcbsp_fbits(x);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
        return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? q : r);
    }
    static inline uint16_t hpcbsp_f16_of_float(float x) {
        uint32_t u = hpcbsp_fbits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu, o;
        if (a >= 0x47800000u) {  /* 65536 and up: inf; NaN */
            o = a > 0x7f800000u ? 0x7c00u + ((a & 0x7fffffu) >> 13) : 0x7c00u;
            if (o == 0x7c00u && a > 0x7f800000u) o++;
        } else if (a < 0x38800000u) {  /* below 2^-14: a subnormal half or 0, rounded by an add */
            o = hpcbsp_fbits(hpcbsp_bitsf(a) + 0.5f) - 0x3f000000u;
        } else {
            o = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;  /* rebias 127 -> 15, round */
        }
        return (uint16_t)(o | sign);
    }
    static inline uint16_t hpcbsp_f16_of_double(double x) {
        uint64_t u = hpcbsp_dbits(x), a = u & 0x7fffffffffffffffULL, o;
        uint32_t sign = (uint32_t)(u >> 48) & 0x8000u;
        if (a >= 0x40f0000000000000ULL) {  /* 65536 and up: inf; NaN */
            o = a > 0x7ff0000000000000ULL ? 0x7c00u + ((a & 0xfffffffffffffULL) >> 42) : 0x7c00u;
            if (o == 0x7c00u && a > 0x7ff0000000000000ULL) o++;
        } else if (a < 0x3f10000000000000ULL) {  /* below 2^-14 */
            o = hpcbsp_dbits(hpcbsp_bitsd(a) + 268435456.0) - 0x41b0000000000000ULL;  /* + 2^28 */
        } else {
            o = (a + 0xc100000000000000ULL + 0x1ffffffffffULL + ((a >> 42) & 1u)) >> 42;
        }
        return (uint16_t)(o | sign);
    }
    /* bfloat16 with SSE2, 8 values a step (the scalar functions' bits): the rounding in 32-bit
       lanes, an arithmetic shift (so that the pack's signed saturation keeps the 16 bits), a
       NaN's lanes taken from its own top half with the quiet bit; decoding is a 16-bit unpack
       under zeros.  ``streaming``: non-temporal stores, fenced. */
    static void hpcbsp_narrow_bf16_sse(uint16_t *out, const float *x, Py_ssize_t n, int streaming) {
        Py_ssize_t i = 0;
    #if defined(__SSE2__)
        for (; i < n && ((uintptr_t)(out + i) & 15); i++) out[i] = hpcbsp_to_bf16(x[i]);
        const __m128i one = _mm_set1_epi32(1), half = _mm_set1_epi32(0x7fff), quiet = _mm_set1_epi32(0x40);
        const __m128i abs = _mm_set1_epi32(0x7fffffff), inf = _mm_set1_epi32(0x7f800000);
        __m128i v[2], r[2];
        int k;
        for (; i + 8 <= n; i += 8) {
            v[0] = _mm_castps_si128(_mm_loadu_ps(x + i));
            v[1] = _mm_castps_si128(_mm_loadu_ps(x + i + 4));
            for (k = 0; k < 2; k++) {
                __m128i top = _mm_srai_epi32(v[k], 16);
                __m128i up = _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(v[k], half),
                                                          _mm_and_si128(top, one)), 16);
                __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(v[k], abs), inf);
                r[k] = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(top, quiet)), _mm_andnot_si128(nan, up));
            }
            if (streaming) _mm_stream_si128((__m128i *)(out + i), _mm_packs_epi32(r[0], r[1]));
            else _mm_store_si128((__m128i *)(out + i), _mm_packs_epi32(r[0], r[1]));
        }
        if (streaming) _mm_sfence();
    #endif
        for (; i < n; i++) out[i] = hpcbsp_to_bf16(x[i]);
    }
    static void hpcbsp_sgd_bf16_stream_f(float *out, const float *w, const uint16_t *g, float step, Py_ssize_t n) {
        Py_ssize_t i = 0;
        float t;
    #if defined(__SSE2__)
        for (; i < n && ((uintptr_t)(out + i) & 15); i++) { t = step * hpcbsp_from_bf16(g[i]); out[i] = w[i] - t; }
        const __m128 s = _mm_set1_ps(step);
        const __m128i zero = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
            __m128i b = _mm_loadu_si128((const __m128i *)(g + i));
            __m128 lo = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, b)), hi = _mm_castsi128_ps(_mm_unpackhi_epi16(zero, b));
            _mm_stream_ps(out + i, _mm_sub_ps(_mm_loadu_ps(w + i), _mm_mul_ps(s, lo)));
            _mm_stream_ps(out + i + 4, _mm_sub_ps(_mm_loadu_ps(w + i + 4), _mm_mul_ps(s, hi)));
        }
        _mm_sfence();
    #endif
        for (; i < n; i++) { t = step * hpcbsp_from_bf16(g[i]); out[i] = w[i] - t; }
    }
    #define HPCBSP_LOOPS(T, S)                                                                    \
    static void hpcbsp_sgd_bf16_##S(T *out, const T *w, const uint16_t *g, T step, Py_ssize_t n) { \
        Py_ssize_t i; T t;                                                                        \
        for (i = 0; i < n; i++) { t = step * (T)hpcbsp_from_bf16(g[i]); out[i] = w[i] - t; }     \
    }                                                                                             \
    static void hpcbsp_sgd_f16_##S(T *out, const T *w, const uint16_t *g, T step, Py_ssize_t n) {  \
        Py_ssize_t i; T t;                                                                        \
        for (i = 0; i < n; i++) { t = step * (T)hpcbsp_from_f16(g[i]); out[i] = w[i] - t; }      \
    }                                                                                             \
    static void hpcbsp_widen_##S(T *out, const uint16_t *g, Py_ssize_t n, int bf16) {            \
        Py_ssize_t i;                                                                             \
        if (bf16) for (i = 0; i < n; i++) out[i] = (T)hpcbsp_from_bf16(g[i]);                     \
        else for (i = 0; i < n; i++) out[i] = (T)hpcbsp_from_f16(g[i]);                           \
    }                                                                                             \
    static void hpcbsp_narrow_##S(uint16_t *out, const T *x, Py_ssize_t n, int bf16) {           \
        Py_ssize_t i;                                                                             \
        if (bf16) for (i = 0; i < n; i++) out[i] = hpcbsp_to_bf16((float)x[i]);                   \
        else for (i = 0; i < n; i++) out[i] = hpcbsp_f16_of_##S(x[i]);                            \
    }
    #define hpcbsp_f16_of_f hpcbsp_f16_of_float
    #define hpcbsp_f16_of_d hpcbsp_f16_of_double
    HPCBSP_LOOPS(float, f)
    HPCBSP_LOOPS(double, d)
    """
    void hpcbsp_copy_stream(char *out, const char *src, Py_ssize_t n) nogil
    void hpcbsp_sgd_stream_f(float *out, const float *w, const float *g, float step, Py_ssize_t n) nogil
    void hpcbsp_sgd_stream_d(double *out, const double *w, const double *g, double step, Py_ssize_t n) nogil

    void hpcbsp_sgd_bf16_f(float *out, const float *w, const unsigned short *g, float step, Py_ssize_t n) nogil
    void hpcbsp_sgd_bf16_d(double *out, const double *w, const unsigned short *g, double step, Py_ssize_t n) nogil
    void hpcbsp_sgd_f16_f(float *out, const float *w, const unsigned short *g, float step, Py_ssize_t n) nogil
    void hpcbsp_sgd_f16_d(double *out, const double *w, const unsigned short *g, double step, Py_ssize_t n) nogil
    void hpcbsp_widen_f(float *out, const unsigned short *g, Py_ssize_t n, int bf16) nogil
    void hpcbsp_widen_d(double *out, const unsigned short *g, Py_ssize_t n, int bf16) nogil
    void hpcbsp_narrow_f(unsigned short *out, const float *x, Py_ssize_t n, int bf16) nogil
    void hpcbsp_narrow_d(unsigned short *out, const double *x, Py_ssize_t n, int bf16) nogil
    void hpcbsp_narrow_bf16_sse(unsigned short *out, const float *x, Py_ssize_t n, int streaming) nogil
    void hpcbsp_sgd_bf16_stream_f(float *out, const float *w, const unsigned short *g, float step, Py_ssize_t n) nogil

#: A block of values decoded or encoded on the stack before its non-temporal stores.
cdef enum:
    BLOCK = 2048

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


cdef void _widen(real *out, const unsigned short *g, Py_ssize_t n, bint bf16) noexcept nogil:
    if real is float:
        hpcbsp_widen_f(out, g, n, bf16)
    else:
        hpcbsp_widen_d(out, g, n, bf16)


def sgd_step_wire(real[::1] out, const real[::1] w, const unsigned short[::1] g, double lr, bint bf16):
    """``out[i] = w[i] - (real)lr * decode(g[i])``: :func:`sgd_step` with a 16-bit gradient
    (bfloat16 where ``bf16``, else IEEE half), decoded as it is read."""
    cdef Py_ssize_t n = out.shape[0]
    if n == 0:
        return
    with nogil:
        if real is float:
            (hpcbsp_sgd_bf16_f if bf16 else hpcbsp_sgd_f16_f)(&out[0], &w[0], &g[0], <float>lr, n)
        else:
            (hpcbsp_sgd_bf16_d if bf16 else hpcbsp_sgd_f16_d)(&out[0], &w[0], &g[0], lr, n)


def sgd_step_wire_streaming(real[::1] out, const real[::1] w, const unsigned short[::1] g, double lr,
                            bint bf16):
    """:func:`sgd_step_wire`'s bits, written with non-temporal stores (a block at a time)."""
    cdef Py_ssize_t lo = 0, m, n = out.shape[0]
    cdef real block[BLOCK]
    if real is float and bf16 and n > 0:
        with nogil:
            hpcbsp_sgd_bf16_stream_f(&out[0], &w[0], &g[0], <float>lr, n)
        return
    with nogil:
        while lo < n:
            m = min(<Py_ssize_t>BLOCK, n - lo)
            _widen(block, &g[lo], m, bf16)
            if real is float:
                hpcbsp_sgd_stream_f(&out[lo], &w[lo], block, <float>lr, m)
            else:
                hpcbsp_sgd_stream_d(&out[lo], &w[lo], block, lr, m)
            lo += m


def widen(real[::1] out, const unsigned short[::1] g, bint bf16):
    """``out[i] = decode(g[i])`` (bfloat16 where ``bf16``, else IEEE half; exact)."""
    cdef Py_ssize_t n = out.shape[0]
    if n == 0:
        return
    with nogil:
        _widen(&out[0], &g[0], n, bf16)


def narrow(unsigned short[::1] out, const real[::1] x, bint bf16, bint streaming):
    """``out[i]``: ``x[i]`` rounded to bfloat16 where ``bf16``, else to IEEE half (see the
    module docstring), with non-temporal stores where ``streaming``."""
    cdef Py_ssize_t lo = 0, m, n = out.shape[0]
    cdef unsigned short block[BLOCK]
    if n == 0:
        return
    if real is float and bf16:
        with nogil:
            hpcbsp_narrow_bf16_sse(&out[0], &x[0], n, streaming)
        return
    with nogil:
        if not streaming:
            if real is float:
                hpcbsp_narrow_f(&out[0], &x[0], n, bf16)
            else:
                hpcbsp_narrow_d(&out[0], &x[0], n, bf16)
            lo = n
        while lo < n:
            m = min(<Py_ssize_t>BLOCK, n - lo)
            if real is float:
                hpcbsp_narrow_f(block, &x[lo], m, bf16)
            else:
                hpcbsp_narrow_d(block, &x[lo], m, bf16)
            hpcbsp_copy_stream(<char *>&out[lo], <const char *>block, 2 * m)
            lo += m
