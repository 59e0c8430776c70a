/* The exact sum of a block of float64 as two integers, by error-free extraction: the fast path
 * of _exactsum.pyx for blocks whose values lie within about 2**48 of the largest one (measured or
 * simulated data nearly always do).  Any other block is left to the integer bins.
 *
 * Why it is exact.  Let all |x| in the block be below 2**(k-2) and sigma = 1.5 * 2**k.  In
 * round-to-nearest,
 *
 *     t = sigma + x;  q = t - sigma;  r = x - q
 *
 * keeps t inside [2**k, 2**(k+1)), where the doubles are the multiples of u = 2**(k-52).  So
 * t - sigma is exact (both in one binade), q is a multiple of u, r = x - q is the rounding error
 * of sigma + x, a double with |r| <= u/2, and x == q + r exactly.  Moreover the bit pattern of t,
 * read as an integer, is bits(sigma) + q/u: the block's sum of q is an integer sum of bit
 * patterns minus n * bits(sigma), done on integer lanes (wrapping mod 2**64 on the way; the
 * result is at most 2**50 * n in magnitude).  The remainders, below 2**(k-53) = 2**(k2-2) with
 * k2 = k - 51, go through the same step with sigma2 = 1.5 * 2**k2; the block's sum is then
 * exact if every second remainder r - q2 is zero, which the loop checks.  Two levels reach
 * 101 bits below the block's largest power of two, so a value more than about 2**48 below it
 * with its low bits set (a subnormal, as a rule) sends the block to the general path.
 *
 * What that needs of the floating-point environment, checked where it can go wrong:
 * - IEEE double arithmetic without excess precision (FLT_EVAL_METHOD 0 or 16) and no value-changing
 *   optimisation (-ffast-math, -funsafe-math-optimizations or -fassociative-math would let the
 *   compiler fold x - ((sigma + x) - sigma) to 0): checked at compile time, where the fast path
 *   is compiled out otherwise, and once more when the module loads, by a known-answer test
 *   against the integer bins (_exactsum.pyx), which catches a miscompilation no macro reveals;
 * - round-to-nearest, and subnormals neither flushed to zero (FTZ) nor read as zero (DAZ), as
 *   some libraries built with -ffast-math set them process-wide: hpcbsp_fp_env_allows_extraction
 *   checks at run time, once per call, by arithmetic in the unit that does the work (on x86 the
 *   SSE register, which fegetround() does not read: it may differ from the x87 one);
 * - the value range: sigma2 must be a normal double and sigma finite, so blocks whose largest
 *   magnitude has an exponent field outside [XS_FIELD_MIN, XS_FIELD_MAX] (about 2**-959 ..
 *   2**1018) take the general path, and so do infinities and NaNs.
 *
 * Compiled for AVX2 and the baseline, the CPU choosing at load time, as simd_blocks.h is; every
 * version computes the same integers.
 */
#ifndef HPCBSP_EXACTSUM_BLOCKS_H
#define HPCBSP_EXACTSUM_BLOCKS_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "simd_blocks.h" /* HPCBSP_MULTIVERSION */

/* No contraction into fused multiply-adds here, whatever the build's flags (see simd_blocks.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define HPCBSP_XS_BLOCK 2048               /* the most values one call may take: 2048 * 2**50 < 2**63 */
#define HPCBSP_XS_LEVEL_SHIFT 51           /* k2 = k - 51 */
#define HPCBSP_XS_FIELD_MIN 64             /* k2 = field - 1071 >= -1007: sigma2 is normal */
#define HPCBSP_XS_FIELD_MAX 2040           /* k = field - 1020 <= 1020: sigma is finite */

/* FLT_EVAL_METHOD 16 (ISO/IEC TS 18661-3) is 0 for float and double, with _Float16 kept in its
 * own type: GCC reports it for CPUs with AVX512-FP16 (-march=sapphirerapids, or -march=native
 * on such a Xeon).  Any other value (2: the x87 unit, -mfpmath=387) compiles the path out. */
#if defined(__GNUC__) && defined(FLT_EVAL_METHOD) && (FLT_EVAL_METHOD == 0 || FLT_EVAL_METHOD == 16) \
    && !defined(__FAST_MATH__) && !defined(__ASSOCIATIVE_MATH__) && !defined(__RECIPROCAL_MATH__) \
    && !defined(__NO_SIGNED_ZEROS__)
#define HPCBSP_XS_AVAILABLE 1
#else
#define HPCBSP_XS_AVAILABLE 0
#endif

/* 1.5 * 2**k, for a normal 2**k */
static inline double hpcbsp_xs_sigma(int k) {
    uint64_t b = ((uint64_t)(k + 1023) << 52) | ((uint64_t)1 << 51);
    double d;
    memcpy(&d, &b, 8);
    return d;
}

static inline int hpcbsp_xs_bits_equal(double x, double y) {
    uint64_t a, b;
    memcpy(&a, &x, 8);
    memcpy(&b, &y, 8);
    return a == b;
}

/* 1 where the calling thread's floating-point environment is what the extraction needs:
 * round-to-nearest, no flush-to-zero, no denormals-are-zero.  Probed by arithmetic on volatile
 * operands, so the unit and the control register that the hot loop uses answer (fegetround()
 * reads the x87 control word on x86-64, not the SSE one).  Bits, not comparisons, decide: under
 * DAZ a comparison with a subnormal would itself read it as zero. */
static int hpcbsp_fp_env_allows_extraction(void) {
#if HPCBSP_XS_AVAILABLE
    volatile double one = 1.0, quarter_ulp = 0x1p-54, three_quarter_ulp = 0x3p-54;
    volatile double quarter_min = DBL_MIN / 4; /* subnormal */
    /* to nearest: 1 + u/4 -> 1 (upward would give 1 + u); 1 + 3u/4 -> 1 + u (downward and
     * toward zero would give 1) */
    int nearest = hpcbsp_xs_bits_equal(one + quarter_ulp, 1.0)
                  && hpcbsp_xs_bits_equal(one + three_quarter_ulp, 1.0 + 0x1p-52);
    /* DBL_MIN / 2, exact in every mode, or 0 under FTZ or DAZ */
    int subnormals = hpcbsp_xs_bits_equal(quarter_min + quarter_min, DBL_MIN / 2);
    return nearest && subnormals;
#else
    return 0;
#endif
}

/* For the tests: read and write the x86 SSE control register (MXCSR: rounding, flush-to-zero,
 * denormals-are-zero); -1 and nothing on other CPUs. */
#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE__))
#include <xmmintrin.h>
static long hpcbsp_xs_get_mxcsr(void) { return (long)_mm_getcsr(); }
static void hpcbsp_xs_set_mxcsr(long value) { _mm_setcsr((unsigned int)value); }
#else
static long hpcbsp_xs_get_mxcsr(void) { return -1; }
static void hpcbsp_xs_set_mxcsr(long value) { (void)value; }
#endif

#if HPCBSP_XS_AVAILABLE
typedef double hpcbsp_v4d __attribute__((vector_size(32)));
typedef int64_t hpcbsp_v4i __attribute__((vector_size(32)));
typedef uint64_t hpcbsp_v4u __attribute__((vector_size(32)));

/* sum(p[0..n)) == hi * 2**(pos - 1074) + lo * 2**(pos - 51 - 1074) exactly, for
 * n <= HPCBSP_XS_BLOCK; returns 1 on success and 0 (outputs untouched) when the block must take
 * the general path.  pos - 51 >= 0. */
HPCBSP_MULTIVERSION
static int hpcbsp_exact_block_f64(const double *p, ptrdiff_t n, int64_t *hi, int64_t *lo,
                                  int *pos) {
    const int64_t ABS = INT64_MAX;
    const hpcbsp_v4i vabs = {ABS, ABS, ABS, ABS};
    hpcbsp_v4i m0 = {0, 0, 0, 0}, m1 = m0, m2 = m0, m3 = m0;
    int64_t top = 0;
    ptrdiff_t i, m = n - n % 16;
    /* The largest magnitude, as bits: for non-negative doubles integer order is value order, and
     * infinities and NaNs come out on top (field 0x7FF).  Four accumulators, so that the
     * compare-and-select chains overlap. */
    for (i = 0; i < m; i += 16) {
        hpcbsp_v4i x0, x1, x2, x3, g0, g1, g2, g3;
        memcpy(&x0, p + i, 32);
        memcpy(&x1, p + i + 4, 32);
        memcpy(&x2, p + i + 8, 32);
        memcpy(&x3, p + i + 12, 32);
        x0 &= vabs; x1 &= vabs; x2 &= vabs; x3 &= vabs;
        g0 = x0 > m0; g1 = x1 > m1; g2 = x2 > m2; g3 = x3 > m3;
        m0 = (x0 & g0) | (m0 & ~g0);
        m1 = (x1 & g1) | (m1 & ~g1);
        m2 = (x2 & g2) | (m2 & ~g2);
        m3 = (x3 & g3) | (m3 & ~g3);
    }
    for (int j = 0; j < 4; j++) {
        int64_t c = m0[j] > m1[j] ? m0[j] : m1[j], d = m2[j] > m3[j] ? m2[j] : m3[j];
        c = c > d ? c : d;
        top = c > top ? c : top;
    }
    for (; i < n; i++) {
        int64_t b;
        memcpy(&b, p + i, 8);
        b &= ABS;
        top = b > top ? b : top;
    }
    if (top == 0) { /* only zeros */
        *hi = 0;
        *lo = 0;
        *pos = HPCBSP_XS_LEVEL_SHIFT;
        return 1;
    }
    int field = (int)(top >> 52);
    if (field < HPCBSP_XS_FIELD_MIN || field > HPCBSP_XS_FIELD_MAX) {
        return 0;
    }
    /* max|x| < 2**(field - 1022) = 2**(k - 2) */
    const int k = field - 1020, k2 = k - HPCBSP_XS_LEVEL_SHIFT;
    const double s1 = hpcbsp_xs_sigma(k), s2 = hpcbsp_xs_sigma(k2);
    const hpcbsp_v4d v1 = {s1, s1, s1, s1}, v2 = {s2, s2, s2, s2};
    hpcbsp_v4u a1 = {0, 0, 0, 0}, b1 = a1, a2 = a1, b2 = a1;
    hpcbsp_v4i bad = {0, 0, 0, 0};
    m = n - n % 8;
    /* Two vectors per step; the integer sums wrap harmlessly (unsigned). */
    for (i = 0; i < m; i += 8) {
        hpcbsp_v4d x, y;
        /* The next block, one cache line per step: its loads then overlap this arithmetic
         * (a hint that never faults, even past the end of the array; the address is formed as
         * an integer, since a pointer beyond one past the end would be undefined). */
        __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)(n + i) * sizeof(double)));
        memcpy(&x, p + i, 32);
        memcpy(&y, p + i + 4, 32);
        hpcbsp_v4d tx = v1 + x, ty = v1 + y;
        hpcbsp_v4d rx = x - (tx - v1), ry = y - (ty - v1);
        hpcbsp_v4d ux = v2 + rx, uy = v2 + ry;
        a1 += (hpcbsp_v4u)tx;
        b1 += (hpcbsp_v4u)ty;
        a2 += (hpcbsp_v4u)ux;
        b2 += (hpcbsp_v4u)uy;
        /* a second remainder is not zero (the cast: clang's compare yields long long lanes) */
        bad |= (hpcbsp_v4i)((rx != (ux - v2)) | (ry != (uy - v2)));
    }
    uint64_t t1 = 0, t2 = 0, tb1, tb2;
    int tail_bad = 0;
    for (; i < n; i++) {
        double x = p[i];
        double t = s1 + x;
        double r = x - (t - s1);
        double u = s2 + r;
        memcpy(&tb1, &t, 8);
        memcpy(&tb2, &u, 8);
        t1 += tb1;
        t2 += tb2;
        tail_bad |= r != (u - s2);
    }
    if (tail_bad || (bad[0] | bad[1] | bad[2] | bad[3])) {
        return 0;
    }
    a1 += b1;
    a2 += b2;
    memcpy(&tb1, &s1, 8);
    memcpy(&tb2, &s2, 8);
    t1 += a1[0] + a1[1] + a1[2] + a1[3] - (uint64_t)n * tb1;
    t2 += a2[0] + a2[1] + a2[2] + a2[3] - (uint64_t)n * tb2;
    *hi = (int64_t)t1; /* |sum q/u| < n * 2**50 <= 2**61: the wrapped value is the true one */
    *lo = (int64_t)t2;
    *pos = k - 52 + 1074; /* u = 2**(k - 52) */
    return 1;
}
#else
static int hpcbsp_exact_block_f64(const double *p, ptrdiff_t n, int64_t *hi, int64_t *lo,
                                  int *pos) {
    (void)p; (void)n; (void)hi; (void)lo; (void)pos;
    return 0;
}
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
