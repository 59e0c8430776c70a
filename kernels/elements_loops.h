/* The loops of _elements.pyx: packing single-element puts by destination, and applying a
 * packed record in order.  See that module for the record's layout.
 *
 * They are plain C, not Cython, for two reasons measured on the loops themselves (1 M puts of
 * 8 bytes, AMD EPYC, gcc -O3): written in Cython and inlined into the Python-facing function,
 * the packing loop ran about 1.3x slower than the same loop compiled alone (the compiler no
 * longer kept the cursors' base pointers in registers); and `restrict` tells the compiler that
 * the packed bytes do not alias the inputs or the cursors.
 *
 * Each function is defined twice, for 4-byte (uint32) and 8-byte (int64) offsets, by
 * HPCBSP_EL_DEFINE.  Every one returns -1, or the index of the first put whose offset is outside
 * its part: the packing functions' output is then not a valid record (the caller discards it),
 * and the applying function has applied the puts before it and none after.  Values are copied
 * as bytes, with an 8-byte fast path for int64 and float64.  Records start 8-byte aligned, so
 * their offsets are read and written as aligned uint32 or int64.
 */
#ifndef HPCBSP_ELEMENTS_LOOPS_H
#define HPCBSP_ELEMENTS_LOOPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define HPCBSP_EL_NOINLINE __attribute__((noinline))
#else
#define HPCBSP_EL_NOINLINE
#define __builtin_prefetch(address, rw, locality) ((void)0)
#endif

/* The applying loop's writes land at random places in the table, each a cache miss unless its
 * line is fetched early.  It fetches the line of the put HPCBSP_EL_FAR_AHEAD puts ahead into the
 * L2 cache (prefetcht1), or, for a table of at most HPCBSP_EL_NEAR_BYTES, the line of the put
 * HPCBSP_EL_NEAR_AHEAD ahead into L1 (for writing).  Measured on an AMD EPYC VM (1 M puts of 8
 * bytes, medians): into an 8 MiB table not in cache, 2.9 ms without the L2 fetches (L1 ones 32
 * ahead; 64-256 ahead were no better, the L1's outstanding misses being the limit), 1.6 ms with
 * them, 2.1-2.4 ms against 3.5-3.7 ms with a second process doing the same; into a 64 MiB table
 * 6.3 against 8.8 ms.  Into a table of at most 1 MiB, which the L2 caches hold, the L1 fetches
 * were as fast or faster. */
#define HPCBSP_EL_FAR_AHEAD 128
#define HPCBSP_EL_NEAR_AHEAD 32
#define HPCBSP_EL_NEAR_BYTES (1 << 20)

/* One applying loop: STORE(i, off) writes put i at element off. */
#define HPCBSP_EL_APPLY_LOOP(AHEAD, RW, LOCALITY, STORE)                                        \
    for (i = 0; i < count; i++) {                                                               \
        uint64_t off = (uint64_t)offs[i];                                                       \
        if (i + (AHEAD) < count) {                                                              \
            uint64_t ahead = (uint64_t)offs[i + (AHEAD)];                                       \
            if (ahead < (uint64_t)size) __builtin_prefetch(base + itemsize * ahead, RW, LOCALITY); \
        }                                                                                       \
        if (off >= (uint64_t)size) return i;                                                    \
        STORE(i, off);                                                                          \
    }

#define HPCBSP_EL_STORE8(i, off) memcpy(base + 8 * (off), vals + 8 * (i), 8)
#define HPCBSP_EL_STORE(i, off) memcpy(base + itemsize * (off), vals + itemsize * (i), (size_t)itemsize)

#define HPCBSP_EL_DEFINE(NAME, OFF_T)                                                           \
/* Packing by destination: put i's offset goes to base + off_at[dest[i]] and its value to      \
 * base + val_at[dest[i]], which then advance.  dest[i] must be a rank (0 <= dest < p: the     \
 * caller's counting pass checked it); the offset is checked here against sizes[dest[i]]. */   \
static HPCBSP_EL_NOINLINE ptrdiff_t hpcbsp_pack_##NAME(                                         \
        ptrdiff_t n, const int64_t *restrict dest, const int64_t *restrict offset,              \
        const uint8_t *restrict vals, ptrdiff_t itemsize, const int64_t *restrict sizes,        \
        uint8_t *restrict base, int64_t *restrict off_at, int64_t *restrict val_at)             \
{                                                                                               \
    ptrdiff_t i;                                                                                \
    if (itemsize == 8) {                                                                        \
        for (i = 0; i < n; i++) {                                                               \
            int64_t d = dest[i], o = offset[i], v;                                              \
            OFF_T narrow = (OFF_T)o;                                                            \
            if ((uint64_t)o >= (uint64_t)sizes[d]) return i;                                    \
            memcpy(&v, vals + 8 * i, 8);                                                        \
            memcpy(base + off_at[d], &narrow, sizeof(OFF_T));                                   \
            off_at[d] += (int64_t)sizeof(OFF_T);                                                \
            memcpy(base + val_at[d], &v, 8);                                                    \
            val_at[d] += 8;                                                                     \
        }                                                                                       \
    } else {                                                                                    \
        for (i = 0; i < n; i++) {                                                               \
            int64_t d = dest[i], o = offset[i];                                                 \
            OFF_T narrow = (OFF_T)o;                                                            \
            if ((uint64_t)o >= (uint64_t)sizes[d]) return i;                                    \
            memcpy(base + off_at[d], &narrow, sizeof(OFF_T));                                   \
            off_at[d] += (int64_t)sizeof(OFF_T);                                                \
            memcpy(base + val_at[d], vals + itemsize * i, (size_t)itemsize);                    \
            val_at[d] += itemsize;                                                              \
        }                                                                                       \
    }                                                                                           \
    return -1;                                                                                  \
}                                                                                               \
                                                                                                \
/* Packing when every put goes to one destination (of part size `size`): the offsets are       \
 * narrowed into offs_out in order, and the values copied into vals_out in one block. */       \
static HPCBSP_EL_NOINLINE ptrdiff_t hpcbsp_pack_one_##NAME(                                     \
        ptrdiff_t n, const int64_t *restrict offset, const uint8_t *restrict vals,              \
        ptrdiff_t itemsize, int64_t size, OFF_T *restrict offs_out, uint8_t *restrict vals_out) \
{                                                                                               \
    ptrdiff_t i;                                                                                \
    uint64_t bad = 0;                                                                           \
    for (i = 0; i < n; i++) {  /* no early exit: the loop vectorises; the bad put is found below */ \
        bad |= (uint64_t)offset[i] >= (uint64_t)size;                                           \
        offs_out[i] = (OFF_T)offset[i];                                                         \
    }                                                                                           \
    if (bad) {                                                                                  \
        for (i = 0; i < n; i++)                                                                 \
            if ((uint64_t)offset[i] >= (uint64_t)size) return i;                                \
    }                                                                                           \
    memcpy(vals_out, vals, (size_t)(n * itemsize));                                             \
    return -1;                                                                                  \
}                                                                                               \
                                                                                                \
/* Applying a record of `count` puts to a table of `size` elements, in order. */               \
static HPCBSP_EL_NOINLINE ptrdiff_t hpcbsp_apply_##NAME(                                        \
        const OFF_T *restrict offs, const uint8_t *restrict vals, ptrdiff_t count,              \
        ptrdiff_t itemsize, uint8_t *restrict base, ptrdiff_t size)                             \
{                                                                                               \
    ptrdiff_t i;                                                                                \
    int near = (uint64_t)size * (uint64_t)itemsize <= HPCBSP_EL_NEAR_BYTES;                     \
    if (itemsize == 8 && near) {                                                                \
        HPCBSP_EL_APPLY_LOOP(HPCBSP_EL_NEAR_AHEAD, 1, 3, HPCBSP_EL_STORE8)                      \
    } else if (itemsize == 8) {                                                                 \
        HPCBSP_EL_APPLY_LOOP(HPCBSP_EL_FAR_AHEAD, 0, 2, HPCBSP_EL_STORE8)                       \
    } else if (near) {                                                                          \
        HPCBSP_EL_APPLY_LOOP(HPCBSP_EL_NEAR_AHEAD, 1, 3, HPCBSP_EL_STORE)                       \
    } else {                                                                                    \
        HPCBSP_EL_APPLY_LOOP(HPCBSP_EL_FAR_AHEAD, 0, 2, HPCBSP_EL_STORE)                        \
    }                                                                                           \
    return -1;                                                                                  \
}

HPCBSP_EL_DEFINE(u32, uint32_t)
HPCBSP_EL_DEFINE(i64, int64_t)

#endif
