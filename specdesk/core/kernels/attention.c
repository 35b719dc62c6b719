/* Attention of a few positions over a bfloat16 KV cache, each position on its own, in float32.
 *
 * Why: a verify pass must give each position the bits a one-position step would, and torch's CPU attention kernel
 * rounds differently with the number of rows and keys a call has, so the lean decoder called it once per position
 * and layer: ~38 us a call on 2 cores for SmolLM2 (9 heads, 300 keys), ~1.1 ms of a 8 ms one-position pass and as
 * much again for every further position. Here one call takes every position of a layer; each (position, KV head)
 * is computed alone by one thread, keys in order, with the same instructions whatever else the call holds.
 *
 * q: (n, hq, hd) bfloat16; the caches: KV head h's slot j at base + h * head_stride + j * hd (bfloat16).
 * Position t sees slots 0 .. prefix[t] - 1, then extras[extra_off[t] .. extra_off[t + 1] - 1] (a tree node's
 * ancestors), in that order. out: (n, hq * hd) bfloat16. Query head i reads KV head i / (hq / hk).
 */
#include <omp.h>
#include <stdlib.h>

#include "scalars.h"

#define LANES 16

/* sum a[d] * b[d] over d < hd (hd a multiple of LANES): lane-wise partial sums, then a fixed tree. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline float dot(const float *a, const float *b, int64_t hd) {
    __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b));
    for (int64_t d = LANES; d < hd; d += LANES) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), _mm512_loadu_ps(b + d), acc);
    return _mm512_reduce_add_ps(acc);
}
#else
static inline float dot(const float *a, const float *b, int64_t hd) {
    float acc[LANES] = {0};
    for (int64_t d = 0; d < hd; d += LANES)
        for (int l = 0; l < LANES; l++) acc[l] = fmaf(a[d + l], b[d + l], acc[l]);
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define FAST_SCORES 1
/* r[l] = the sum of a[l]'s 16 lanes, for 16 vectors at once (each sum by the same fixed tree, whatever the others). */
static inline __m512 hsum16(const __m512 *a) {
    __m512 b[8], c[4], e[2];
    for (int i = 0; i < 8; i++) b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                                                     _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
        c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; i++)
        e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88), _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(e[0], e[1], 0x88), _mm512_shuffle_f32x4(e[0], e[1], 0xdd));
}

/* Scores of query heads 0 .. g-1 (bfloat16, hd a multiple of 32) against keys 0 .. L-1, 16 keys at a time, with
 * AVX512-BF16's pairwise dot products straight from the cache: s[i * L + j] = scale * q_i . k_j. */
static void scores16(const uint16_t *q, const uint16_t *kc, int64_t hd, int64_t g, int64_t prefix,
                     const int64_t *extras, int64_t L, float scale, float *s) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t j0 = 0; j0 < L; j0 += 16) {
        const int cnt = L - j0 < 16 ? (int)(L - j0) : 16;
        const uint16_t *k[16];
        for (int l = 0; l < cnt; l++) k[l] = kc + (j0 + l < prefix ? j0 + l : extras[j0 + l - prefix]) * hd;
        for (int64_t i = 0; i < g; i++) {
            __m512 a[16];
            for (int l = 0; l < 16; l++) {
                a[l] = _mm512_setzero_ps();
                if (l < cnt)
                    for (int64_t c = 0; c < hd; c += 32)
                        a[l] = _mm512_dpbf16_ps(a[l], (__m512bh)_mm512_loadu_si512((const void *)(q + i * hd + c)),
                                                (__m512bh)_mm512_loadu_si512((const void *)(k[l] + c)));
            }
            _mm512_mask_storeu_ps(s + i * L + j0, (__mmask16)((1u << cnt) - 1u), _mm512_mul_ps(hsum16(a), sc));
        }
    }
}

/* The weighted sum of values, every output dimension of the g heads in registers at once (G x C vectors of 16, C =
 * hd / 16), keys in order: each lane's sum is the one-chunk-at-a-time loop's, in the same order, so the same bits,
 * with G * C independent chains instead of G. Constant G and C keep the sums in registers. */
static inline __attribute__((always_inline)) void pv_fixed(const int G, const int C, const float *s,
                                                           const uint16_t *vc, int64_t prefix, const int64_t *extras,
                                                           int64_t L, float *o) {
    __m512 acc[G * C];
    for (int a = 0; a < G * C; a++) acc[a] = _mm512_setzero_ps();
    for (int64_t j = 0; j < L; j++) {
        const uint16_t *v = vc + (j < prefix ? j : extras[j - prefix]) * (16 * C);
        for (int c = 0; c < C; c++) {
            const __m512 vf = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(v + 16 * c))), 16));
            for (int i = 0; i < G; i++) acc[i * C + c] = _mm512_fmadd_ps(_mm512_set1_ps(s[i * L + j]), vf, acc[i * C + c]);
        }
    }
    for (int i = 0; i < G; i++)
        for (int c = 0; c < C; c++) _mm512_storeu_ps(o + (i * C + c) * 16, acc[i * C + c]);
}

/* pv_fixed for the shapes it is built for (1-4 heads a KV head at head_dim 64, 1-2 at 128); 0 for others. */
static int pv_all(int64_t g, int64_t chunks, const float *s, const uint16_t *vc, int64_t prefix,
                  const int64_t *extras, int64_t L, float *o) {
#define PV_CASE(G, C) if (g == G && chunks == C) { pv_fixed(G, C, s, vc, prefix, extras, L, o); return 1; }
    PV_CASE(1, 4) PV_CASE(2, 4) PV_CASE(3, 4) PV_CASE(4, 4) PV_CASE(1, 8) PV_CASE(2, 8)
#undef PV_CASE
    return 0;
}
#endif

static void attend_one(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, int64_t hd, int64_t g,
                       int64_t prefix, const int64_t *extras, int64_t n_extra, float scale, uint16_t *out,
                       float *work) {
    const int64_t L = prefix + n_extra, full = L / LANES * LANES;
    float *restrict qf = work;               /* (g, hd) */
    float *restrict row = qf + g * hd;       /* (hd): one key or value */
    float *restrict o = row + hd;            /* (g, hd) */
    float *restrict s = o + g * hd;          /* (g, L) scores, then weights */
    for (int64_t i = 0; i < g * hd; i++) qf[i] = bf(q[i]), o[i] = 0.0f;
#ifdef FAST_SCORES
    if (hd % 32 == 0) {
        scores16(q, kc, hd, g, prefix, extras, L, scale, s);
    } else
#endif
    for (int64_t j = 0; j < L; j++) {
        const uint16_t *k = kc + (j < prefix ? j : extras[j - prefix]) * hd;
        for (int64_t d = 0; d < hd; d++) row[d] = bf(k[d]);
        for (int64_t i = 0; i < g; i++) s[i * L + j] = dot(qf + i * hd, row, hd) * scale;
    }
    for (int64_t i = 0; i < g; i++) {
        float *restrict si = s + i * L;
        float top[LANES], acc[LANES];
        for (int l = 0; l < LANES; l++) top[l] = -INFINITY, acc[l] = 0.0f;
        /* lane-wise (key j in lane j % LANES), so that the loops vectorize in a fixed order */
        for (int64_t j0 = 0; j0 < full; j0 += LANES)
            for (int l = 0; l < LANES; l++) top[l] = si[j0 + l] > top[l] ? si[j0 + l] : top[l];
        for (int64_t j = full; j < L; j++) top[j - full] = si[j] > top[j - full] ? si[j] : top[j - full];
        float m = top[0];
        for (int l = 1; l < LANES; l++) m = top[l] > m ? top[l] : m;
        for (int64_t j = 0; j < L; j++) si[j] = exp_fast(si[j] - m);
        for (int64_t j0 = 0; j0 < full; j0 += LANES)
            for (int l = 0; l < LANES; l++) acc[l] += si[j0 + l];
        for (int64_t j = full; j < L; j++) acc[j - full] += si[j];
        for (int w = LANES / 2; w > 0; w /= 2)
            for (int l = 0; l < w; l++) acc[l] += acc[l + w];
        const float inv = 1.0f / acc[0];
        for (int64_t j = 0; j < L; j++) si[j] *= inv;
    }
#ifdef FAST_SCORES
    if (pv_all(g, hd / 16, s, vc, prefix, extras, L, o)) {
        /* done: every dimension at once */
    } else if (g <= 16) {
        /* 16 output dimensions at a time, the g heads' sums in registers, keys in order */
        for (int64_t c = 0; c < hd; c += 16) {
            __m512 acc[16];
            for (int64_t i = 0; i < g; i++) acc[i] = _mm512_setzero_ps();
            for (int64_t j = 0; j < L; j++) {
                const uint16_t *v = vc + (j < prefix ? j : extras[j - prefix]) * hd + c;
                const __m512 vf = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)v)), 16));
                for (int64_t i = 0; i < g; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(s[i * L + j]), vf, acc[i]);
            }
            for (int64_t i = 0; i < g; i++) _mm512_storeu_ps(o + i * hd + c, acc[i]);
        }
    } else
#endif
    for (int64_t j = 0; j < L; j++) {
        const uint16_t *v = vc + (j < prefix ? j : extras[j - prefix]) * hd;
        for (int64_t d = 0; d < hd; d++) row[d] = bf(v[d]);
        for (int64_t i = 0; i < g; i++) {
            const float p = s[i * L + j];
            float *restrict oi = o + i * hd;
            for (int64_t d = 0; d < hd; d++) oi[d] = fmaf(p, row[d], oi[d]);
        }
    }
    for (int64_t i = 0; i < g * hd; i++) out[i] = to_bf(o[i]);
}

/* Returns 0, or -1 if out of memory. */
int sd_attend(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, int64_t head_stride, int64_t n, int64_t hq,
              int64_t hk, int64_t hd, const int64_t *prefix, const int64_t *extra_off, const int64_t *extras,
              float scale, uint16_t *out, int threads) {
    const int64_t g = hq / hk;
    int64_t longest = 0;
    for (int64_t t = 0; t < n; t++) {
        int64_t L = prefix[t] + extra_off[t + 1] - extra_off[t];
        longest = L > longest ? L : longest;
    }
    if (threads < 1) threads = 1;
    /* An item is a position's query heads on one KV head (sharing its keys), or, where those are too few to keep
     * the threads busy (one position, 3 KV heads, 2 threads: 2 against 1), one query head: a head's sums are its
     * own either way (the same bits). */
    const int64_t per_item = n * hk < 2 * threads && g > 1 ? 1 : g;
    const int64_t per = 2 * per_item * hd + hd + per_item * longest + 16; /* floats of one item's work space */
    const int64_t items = n * hq / per_item;
    if (threads > items) threads = (int)items;
    float *work = (float *)malloc((size_t)(per * threads) * sizeof(float));
    if (!work) return -1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t item = 0; item < items; item++) {
        const int64_t t = item / (hq / per_item), first = item % (hq / per_item) * per_item, h = first / g;
        attend_one(q + (t * hq + first) * hd, kc + h * head_stride, vc + h * head_stride, hd, per_item, prefix[t],
                   extras + extra_off[t], extra_off[t + 1] - extra_off[t], scale, out + (t * hq + first) * hd,
                   work + per * omp_get_thread_num());
    }
    free(work);
    return 0;
}
