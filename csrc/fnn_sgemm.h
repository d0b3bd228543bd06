/* Row-major float32 GEMM for the AVX-512 and AVX2 builds:  C[M, N] = alpha op(A) op(B) + beta C.
 *
 * The AVX-512 form is described first; the AVX2 form (6 x 16 tiles) follows the same plan
 * at half the width, in C intrinsics, and takes fewer products (FNN_SGZ_TRANS_A, _KMAX).
 *
 * One thread's GEMM: the callers already share their work out over fastnn's OpenMP team
 * (row blocks, heads, time chunks) and call this from inside their parallel regions.
 *
 * Register tile: FNN_SGZ_MR (12) rows by 32 columns, 24 zmm accumulators; each k step
 * loads two zmm of B and broadcasts 12 values of A into 24 FMAs.  A stored (M, K) is read
 * in place: the 12 broadcasts of a k step come from 12 row streams.  A stored (K, M)
 * (trans_a) is first copied in blocks of 144 rows (fnn_sgz_pack_at), so a tile's k steps
 * are 12 contiguous floats each.  B is packed, per block of
 * FNN_SGZ_KC k by up to FNN_SGZ_NC columns (FNN_SGZ_NC_BIG where the L2 is large), into
 * 32-column panels, zero-padded past N, so a panel's k step is one 128-byte line pair.
 * Loop order: for each column block and k block, pack B; then for each 12-row tile, run
 * along the block's panels: the tile's A (12 x KC floats, 18 KiB) stays in L1, the packed
 * block (768 KiB, or 1.1 MiB) in L2.  A full
 * 12-row tile runs its k loop in inline assembly (fnn_sgemm_asm.h, x86-64 GCC/Clang; the
 * same operations per accumulator as the C loop, which the tail tiles and
 * FNN_SGZ_NO_ASM builds run).
 *
 * Measured on one core of an Intel Xeon with two 512-bit FMA units (242 GFLOP/s peak),
 * benchmarks/sgemm.py: 186-221 GFLOP/s on the GEMM blocks of fastnn's training benchmarks,
 * against OpenBLAS 0.3.31's 178-193 (its SkylakeX kernels) and MKL's 191-222
 * (BENCHMARKS.md, session 12).
 *
 * Each output is sum over k blocks (in order) of a sum over k (in order, one FMA each),
 * times alpha, plus beta C on the first block; it does not depend on M or on the tile an
 * output falls in.  float64 and the base build keep BLAS (fnn_gemm.pxi).
 * fnn_sgemm_z returns FNN_SGZ_NOMEM (-2), touching nothing, when its packing buffer cannot
 * be allocated: the caller reports MemoryError (a BLAS run instead would give other bits,
 * and BLAS's own first call on a thread needs more memory still: fnn_blas_guard.h). */
#ifndef FNN_SGEMM_H
#define FNN_SGEMM_H
#include <stddef.h>
#include <stdint.h>
#include "fnn_alloc.h"
#include "fnn_cache.h"
#include "fnn_transpose16.h"

#define FNN_SGZ_NOMEM (-2)   /* fnn_sgemm_z: no packing buffer (see above) */

#if defined(__AVX512F__)
#define FNN_SGZ_MR 12
#define FNN_SGZ_NR 32
#define FNN_SGZ_KC 384
#define FNN_SGZ_NC 512
/* Column blocks of up to 768 (a 1.1 MiB packed block of B) where the L2 holds it with room
 * to spare (fnn_sgz_nc_max): A is read, or packed when trans_a, once per column block,
 * and a 768-column output (a d_input or d_weight of a 768-wide layer) then takes one
 * block instead of 512 + 256.  One core of a Xeon with a 2 MiB L2, CPU time, best of 12
 * alternating rounds: d_weight 512x768x4096 (A^T, rows 3072 floats apart) 195-199 ->
 * 202-205 GFLOP/s, d_input 512x768x3072 206-208 -> 210-212, the forward 512x3072x768
 * 210-211 either way; 1024 columns (1.5 MiB) were no faster, and slower on the forward. */
#define FNN_SGZ_NC_BIG 768
#define FNN_SGZ_MC 144     /* rows of a packed block of A when trans_a (12 tiles) */
#define FNN_SGZ_TRANS_A 1  /* op(A) = A^T runs here too (A packed) */
#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2 builds (16 ymm registers): a 6 x 16 tile, 12 accumulators; each k step loads two
 * ymm of B and broadcasts 6 values of A into 12 FMAs.  The packed block of B (256 k by
 * 256 columns, 256 KiB) stays in a 512 KiB L2. */
#define FNN_SGZ_MR 6
#define FNN_SGZ_NR 16
#ifndef FNN_SGZ_KC
#define FNN_SGZ_KC 256
#endif
#ifndef FNN_SGZ_NC
#define FNN_SGZ_NC 256
#endif
#define FNN_SGZ_MC 144     /* rows of a block of A (24 tiles) */
/* Left to BLAS, where OpenBLAS's Haswell kernels were faster on one Zen 3 core: a
 * transposed A (A^T B, a weight gradient; packed here it ran at 81-91 GFLOP/s against
 * 93-94, benchmarks/sgemm.py; with a vectorised pack and MC 48-144, 85-91 against 88-95),
 * and depths past 512 read from an A whose rows are a multiple of 4 KiB apart (K = lda
 * 1024-3072 at M 512: 89-93 GFLOP/s against 90-93).  Those rows share their L1 sets: the
 * tile's 6 x 256 floats of A fill 6 of the 8 ways of 16 sets, and the packed B panel
 * streaming past evicts them.  The same depths with rows 16 floats longer ran at 92-96
 * against 90-93, and K 768 at 95-96 against 93. */
#define FNN_SGZ_TRANS_A 0
#define FNN_SGZ_KMAX 512
#define FNN_SGZ_NC_BIG FNN_SGZ_NC
#endif

#if defined(FNN_SGZ_MR)
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#define FNN_HAVE_SGZ 1
#define FNN_SGZ_PACK_ROWS 4  /* rows of B packed together (fnn_sgz_pack_b) */

/* The packing buffer: one per thread, allocated at the thread's first call and kept for
 * its life (OpenMP's pool threads persist), so a call allocates nothing; a thread that
 * ends frees it (the key's destructor), so a program that starts a thread per task does
 * not leak one buffer per task.  Found through the key, not a __thread variable: the C
 * library allocates a loaded module's thread-local block at a thread's first touch of
 * it and aborts the process when that allocation fails (a worker's first GEMM under an
 * address-space limit); pthread_getspecific allocates nothing, and a failed
 * pthread_setspecific is an error code (then no buffer: MemoryError). */
static pthread_key_t fnn_sgz_key;
static pthread_once_t fnn_sgz_once = PTHREAD_ONCE_INIT;
static int fnn_sgz_key_ok = 0;

static void fnn_sgz_free(void *raw) { free(raw); }
static void fnn_sgz_make_key(void) { fnn_sgz_key_ok = pthread_key_create(&fnn_sgz_key, fnn_sgz_free) == 0; }

static inline float *fnn_sgz_buffer(void)
{
    char *raw;
    pthread_once(&fnn_sgz_once, fnn_sgz_make_key);
    if (!fnn_sgz_key_ok)
        return NULL;
    raw = (char *)pthread_getspecific(fnn_sgz_key);
    if (raw == NULL) {
        raw = (char *)fnn_alloc_uncounted((size_t)FNN_SGZ_KC *
                                    (FNN_SGZ_NC_BIG + (FNN_SGZ_TRANS_A ? FNN_SGZ_MC : 0)) + 16,
                                sizeof(float));
        if (raw == NULL)
            return NULL;
        if (pthread_setspecific(fnn_sgz_key, raw) != 0) {
            free(raw);
            return NULL;
        }
    }
    return (float *)(raw + (64 - ((uintptr_t)raw & 63)) % 64);
}

#if defined(__AVX512F__)
/* Pack B's k rows [0, kc) and columns [0, nc) (op(B) is K x N) into 32-column panels:
 * panel p, step k at pb + p * kc * 32 + k * 32, columns past nc zero. */
static inline void
fnn_sgz_pack_b(int trans_b, const float *B, ptrdiff_t ldb, ptrdiff_t kc, ptrdiff_t nc, float *pb)
{
    if (!trans_b) {
        /* B's rows are read whole, FNN_SGZ_PACK_ROWS at a time (sequential streams the
         * hardware prefetcher follows), each panel getting a run of that many k steps:
         * walking one panel down all kc rows instead read 128 bytes per row at ldb
         * apart, a stride the prefetcher does not follow (12% of the samples of a GPT
         * demo d_weight block with B from L3 sat on those loads) */
        const ptrdiff_t jf = nc & ~(ptrdiff_t)(FNN_SGZ_NR - 1), w = nc - jf;
        const __mmask16 m0 = (__mmask16)(w >= 16 ? 0xFFFF : (1u << w) - 1);
        const __mmask16 m1 = (__mmask16)(w > 16 ? (1u << (w - 16)) - 1 : 0);
        for (ptrdiff_t k0 = 0; k0 < kc; k0 += FNN_SGZ_PACK_ROWS) {
            const ptrdiff_t k1 = kc - k0 < FNN_SGZ_PACK_ROWS ? kc : k0 + FNN_SGZ_PACK_ROWS;
            for (ptrdiff_t j = 0; j < jf; j += FNN_SGZ_NR)
                for (ptrdiff_t k = k0; k < k1; k++) {
                    const float *src = B + k * ldb + j;
                    float *dst = pb + j * kc + k * 32;
                    _mm512_store_ps(dst, _mm512_loadu_ps(src));
                    _mm512_store_ps(dst + 16, _mm512_loadu_ps(src + 16));
                }
            if (w)
                for (ptrdiff_t k = k0; k < k1; k++) {
                    const float *src = B + k * ldb + jf;
                    float *dst = pb + jf * kc + k * 32;
                    _mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, src));
                    _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, src + 16));
                }
        }
        return;
    }
    for (ptrdiff_t j = 0; j < nc; j += FNN_SGZ_NR) {
        const ptrdiff_t w = nc - j < FNN_SGZ_NR ? nc - j : FNN_SGZ_NR;
        float *dst = pb + j * kc;
        /* op(B)[k, j + c] = B[(j + c) * ldb + k]: 32 rows of B, each a run along k,
         * transposed 16 x 16 at a time */
        for (int c0 = 0; c0 < FNN_SGZ_NR; c0 += 16) {
            const float *src = B + (j + c0) * ldb;
            const int rows = w - c0 < 0 ? 0 : (w - c0 < 16 ? (int)(w - c0) : 16);
            ptrdiff_t k = 0;
            for (; k + 16 <= kc; k += 16) {
                __m512 r[16];
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    r[i] = i < rows ? _mm512_loadu_ps(src + i * ldb + k) : _mm512_setzero_ps();
                fnn_transpose16_ps(r);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    _mm512_store_ps(dst + (k + i) * 32 + c0, r[i]);
            }
            for (; k < kc; k++)
                for (int i = 0; i < 16; i++)
                    dst[k * 32 + c0 + i] = i < rows ? src[i * ldb + k] : 0.0f;
        }
    }
}

/* trans_a: A stored (K, M), so a tile's k steps are lda apart (and a power-of-two lda puts
 * them all in one L1 set).  Copy rows [0, mc) of op(A) (M x K), k steps [0, kc), into
 * 12-row tiles: tile t, step k at pa + t * 12 kc + k * 12 (a run of 12 floats). */
static inline void
fnn_sgz_pack_at(const float *A, ptrdiff_t lda, ptrdiff_t kc, ptrdiff_t mc, float *pa)
{
    for (ptrdiff_t k = 0; k < kc; k++) {
        const float *src = A + k * lda;
        ptrdiff_t i = 0;
        /* Plain 16-float loads and stores while a whole vector lies inside the row and a
         * later step follows: the store's 4 extra floats land on step k + 1's slots of the
         * same tile, which that step then writes (masked loads and stores cost out of
         * cache: see fnn_sk_load in fnn_skinny.h).  The last step and the row's end by
         * masks. */
        if (k + 1 < kc)
            for (; i + 16 <= mc; i += FNN_SGZ_MR)
                _mm512_storeu_ps(pa + i * kc + k * FNN_SGZ_MR, _mm512_loadu_ps(src + i));
        for (; i < mc; i += FNN_SGZ_MR) {
            const int mr = mc - i < FNN_SGZ_MR ? (int)(mc - i) : FNN_SGZ_MR;
            const __mmask16 mm = (__mmask16)((1u << mr) - 1);
            _mm512_mask_storeu_ps(pa + i * kc + k * FNN_SGZ_MR, mm,
                                  _mm512_maskz_loadu_ps(mm, src + i));
        }
    }
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(FNN_SGZ_NO_ASM)
#include "fnn_sgemm_asm.h"
#define FNN_SGZ_HAVE_ASM 1
#define FNN_SGZ_ASM_CLOBBERS \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
    "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", \
    "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", \
    "xmm31", "memory", "cc"
/* The full tile's k loop (12 rows, kc >= 1) in assembly, into acc (fnn_sgemm_asm.h):
 * A in place, row r at a + r lda */
static inline void fnn_sgz_k12_inplace(const float *a, ptrdiff_t lda, const float *b,
                                       ptrdiff_t kc, float *acc)
{
    const float *a0 = a, *a3 = a + 3 * lda, *a6 = a + 6 * lda, *a9 = a + 9 * lda;
    ptrdiff_t ld = lda * (ptrdiff_t)sizeof(float), k = kc;
    __asm__ volatile(FNN_SGZ_ASM_INPLACE
                     : [a0] "+r"(a0), [a3] "+r"(a3), [a6] "+r"(a6), [a9] "+r"(a9),
                       [b] "+r"(b), [k] "+r"(k)
                     : [ld] "r"(ld), [acc] "r"(acc)
                     : FNN_SGZ_ASM_CLOBBERS);
}
/* A packed: step k's twelve values at a + 12 k */
static inline void fnn_sgz_k12_packed(const float *a, const float *b, ptrdiff_t kc, float *acc)
{
    ptrdiff_t k = kc;
    __asm__ volatile(FNN_SGZ_ASM_PACKED
                     : [a0] "+r"(a), [b] "+r"(b), [k] "+r"(k)
                     : [acc] "r"(acc)
                     : FNN_SGZ_ASM_CLOBBERS);
}
#else
#define FNN_SGZ_HAVE_ASM 0
#endif

/* A tile's C lines are claimed for writing (PREFETCHW) when its k loop starts, so the
 * read-for-ownership of a C that is not in this core's cache (a fresh output, last
 * written by the other core) runs under the k loop instead of stalling the tile's
 * last stores: GPT demo forward blocks, one core, operands from L3: 512x384x128
 * 136 -> 146-163 GFLOP/s, 512x512x128 145-157 -> 167-173 (185-215 with all in L2).
 * Software prefetch of the next tile's A and of the next block's B and A, tried
 * beside it, was no faster in the GPT step.  PREFETCHW: every x86-64-v4 CPU has it, but
 * x86-64-v4 does not name it, so GCC's builtin would emit a plain prefetch. */
static inline __attribute__((always_inline)) void fnn_sgz_prefetchw(const float *p)
{
#if defined(__GNUC__) && defined(__x86_64__)
    __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
    _mm_prefetch((const char *)p, _MM_HINT_T0);
#endif
}

/* One tile: rows [0, mr) by the 32 columns of panel b (columns under masks m0 | m1).
 * A's element (r, k) is a[r * rs + k * ks].  first: C = alpha acc + bias (the tile's 32
 * column values, when bias is not NULL; C is not read) or alpha acc + beta C (beta == 0:
 * C is not read); else C += alpha acc.  two == 0 (a last panel of at most 16 live
 * columns, m1 == 0): the panel's first 16 columns only, half the FMAs -- the same chain
 * per output, so the same bits. */
static inline __attribute__((always_inline)) void
fnn_sgz_tile(const int mr, const int two, const float *a, ptrdiff_t rs, ptrdiff_t ks,
             const float *b, ptrdiff_t kc, float *c, ptrdiff_t ldc, __mmask16 m0,
             __mmask16 m1, float alpha, float beta, const float *bias, int first)
{
    __m512 c0[FNN_SGZ_MR], c1[FNN_SGZ_MR];
    if (first)
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            fnn_sgz_prefetchw(c + r * ldc);
            if (two)
                fnn_sgz_prefetchw(c + r * ldc + 16);
        }
#if FNN_SGZ_HAVE_ASM
    if (two && mr == FNN_SGZ_MR && (ks == 1 || (rs == 1 && ks == FNN_SGZ_MR))) {
        float acc[2 * 16 * FNN_SGZ_MR] __attribute__((aligned(64)));
        if (ks == 1)
            fnn_sgz_k12_inplace(a, rs, b, kc, acc);
        else
            fnn_sgz_k12_packed(a, b, kc, acc);
#pragma GCC unroll 12
        for (int r = 0; r < FNN_SGZ_MR; r++) {
            c0[r] = _mm512_load_ps(acc + 32 * r);
            c1[r] = _mm512_load_ps(acc + 32 * r + 16);
        }
        goto epilogue;
    }
#endif
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
    }
    for (ptrdiff_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(b + k * 32);
        const __m512 b1 = two ? _mm512_load_ps(b + k * 32 + 16) : b0;
        _mm_prefetch((const char *)(b + k * 32 + 256), _MM_HINT_T0);
        if (two)
            _mm_prefetch((const char *)(b + k * 32 + 272), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            const __m512 av = _mm512_set1_ps(a[r * rs + k * ks]);
            c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
            if (two)
                c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
    }
#if FNN_SGZ_HAVE_ASM
epilogue:;
#endif
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const __m512 bb0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 bb1 = bias && two ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    /* C by plain loads and stores when the tile spans all 32 columns (masked ones cost
       out of cache: see fnn_sk_load in fnn_skinny.h) */
#define FNN_SGZ_EPILOGUE(LD0, LD1, ST0, ST1)                                   \
    _Pragma("GCC unroll 12")                                                   \
    for (int r = 0; r < mr; r++) {                                             \
        float *cr = c + r * ldc;                                               \
        __m512 y0 = _mm512_mul_ps(c0[r], va);                                  \
        __m512 y1 = two ? _mm512_mul_ps(c1[r], va) : y0;                       \
        if (first && bias) {                                                   \
            y0 = _mm512_add_ps(y0, bb0);                                       \
            if (two)                                                           \
                y1 = _mm512_add_ps(y1, bb1);                                   \
        } else if (!first) {                                                   \
            y0 = _mm512_add_ps(y0, LD0);                                       \
            if (two)                                                           \
                y1 = _mm512_add_ps(y1, LD1);                                   \
        } else if (beta != 0.0f) {                                             \
            y0 = _mm512_fmadd_ps(vb, LD0, y0);                                 \
            if (two)                                                           \
                y1 = _mm512_fmadd_ps(vb, LD1, y1);                             \
        }                                                                      \
        ST0;                                                                   \
        if (two)                                                               \
            ST1;                                                               \
    }
    if (m0 == (__mmask16)0xFFFF && (!two || m1 == (__mmask16)0xFFFF)) {
        FNN_SGZ_EPILOGUE(_mm512_loadu_ps(cr), _mm512_loadu_ps(cr + 16),
                         _mm512_storeu_ps(cr, y0), _mm512_storeu_ps(cr + 16, y1))
    } else {
        FNN_SGZ_EPILOGUE(_mm512_maskz_loadu_ps(m0, cr), _mm512_maskz_loadu_ps(m1, cr + 16),
                         _mm512_mask_storeu_ps(cr, m0, y0), _mm512_mask_storeu_ps(cr + 16, m1, y1))
    }
#undef FNN_SGZ_EPILOGUE
}

/* Rows [i0, i0 + mr) of one k block along every panel of the packed column block. */
static inline __attribute__((always_inline)) void
fnn_sgz_rows(const int mr, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *pb,
             ptrdiff_t kc, ptrdiff_t nc, float *c, ptrdiff_t ldc, float alpha, float beta,
             const float *bias, int first)
{
    for (ptrdiff_t j = 0; j < nc; j += FNN_SGZ_NR) {
        const ptrdiff_t w = nc - j;
        const __mmask16 m0 = (__mmask16)(w >= 16 ? 0xFFFF : (1u << w) - 1);
        const __mmask16 m1 = (__mmask16)(w >= 32 ? 0xFFFF : w > 16 ? (1u << (w - 16)) - 1 : 0);
        if (w > 16)
            fnn_sgz_tile(mr, 1, a, rs, ks, pb + j * kc, kc, c + j, ldc, m0, m1, alpha, beta,
                         bias ? bias + j : NULL, first);
        else   /* a last panel of <= 16 columns: half a tile */
            fnn_sgz_tile(mr, 0, a, rs, ks, pb + j * kc, kc, c + j, ldc, m0, m1, alpha, beta,
                         bias ? bias + j : NULL, first);
    }
}

#else
/* ---------------------------------------------------------------- AVX2 (6 x 16) */
/* lanes [0, w) of a ymm, w in [0, 8] */
static inline __m256i fnn_sgy_mask(ptrdiff_t w)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(w < 0 ? 0 : w > 8 ? 8 : w)), lane);
}

/* Pack B's k rows [0, kc) and columns [0, nc) (op(B) is K x N) into 16-column panels:
 * panel p, step k at pb + p * kc * 16 + k * 16, columns past nc zero. */
static inline void
fnn_sgz_pack_b(int trans_b, const float *B, ptrdiff_t ldb, ptrdiff_t kc, ptrdiff_t nc, float *pb)
{
    if (!trans_b) {
        /* B's rows read whole, FNN_SGZ_PACK_ROWS at a time (streams the prefetcher
           follows), as in the AVX-512 form */
        const ptrdiff_t jf = nc & ~(ptrdiff_t)(FNN_SGZ_NR - 1), w = nc - jf;
        const __m256i m0 = fnn_sgy_mask(w), m1 = fnn_sgy_mask(w - 8);
        for (ptrdiff_t k0 = 0; k0 < kc; k0 += FNN_SGZ_PACK_ROWS) {
            const ptrdiff_t k1 = kc - k0 < FNN_SGZ_PACK_ROWS ? kc : k0 + FNN_SGZ_PACK_ROWS;
            for (ptrdiff_t j = 0; j < jf; j += FNN_SGZ_NR)
                for (ptrdiff_t k = k0; k < k1; k++) {
                    const float *src = B + k * ldb + j;
                    float *dst = pb + j * kc + k * 16;
                    _mm256_store_ps(dst, _mm256_loadu_ps(src));
                    _mm256_store_ps(dst + 8, _mm256_loadu_ps(src + 8));
                }
            if (w)
                for (ptrdiff_t k = k0; k < k1; k++) {
                    const float *src = B + k * ldb + jf;
                    float *dst = pb + jf * kc + k * 16;
                    _mm256_store_ps(dst, _mm256_maskload_ps(src, m0));
                    _mm256_store_ps(dst + 8, _mm256_maskload_ps(src + 8, m1));
                }
        }
        return;
    }
    for (ptrdiff_t j = 0; j < nc; j += FNN_SGZ_NR) {
        const ptrdiff_t w = nc - j < FNN_SGZ_NR ? nc - j : FNN_SGZ_NR;
        float *dst = pb + j * kc;
        /* op(B)[k, j + c] = B[(j + c) * ldb + k]: 16 rows of B, each a run along k,
         * transposed 8 x 8 at a time */
        for (int c0 = 0; c0 < FNN_SGZ_NR; c0 += 8) {
            const float *src = B + (j + c0) * ldb;
            const int rows = w - c0 < 0 ? 0 : (w - c0 < 8 ? (int)(w - c0) : 8);
            ptrdiff_t k = 0;
            for (; k + 8 <= kc; k += 8) {
                __m256 r[8];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    r[i] = i < rows ? _mm256_loadu_ps(src + i * ldb + k) : _mm256_setzero_ps();
                fnn_transpose8_ps(r);
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    _mm256_store_ps(dst + (k + i) * 16 + c0, r[i]);
            }
            for (; k < kc; k++)
                for (int i = 0; i < 8; i++)
                    dst[k * 16 + c0 + i] = i < rows ? src[i * ldb + k] : 0.0f;
        }
    }
}

/* One tile: rows [0, mr) by the 16 columns of panel b (the first w of them kept).  A's
 * element (r, k) is a[r * rs + k * ks].  first: C = alpha acc + bias (C not read) or
 * alpha acc + beta C (beta == 0: C not read); else C += alpha acc.  The same operations
 * per output as the AVX-512 tile. */
static inline __attribute__((always_inline)) void
fnn_sgz_tile(const int mr, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *b,
             ptrdiff_t kc, float *c, ptrdiff_t ldc, ptrdiff_t w, float alpha, float beta,
             const float *bias, int first)
{
    __m256 c0[FNN_SGZ_MR], c1[FNN_SGZ_MR];
    /* C's rows, wanted after the k loop: stored (first k block) or read and stored (the
       later ones -- prefetching only the first block's left a deep product's later
       blocks waiting on C: K 512-2048 at M 512 ran 89-92 GFLOP/s, 93-97 with it) */
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
        __builtin_prefetch(c + r * ldc, 1, 3);
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm256_setzero_ps();
        c1[r] = _mm256_setzero_ps();
    }
    for (ptrdiff_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b + k * 16), b1 = _mm256_load_ps(b + k * 16 + 8);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            const __m256 av = _mm256_broadcast_ss(a + r * rs + k * ks);
            c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
        }
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    if (w >= 16) {
        const __m256 bb0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
        const __m256 bb1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            float *cr = c + r * ldc;
            __m256 y0 = _mm256_mul_ps(c0[r], va), y1 = _mm256_mul_ps(c1[r], va);
            if (first && bias) {
                y0 = _mm256_add_ps(y0, bb0);
                y1 = _mm256_add_ps(y1, bb1);
            } else if (!first) {
                y0 = _mm256_add_ps(y0, _mm256_loadu_ps(cr));
                y1 = _mm256_add_ps(y1, _mm256_loadu_ps(cr + 8));
            } else if (beta != 0.0f) {
                y0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), y0);
                y1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), y1);
            }
            _mm256_storeu_ps(cr, y0);
            _mm256_storeu_ps(cr + 8, y1);
        }
        return;
    }
    const __m256i m0 = fnn_sgy_mask(w), m1 = fnn_sgy_mask(w - 8);
    const __m256 bb0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
    const __m256 bb1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        __m256 y0 = _mm256_mul_ps(c0[r], va), y1 = _mm256_mul_ps(c1[r], va);
        if (first && bias) {
            y0 = _mm256_add_ps(y0, bb0);
            y1 = _mm256_add_ps(y1, bb1);
        } else if (!first) {
            y0 = _mm256_add_ps(y0, _mm256_maskload_ps(cr, m0));
            y1 = _mm256_add_ps(y1, _mm256_maskload_ps(cr + 8, m1));
        } else if (beta != 0.0f) {
            y0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr, m0), y0);
            y1 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr + 8, m1), y1);
        }
        _mm256_maskstore_ps(cr, m0, y0);
        _mm256_maskstore_ps(cr + 8, m1, y1);
    }
}

/* Rows [i0, i0 + mr) of one k block along every panel of the packed column block. */
static inline __attribute__((always_inline)) void
fnn_sgz_rows(const int mr, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *pb,
             ptrdiff_t kc, ptrdiff_t nc, float *c, ptrdiff_t ldc, float alpha, float beta,
             const float *bias, int first)
{
    for (ptrdiff_t j = 0; j < nc; j += FNN_SGZ_NR)
        fnn_sgz_tile(mr, a, rs, ks, pb + j * kc, kc, c + j, ldc, nc - j, alpha, beta,
                     bias ? bias + j : NULL, first);
}

#endif

#define FNN_SGZ_ROWS_CASE(n) \
    case n: fnn_sgz_rows(n, a, rs, ks, pb, kc, nc, c, ldc, alpha, beta, bias, first); break;

static void
fnn_sgz_rows_any(int mr, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *pb,
                 ptrdiff_t kc, ptrdiff_t nc, float *c, ptrdiff_t ldc, float alpha, float beta,
                 const float *bias, int first)
{
    switch (mr) {
    FNN_SGZ_ROWS_CASE(1) FNN_SGZ_ROWS_CASE(2) FNN_SGZ_ROWS_CASE(3) FNN_SGZ_ROWS_CASE(4)
    FNN_SGZ_ROWS_CASE(5)
#if FNN_SGZ_MR > 6
    FNN_SGZ_ROWS_CASE(6) FNN_SGZ_ROWS_CASE(7) FNN_SGZ_ROWS_CASE(8)
    FNN_SGZ_ROWS_CASE(9) FNN_SGZ_ROWS_CASE(10) FNN_SGZ_ROWS_CASE(11)
#endif
    default: fnn_sgz_rows(FNN_SGZ_MR, a, rs, ks, pb, kc, nc, c, ldc, alpha, beta, bias, first); break;
    }
}
#undef FNN_SGZ_ROWS_CASE

/* The tiles of rows [i0, i0 + mc) of op(A) over k steps [p0, p0 + kc) along the packed
 * column block pb (columns [jc, jc + nc) of C); trans_a: those rows are packed at pa. */
static inline void
fnn_sgz_block(int trans_a, const float *A, ptrdiff_t lda, const float *pa, ptrdiff_t i0,
              ptrdiff_t mc, ptrdiff_t p0, ptrdiff_t kc, const float *pb, ptrdiff_t jc,
              ptrdiff_t nc, float *C, ptrdiff_t ldc, float alpha, float beta,
              const float *bias, int first)
{
    for (ptrdiff_t i = i0; i < i0 + mc; i += FNN_SGZ_MR) {
        const int mr = i0 + mc - i < FNN_SGZ_MR ? (int)(i0 + mc - i) : FNN_SGZ_MR;
        /* trans_a: the tile's packed run, k steps MR apart; else A in place */
        const float *at = trans_a ? pa + (i - i0) * kc : A + i * lda + p0;
        const ptrdiff_t trs = trans_a ? 1 : lda, tks = trans_a ? FNN_SGZ_MR : 1;
        const float *bj = bias ? bias + jc : NULL;
        if (mr == FNN_SGZ_MR)
            fnn_sgz_rows(FNN_SGZ_MR, at, trs, tks, pb, kc, nc, C + i * ldc + jc, ldc, alpha,
                         beta, bj, first);
        else
            fnn_sgz_rows_any(mr, at, trs, tks, pb, kc, nc, C + i * ldc + jc, ldc, alpha, beta,
                             bj, first);
    }
}

/* The widest column block (a multiple of FNN_SGZ_NR): FNN_SGZ_NC_BIG where its packed
 * block of B fills at most 60% of the L2 (cpu0's, fnn_cache.h), else FNN_SGZ_NC.  Read
 * once per module; blocking along N does not change any output's bits (each output's sum
 * runs over the same k blocks in the same order), so neither does the machine's L2. */
static ptrdiff_t fnn_sgz_nc_cached = 0;
static inline ptrdiff_t fnn_sgz_nc_max(void)
{
    ptrdiff_t nc = __atomic_load_n(&fnn_sgz_nc_cached, __ATOMIC_RELAXED);
    if (nc == 0) {
        const ptrdiff_t big = (ptrdiff_t)FNN_SGZ_KC * FNN_SGZ_NC_BIG * (ptrdiff_t)sizeof(float);
        nc = big * 5 <= fnn_cache_bytes(2) * 3 ? FNN_SGZ_NC_BIG : FNN_SGZ_NC;
        __atomic_store_n(&fnn_sgz_nc_cached, nc, __ATOMIC_RELAXED);
    }
    return nc;
}
/* Set the widest column block (tests: both widths on any machine), rounded down to whole
 * panels and clamped to [FNN_SGZ_NR, FNN_SGZ_NC_BIG]; n <= 0 restores the machine's
 * default.  Returns the previous width.  Not while a GEMM runs. */
static inline ptrdiff_t fnn_sgz_set_nc_max(ptrdiff_t n)
{
    const ptrdiff_t old = fnn_sgz_nc_max();
    if (n > 0) {
        n -= n % FNN_SGZ_NR;
        n = n < FNN_SGZ_NR ? FNN_SGZ_NR : n > FNN_SGZ_NC_BIG ? FNN_SGZ_NC_BIG : n;
    }
    __atomic_store_n(&fnn_sgz_nc_cached, n > 0 ? n : 0, __ATOMIC_RELAXED);
    return old;
}
/* Edge j of n column blocks over N columns: N j / n rounded up to whole panels (N at
 * j == n).  With n = ceil(N / w) for a w of whole panels, no block is wider than w. */
static inline ptrdiff_t fnn_sgz_col_edge(ptrdiff_t N, ptrdiff_t j, ptrdiff_t n)
{
    const ptrdiff_t e = (N * j / n + FNN_SGZ_NR - 1) / FNN_SGZ_NR * FNN_SGZ_NR;
    return j >= n || e > N ? N : e;
}

/* Whether this build's kernel takes a product of depth K with A's rows lda apart (A
 * stored (M, K); trans_a: (K, M)); 0: fnn_sgemm_z returns -1 for it. */
static inline int
fnn_sgemm_z_takes(int trans_a, ptrdiff_t K, ptrdiff_t lda)
{
#if !FNN_SGZ_TRANS_A
    if (trans_a)
        return 0;
#endif
#if defined(FNN_SGZ_KMAX)
    if (!trans_a && K > FNN_SGZ_KMAX && (lda & 1023) == 0)
        return 0;
#endif
    (void)trans_a; (void)K; (void)lda;
    return 1;
}

/* Row-major C[M, N] = alpha op(A) op(B) + beta C; op(A) is M x K (A stored (K, M) when
 * trans_a), op(B) is K x N (B stored (N, K) when trans_b).  M, N, K > 0.  bias (N
 * values) or NULL: with it C = alpha op(A) op(B) + bias[column] (beta ignored, C not
 * read: a linear layer's bias added in the first k block's stores, the same bits as a C
 * filled with the bias and beta = 1).  Returns 0; FNN_SGZ_NOMEM (C untouched) when the
 * packing buffer cannot be had; -1 (C untouched) for a product the build leaves to BLAS
 * (fnn_sgemm_z_takes: the avx2 build's transposed A, and depths past FNN_SGZ_KMAX read
 * from rows a multiple of 4 KiB apart): the caller then runs BLAS. */
static int
fnn_sgemm_z(int trans_a, int trans_b, ptrdiff_t M, ptrdiff_t N, ptrdiff_t K, float alpha,
            const float *A, ptrdiff_t lda, const float *B, ptrdiff_t ldb, float beta,
            float *C, ptrdiff_t ldc, const float *bias)
{
    float *pb, *pa;
    if (!fnn_sgemm_z_takes(trans_a, K, lda))
        return -1;         /* the caller runs BLAS */
    pb = fnn_sgz_buffer();
    if (pb == NULL)
        return FNN_SGZ_NOMEM;
    pa = pb + (size_t)FNN_SGZ_KC * FNN_SGZ_NC_BIG;
    /* k blocks of near-equal length, at most KC each; column blocks of near-equal width,
     * at most fnn_sgz_nc_max() each, edges on whole panels (fnn_sgz_col_edge) */
    const ptrdiff_t nkb = (K + FNN_SGZ_KC - 1) / FNN_SGZ_KC;
    const ptrdiff_t ncm = fnn_sgz_nc_max(), njb = (N + ncm - 1) / ncm;
    for (ptrdiff_t jb = 0; jb < njb; jb++) {
        const ptrdiff_t jc = fnn_sgz_col_edge(N, jb, njb);
        const ptrdiff_t nc = fnn_sgz_col_edge(N, jb + 1, njb) - jc;
        if (nc <= 0)
            continue;
        for (ptrdiff_t kb = 0; kb < nkb; kb++) {
            const ptrdiff_t p0 = K * kb / nkb, kc = K * (kb + 1) / nkb - p0;
            fnn_sgz_pack_b(trans_b, trans_b ? B + jc * ldb + p0 : B + p0 * ldb + jc, ldb,
                           kc, nc, pb);
            for (ptrdiff_t i0 = 0; i0 < M; i0 += FNN_SGZ_MC) {
                const ptrdiff_t mc = M - i0 < FNN_SGZ_MC ? M - i0 : FNN_SGZ_MC;
#if FNN_SGZ_TRANS_A
                if (trans_a)
                    fnn_sgz_pack_at(A + p0 * lda + i0, lda, kc, mc, pa);
#endif
                fnn_sgz_block(trans_a, A, lda, pa, i0, mc, p0, kc, pb, jc, nc, C, ldc, alpha,
                              beta, bias, kb == 0);
            }
        }
    }
    return 0;
}

#else
#define FNN_HAVE_SGZ 0
#define FNN_SGZ_TRANS_A 0
static inline ptrdiff_t fnn_sgz_nc_max(void) { return 0; }
static inline ptrdiff_t fnn_sgz_set_nc_max(ptrdiff_t n) { (void)n; return 0; }
static inline int
fnn_sgemm_z_takes(int trans_a, ptrdiff_t K, ptrdiff_t lda)
{
    (void)trans_a; (void)K; (void)lda;
    return 0;
}
static inline int
fnn_sgemm_z(int trans_a, int trans_b, ptrdiff_t M, ptrdiff_t N, ptrdiff_t K, float alpha,
            const float *A, ptrdiff_t lda, const float *B, ptrdiff_t ldb, float beta,
            float *C, ptrdiff_t ldc, const float *bias)
{
    (void)trans_a; (void)trans_b; (void)M; (void)N; (void)K; (void)alpha; (void)A;
    (void)lda; (void)B; (void)ldb; (void)beta; (void)C; (void)ldc; (void)bias;
    return -1;
}
#endif
#endif
