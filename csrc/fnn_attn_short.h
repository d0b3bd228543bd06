/* Attention of one (sequence, head) whose keys fit L1: up to FNN_ATS_LMAX keys, head
 * widths up to FNN_ATS_EMAX (float32, inference).  The varlen path of a short sentence
 * (MiniLM at batch 1: 25 tokens, 6 heads of 64) spent ~100 us per layer in per-head BLAS
 * calls around tiles of 25 x 25 (and in the BLAS thread-limit context around them); here
 * a (sequence, head) is ~1-3 us of plain loops, no BLAS, no allocation.
 *
 * Per (sequence, head): the keys are transposed onto the stack, scaled (kt[e][j] = scale *
 * k[j][e], j padded with zeros to a multiple of 16), so a query row's scores are one
 * axpy per feature over <= 4 vectors kept in registers; softmax over the row (<= 64 terms
 * <= 1: the sum in float on AVX-512, in double in the plain C form); the output row is
 * the probability-weighted sum of value rows, then times 1 / sum.  No reduction across
 * vector lanes: every score and every output element is summed in an order fixed by the
 * shapes alone, whatever the thread count (on AVX-512 a score is four partial sums over
 * the features mod 4 and an output two over even and odd keys, added at the end: more
 * independent FMA chains for rows of ~25 keys).  A NaN score makes its row NaN; a range
 * without keys, or a row whose scores are all -inf, gives zeros (the tiled path's
 * conventions). */
#ifndef FNN_ATTN_SHORT_H
#define FNN_ATTN_SHORT_H
#include <stddef.h>
#include <math.h>
#include <string.h>
#include "fnn_math.h"

#define FNN_ATS_LMAX 64     /* keys per (sequence, head) */
#define FNN_ATS_EMAX 128    /* features per head (query/key and value) */

#if defined(FNN_HAVE_AVX512)
/* One query row with AVX-512: the scores in nv <= 4 zmm accumulators (one axpy per
 * feature), softmax on whole vectors (lanes past Lk are -inf: exp gives 0), the output
 * in nc <= 8 zmm accumulators (Ev = 16 nc).  nv and nc are compile-time constants in each
 * inlined copy. */
static inline __attribute__((always_inline)) void
fnn_ats_row512(int nv, int nc, const float *q, const float *kt, ptrdiff_t E,
               const float *v, ptrdiff_t vld, ptrdiff_t Lk, float *out, float *s)
{
    __m512 a[4], a1[4], a2[4], a3[4], o[8], o1[8];
    ptrdiff_t e = 0, j;
    /* four partial sums per score vector (features e mod 4, added at the end): four
     * times the independent FMA chains of one row (latency, not throughput, bound) */
    for (int u = 0; u < nv; u++)
        a[u] = a1[u] = a2[u] = a3[u] = _mm512_setzero_ps();
    for (; e + 4 <= E; e += 4) {
        const __m512 b0 = _mm512_set1_ps(q[e]), b1 = _mm512_set1_ps(q[e + 1]);
        const __m512 b2 = _mm512_set1_ps(q[e + 2]), b3 = _mm512_set1_ps(q[e + 3]);
        const float *kr = kt + e * FNN_ATS_LMAX;
        for (int u = 0; u < nv; u++) {
            a[u] = _mm512_fmadd_ps(b0, _mm512_load_ps(kr + 16 * u), a[u]);
            a1[u] = _mm512_fmadd_ps(b1, _mm512_load_ps(kr + FNN_ATS_LMAX + 16 * u), a1[u]);
            a2[u] = _mm512_fmadd_ps(b2, _mm512_load_ps(kr + 2 * FNN_ATS_LMAX + 16 * u), a2[u]);
            a3[u] = _mm512_fmadd_ps(b3, _mm512_load_ps(kr + 3 * FNN_ATS_LMAX + 16 * u), a3[u]);
        }
    }
    for (; e < E; e++) {
        const __m512 b = _mm512_set1_ps(q[e]);
        const float *kr = kt + e * FNN_ATS_LMAX;
        for (int u = 0; u < nv; u++)
            a[u] = _mm512_fmadd_ps(b, _mm512_load_ps(kr + 16 * u), a[u]);
    }
    for (int u = 0; u < nv; u++)
        a[u] = _mm512_add_ps(_mm512_add_ps(a[u], a1[u]), _mm512_add_ps(a2[u], a3[u]));
    __m512 mx = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (int u = 0; u < nv; u++) {
        ptrdiff_t left = Lk - 16 * u;
        __mmask16 live = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        a[u] = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), a[u]);
        nan |= _mm512_cmp_ps_mask(a[u], a[u], _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, a[u]);
    }
    float m = _mm512_reduce_max_ps(mx);
    if (nan || m == -INFINITY) {
        /* NaN scores: a NaN row (as torch); no key with a finite score: zeros */
        for (int c = 0; c < nc; c++)
            _mm512_storeu_ps(out + 16 * c, _mm512_set1_ps(nan ? NAN : 0.0f));
        return;
    }
    __m512 sum = _mm512_setzero_ps(), vm = _mm512_set1_ps(m);
    for (int u = 0; u < nv; u++) {
        a[u] = fnn_exp_nonpos_ps16(_mm512_sub_ps(a[u], vm));
        sum = _mm512_add_ps(sum, a[u]);
        _mm512_store_ps(s + 16 * u, a[u]);
    }
    const float inv = 1.0f / _mm512_reduce_add_ps(sum);
    for (int c = 0; c < nc; c++)
        o[c] = o1[c] = _mm512_setzero_ps();
    for (j = 0; j + 2 <= Lk; j += 2) {       /* even and odd keys: two chains per vector */
        const __m512 p0 = _mm512_set1_ps(s[j]), p1 = _mm512_set1_ps(s[j + 1]);
        const float *vr = v + j * vld;
        for (int c = 0; c < nc; c++) {
            o[c] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(vr + 16 * c), o[c]);
            o1[c] = _mm512_fmadd_ps(p1, _mm512_loadu_ps(vr + vld + 16 * c), o1[c]);
        }
    }
    if (j < Lk) {
        const __m512 p0 = _mm512_set1_ps(s[j]);
        const float *vr = v + j * vld;
        for (int c = 0; c < nc; c++)
            o[c] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(vr + 16 * c), o[c]);
    }
    const __m512 vi = _mm512_set1_ps(inv);
    for (int c = 0; c < nc; c++)
        _mm512_storeu_ps(out + 16 * c, _mm512_mul_ps(_mm512_add_ps(o[c], o1[c]), vi));
}

#define FNN_ATS_NV(nc)                                                                   \
    switch (nv) {                                                                        \
    case 1: fnn_ats_row512(1, nc, q, kt, E, v, vld, Lk, out, s); return 1;               \
    case 2: fnn_ats_row512(2, nc, q, kt, E, v, vld, Lk, out, s); return 1;               \
    case 3: fnn_ats_row512(3, nc, q, kt, E, v, vld, Lk, out, s); return 1;               \
    default: fnn_ats_row512(4, nc, q, kt, E, v, vld, Lk, out, s); return 1;              \
    }

/* -> 1 when the row was done here (Ev a multiple of 16), else 0 */
static int fnn_ats_row_vec(int nv, const float *q, const float *kt, ptrdiff_t E,
                           const float *v, ptrdiff_t vld, ptrdiff_t Lk, ptrdiff_t Ev,
                           float *out, float *s)
{
    if (Ev % 16)
        return 0;
    switch (Ev / 16) {
    case 1: FNN_ATS_NV(1)
    case 2: FNN_ATS_NV(2)
    case 3: FNN_ATS_NV(3)
    case 4: FNN_ATS_NV(4)
    case 5: FNN_ATS_NV(5)
    case 6: FNN_ATS_NV(6)
    case 7: FNN_ATS_NV(7)
    case 8: FNN_ATS_NV(8)
    default: return 0;
    }
}
#undef FNN_ATS_NV
#else
static int fnn_ats_row_vec(int nv, const float *q, const float *kt, ptrdiff_t E,
                           const float *v, ptrdiff_t vld, ptrdiff_t Lk, ptrdiff_t Ev,
                           float *out, float *s)
{
    (void)nv; (void)q; (void)kt; (void)E; (void)v; (void)vld; (void)Lk; (void)Ev; (void)out;
    (void)s;
    return 0;
}
#endif

/* One query row in plain C (other variants, or Ev not a multiple of 16). */
static void fnn_ats_row_c(const float *q, const float *kt, ptrdiff_t E, const float *v,
                          ptrdiff_t vld, ptrdiff_t Lk, ptrdiff_t lp, ptrdiff_t Ev, float *out,
                          float *s, float *acc)
{
    float mx = -INFINITY, inv;
    double sum = 0.0;
    int nan = 0;
    ptrdiff_t j, e, c;
    for (j = 0; j < lp; j++)
        s[j] = 0.0f;
    for (e = 0; e < E; e++) {
        const float a = q[e];
        const float *kr = kt + e * FNN_ATS_LMAX;
        for (j = 0; j < lp; j++)
            s[j] += a * kr[j];
    }
    for (j = 0; j < Lk; j++) {
        if (s[j] != s[j])
            nan = 1;
        mx = s[j] > mx ? s[j] : mx;
    }
    if (nan || mx == -INFINITY) {
        for (c = 0; c < Ev; c++)
            out[c] = nan ? NAN : 0.0f;
        return;
    }
    for (j = 0; j < Lk; j++) {
        s[j] = fnn_expf_nonpos(s[j] - mx);
        sum += s[j];
    }
    for (c = 0; c < Ev; c++)
        acc[c] = 0.0f;
    for (j = 0; j < Lk; j++) {
        const float p = s[j];
        const float *vr = v + j * vld;
        for (c = 0; c < Ev; c++)
            acc[c] += p * vr[c];
    }
    inv = (float)(1.0 / sum);
    for (c = 0; c < Ev; c++)
        out[c] = acc[c] * inv;
}

/* Query rows q[0..Lq) (row stride qld) against keys k[0..Lk) / values v[0..Lk) (row
 * strides kld, vld) of one head -> out rows (stride old).  Lk <= FNN_ATS_LMAX,
 * E, Ev <= FNN_ATS_EMAX. */
static void fnn_ats_head_f32(const float *q, ptrdiff_t qld, const float *k, ptrdiff_t kld,
                             const float *v, ptrdiff_t vld, float *out, ptrdiff_t old,
                             ptrdiff_t Lq, ptrdiff_t Lk, ptrdiff_t E, ptrdiff_t Ev, float scale)
{
    float kt[FNN_ATS_EMAX * FNN_ATS_LMAX] __attribute__((aligned(64)));
    float s[FNN_ATS_LMAX] __attribute__((aligned(64)));
    float acc[FNN_ATS_EMAX] __attribute__((aligned(64)));
    int nv = (int)((Lk + 15) / 16);
    ptrdiff_t lp = (ptrdiff_t)nv * 16, i, j, e;
    if (Lk == 0) {
        for (i = 0; i < Lq; i++)
            memset(out + i * old, 0, (size_t)Ev * sizeof(float));
        return;
    }
    for (e = 0; e < E; e++) {
        float *kr = kt + e * FNN_ATS_LMAX;
        for (j = 0; j < Lk; j++)
            kr[j] = scale * k[j * kld + e];
        for (; j < lp; j++)
            kr[j] = 0.0f;
    }
    for (i = 0; i < Lq; i++)
        if (!fnn_ats_row_vec(nv, q + i * qld, kt, E, v, vld, Lk, Ev, out + i * old, s))
            fnn_ats_row_c(q + i * qld, kt, E, v, vld, Lk, lp, Ev, out + i * old, s, acc);
}

#endif
