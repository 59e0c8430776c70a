/* Contiguous float64 block sums for _reductions.pyx and the index bounds test of _indexed.pyx,
 * compiled twice: for AVX2 and for the baseline, with the CPU choosing at load time (GCC/Clang
 * function multi-versioning).  A wheel or source build therefore runs on any x86-64 CPU and uses
 * 256-bit vectors where they exist.
 *
 * The arithmetic is exactly that of the Cython fallback: LANES = 8 independent accumulators,
 * added pairwise at the end, and no fused multiply-add, so every version gives the same bits.
 * Contraction of p*q + acc into an FMA is switched off here (GCC: per function, by the pragma
 * below; Clang: STDC FP_CONTRACT), and setup.py adds -ffp-contract=off -fno-fast-math after the
 * user's CFLAGS, so that a -march=native or -mfma build (where GCC contracts by default) and a
 * -ffast-math build compute what the baseline build computes.
 */
#ifndef HPCBSP_SIMD_BLOCKS_H
#define HPCBSP_SIMD_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
#define HPCBSP_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define HPCBSP_MULTIVERSION
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define HPCBSP_BLOCK_BODY(TERM)                                                      \
    double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};                        \
    double tail = 0.0;                                                               \
    ptrdiff_t i, m = n - n % 8;                                                      \
    for (i = 0; i < m; i += 8) {                                                     \
        for (int j = 0; j < 8; j++) { acc[j] += TERM(i + j); }                       \
    }                                                                                \
    for (i = m; i < n; i++) { tail += TERM(i); }                                     \
    return (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + tail;

#define HPCBSP_SUM_TERM(k) (p[k])
#define HPCBSP_DOT_TERM(k) (p[k] * q[k])
#define HPCBSP_SQ_TERM(k) (p[k] * p[k])

HPCBSP_MULTIVERSION
static double hpcbsp_block_sum_f64(const double *p, ptrdiff_t n) { HPCBSP_BLOCK_BODY(HPCBSP_SUM_TERM) }

HPCBSP_MULTIVERSION
static double hpcbsp_block_dot_f64(const double *p, const double *q, ptrdiff_t n) { HPCBSP_BLOCK_BODY(HPCBSP_DOT_TERM) }

HPCBSP_MULTIVERSION
static double hpcbsp_block_sqnorm_f64(const double *p, ptrdiff_t n) { HPCBSP_BLOCK_BODY(HPCBSP_SQ_TERM) }

/* 1 if some p[i], read as unsigned (a negative index is then huge), is >= limit: the bounds test
 * of a block of indices, one branch-free pass that the compiler vectorises. */
HPCBSP_MULTIVERSION
static int hpcbsp_any_index_at_or_above(const int64_t *p, ptrdiff_t n, uint64_t limit) {
    uint64_t any = 0;
    for (ptrdiff_t i = 0; i < n; i++) { any |= (uint64_t)((uint64_t)p[i] >= limit); }
    return any != 0;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
