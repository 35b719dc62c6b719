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

/* Scores -> weights in place: one row of L keys (every kernel path calls this one, so the same bits). */
static void softmax_row(float *restrict si, int64_t L) {
    const int64_t full = L / LANES * LANES;
    float top[LANES], acc[LANES];
    for (int l = 0; l < LANES; l++) top[l] = -INFINITY, acc[l] = 0.0f;
    /* lane-wise (key j in lane j % LANES), so that the loops vectorize in a fixed order */
    for (int64_t j0 = 0; j0 < full; j0 += LANES)
        for (int l = 0; l < LANES; l++) top[l] = si[j0 + l] > top[l] ? si[j0 + l] : top[l];
    for (int64_t j = full; j < L; j++) top[j - full] = si[j] > top[j - full] ? si[j] : top[j - full];
    float m = top[0];
    for (int l = 1; l < LANES; l++) m = top[l] > m ? top[l] : m;
    /* exp_fast's vector forms (the same bits): the compiler left this loop scalar. SmolLM2's 30 layers' attention on
     * a 2-core AMD EPYC (Zen 3, AVX2), both builds in one process, outputs identical: 300 keys, 1 / 2 / 4 positions
     * 0.86 / 1.62 / 2.33 -> 0.79 / 1.46 / 2.15 ms; 800 keys 1.80 / 3.13 / 5.29 -> 1.61 / 2.51 / 4.20 ms */
    int64_t j = 0;
#if defined(__AVX512F__)
    const __m512 vm = _mm512_set1_ps(m);
    for (; j + 16 <= L; j += 16) _mm512_storeu_ps(si + j, exp_fast16(_mm512_sub_ps(_mm512_loadu_ps(si + j), vm)));
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 vm = _mm256_set1_ps(m);
    for (; j + 8 <= L; j += 8) _mm256_storeu_ps(si + j, exp_fast8(_mm256_sub_ps(_mm256_loadu_ps(si + j), vm)));
#endif
    for (; j < L; j++) si[j] = exp_fast(si[j] - m);
    for (int64_t j0 = 0; j0 < full; j0 += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += si[j0 + l];
    for (int64_t j = full; j < L; j++) acc[j - full] += si[j];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    const float inv = 1.0f / acc[0];
    for (int64_t j = 0; j < L; j++) si[j] *= inv;
}

/* The fewest and the most keys rows r < R see. */
static void key_span(const int64_t *Lr, int R, int64_t *Lmin, int64_t *Lmax) {
    *Lmin = INT64_MAX, *Lmax = 0;
    for (int r = 0; r < R; r++) {
        *Lmax = Lr[r] > *Lmax ? Lr[r] : *Lmax;
        *Lmin = Lr[r] < *Lmin ? Lr[r] : *Lmin;
    }
}

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

/* Scores of rows r < R (query vectors qr[r], bfloat16, hd a multiple of 32; row r sees keys 0 .. Lr[r] - 1, key j
 * at slot j < prefix or extras[j - prefix]), 16 keys at a time, with AVX512-BF16's pairwise dot products straight
 * from the cache: s[r * ls + j] = scale * q_r . k_j. C2 = hd / 32: constant, the 16 keys' sums stay in registers
 * (a loop over a variable hd kept them in memory and ran ~3x slower); the same operations in the same order either
 * way. The block's 16 keys are gathered once for all rows. */
static inline __attribute__((always_inline)) void scores_fixed(const int C2, const uint16_t *const *qr,
                                                               const int64_t *Lr, int R, const uint16_t *kc,
                                                               int64_t prefix, const int64_t *extras, int64_t Lmax,
                                                               float scale, float *s, int64_t ls) {
    const int64_t hd = 32 * C2;
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t j0 = 0; j0 < Lmax; j0 += 16) {
        const uint16_t *k[16];
        for (int l = 0; l < 16 && j0 + l < Lmax; l++) k[l] = kc + (j0 + l < prefix ? j0 + l : extras[j0 + l - prefix]) * hd;
        for (int r = 0; r < R; r++) {
            const int64_t left = Lr[r] - j0;
            if (left <= 0) continue;
            const int cnt = left < 16 ? (int)left : 16;
            __m512 a[16];
            if (cnt == 16) {
                for (int l = 0; l < 16; l++) {
                    a[l] = _mm512_setzero_ps();
                    for (int c = 0; c < C2; c++)
                        a[l] = _mm512_dpbf16_ps(a[l], (__m512bh)_mm512_loadu_si512((const void *)(qr[r] + 32 * c)),
                                                (__m512bh)_mm512_loadu_si512((const void *)(k[l] + 32 * c)));
                }
            } else {
                for (int l = 0; l < 16; l++) {
                    a[l] = _mm512_setzero_ps();
                    if (l < cnt)
                        for (int c = 0; c < C2; c++)
                            a[l] = _mm512_dpbf16_ps(a[l], (__m512bh)_mm512_loadu_si512((const void *)(qr[r] + 32 * c)),
                                                    (__m512bh)_mm512_loadu_si512((const void *)(k[l] + 32 * c)));
                }
            }
            _mm512_mask_storeu_ps(s + r * ls + j0, (__mmask16)((1u << cnt) - 1u), _mm512_mul_ps(hsum16(a), sc));
        }
    }
}

static void scores(const uint16_t *const *qr, const int64_t *Lr, int R, const uint16_t *kc, int64_t hd, int64_t prefix,
                   const int64_t *extras, int64_t Lmax, float scale, float *s, int64_t ls) {
    if (hd == 64)
        scores_fixed(2, qr, Lr, R, kc, prefix, extras, Lmax, scale, s, ls);
    else if (hd == 128)
        scores_fixed(4, qr, Lr, R, kc, prefix, extras, Lmax, scale, s, ls);
    else
        scores_fixed((int)(hd / 32), qr, Lr, R, kc, prefix, extras, Lmax, scale, s, ls);
}

/* Query heads 0 .. g-1 of one position (q + i * hd), each over keys 0 .. L-1: s[i * L + j]. */
static void scores16(const uint16_t *q, const uint16_t *kc, int64_t hd, int64_t g, int64_t prefix,
                     const int64_t *extras, int64_t L, float scale, float *s) {
    for (int64_t i0 = 0; i0 < g; i0 += 16) {
        const uint16_t *qr[16];
        int64_t Lr[16];
        const int R = g - i0 < 16 ? (int)(g - i0) : 16;
        for (int r = 0; r < R; r++) qr[r] = q + (i0 + r) * hd, Lr[r] = L;
        scores(qr, Lr, R, kc, hd, prefix, extras, L, scale, s + i0 * L, L);
    }
}

/* Rows sharing a KV head (query heads of one or several positions, each row seeing keys 0 .. Lr[r] - 1) in one pass
 * over the keys: a key or value is loaded once for all rows instead of once a row (at 2,000 keys a verify pass paid
 * a whole attention per position). Each row's scores, softmax and weighted sum are attend_one's, operation for
 * operation in the same order (lane l of a 16-key block depends on key j0 + l alone; a row's sums run over its own
 * keys in order), so the same bits. R rows x C chunks of 16 dimensions in registers. */
#define RMAX 6
/* Key j's value row into the sums of rows r < R (P pairs of 16 dimensions a row: even ones, odd ones), of the rows
 * that see it; ``every`` (a constant) says all do, so the update needs no condition. */
static inline __attribute__((always_inline)) void pv_key(const int R, const int P, const int every, int64_t j,
                                                         const float *s, int64_t ls, const int64_t *Lr,
                                                         const uint16_t *vc, int64_t prefix, const int64_t *extras,
                                                         __m512i high, __m512 *even, __m512 *odd) {
    const uint16_t *v = vc + (j < prefix ? j : extras[j - prefix]) * (32 * P);
#pragma GCC unroll 8
    for (int c = 0; c < P; c++) {
        const __m512i x = _mm512_loadu_si512((const void *)(v + 32 * c));
        const __m512 ve = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
        const __m512 vo = _mm512_castsi512_ps(_mm512_and_si512(x, high));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            if (every || j < Lr[r]) {
                const __m512 w = _mm512_set1_ps(s[r * ls + j]);
                even[r * P + c] = _mm512_fmadd_ps(w, ve, even[r * P + c]);
                odd[r * P + c] = _mm512_fmadd_ps(w, vo, odd[r * P + c]);
            }
    }
}

/* The weighted sum of values for rows r < R (row r's weights s[r * ls + j] over its keys j < Lr[r], key j at slot j
 * < prefix or extras[j - prefix]), every output dimension in registers at once (R x C vectors of 16, C = hd / 16),
 * keys in order: each lane's sum is the one-chunk-at-a-time loop's, in the same order, so the same bits, with R * C
 * independent chains. Constant R and C keep the sums in registers: the keys every row sees run in a loop of their
 * own, pv_key without the per-row condition (with it GCC kept the sums in memory: 5-13% of a call at 150-1,500 keys).
 * A value row is read 32 dimensions a load and widened by one shift (its even dimensions) and one mask (its odd
 * ones) instead of a widening move and a shift every 16 (1-10% more); the lanes hold dimensions 0, 2, .. and
 * 1, 3, .. and are put back in order at the end; each dimension's sum is the same either way. */
static inline __attribute__((always_inline)) void pv_rows_fixed(const int R, const int C, const float *s, int64_t ls,
                                                                const int64_t *Lr, int64_t Lmin, int64_t Lmax,
                                                                const uint16_t *vc, int64_t prefix,
                                                                const int64_t *extras, float *o) {
    const int P = C / 2;
    __m512 even[R * P], odd[R * P];
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
#pragma GCC unroll 32
    for (int a = 0; a < R * P; a++) even[a] = _mm512_setzero_ps(), odd[a] = _mm512_setzero_ps();
    for (int64_t j = 0; j < Lmin; j++) pv_key(R, P, 1, j, s, ls, Lr, vc, prefix, extras, high, even, odd);
    for (int64_t j = Lmin; j < Lmax; j++) pv_key(R, P, 0, j, s, ls, Lr, vc, prefix, extras, high, even, odd);
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < P; c++) {
            _mm512_storeu_ps(o + (r * C + 2 * c) * 16, _mm512_permutex2var_ps(even[r * P + c], lo, odd[r * P + c]));
            _mm512_storeu_ps(o + (r * C + 2 * c + 1) * 16, _mm512_permutex2var_ps(even[r * P + c], hi, odd[r * P + c]));
        }
}

/* pv_rows_fixed for the shapes it is built for (1-6 rows at head_dim 64, 1-3 at 128); 0 for others. */
static int pv_rows(int R, int64_t chunks, const float *s, int64_t ls, const int64_t *Lr, int64_t Lmin, int64_t Lmax,
                   const uint16_t *vc, int64_t prefix, const int64_t *extras, float *o) {
#define PVR_CASE(N, C)                                                                    \
    if (R == N && chunks == C) {                                                          \
        pv_rows_fixed(N, C, s, ls, Lr, Lmin, Lmax, vc, prefix, extras, o);                \
        return 1;                                                                         \
    }
    PVR_CASE(1, 4) PVR_CASE(2, 4) PVR_CASE(3, 4) PVR_CASE(4, 4) PVR_CASE(5, 4) PVR_CASE(6, 4)
    PVR_CASE(1, 8) PVR_CASE(2, 8) PVR_CASE(3, 8)
#undef PVR_CASE
    return 0;
}

/* Whether attend_rows serves this head size, and how many rows it takes at once. */
static int rows_block(int64_t hd) { return hd == 64 ? RMAX : (hd == 128 ? 3 : 0); }

/* Floats of attend_rows' work space for R rows over up to L keys. */
static int64_t rows_work(int64_t R, int64_t L, int64_t hd) { return R * L + R * hd + 16; }

static void attend_rows(const uint16_t *const *qr, uint16_t *const *outr, const int64_t *Lr, int R,
                        const uint16_t *kc, const uint16_t *vc, int64_t hd, float scale, float *work) {
    int64_t Lmin, Lmax;
    key_span(Lr, R, &Lmin, &Lmax);
    float *restrict s = work;       /* (R, Lmax) scores, then weights */
    float *restrict o = s + R * Lmax; /* (R, hd) */
    scores(qr, Lr, R, kc, hd, Lmax, NULL, Lmax, scale, s, Lmax);
    for (int r = 0; r < R; r++) softmax_row(s + r * Lmax, Lr[r]);
    pv_rows(R, hd / 16, s, Lmax, Lr, Lmin, Lmax, vc, Lmax, NULL, o);
    for (int r = 0; r < R; r++)
        for (int64_t i = 0; i < hd; i++) outr[r][i] = to_bf(o[r * hd + i]);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define ROWS_AVX2 1
#include <immintrin.h>
#define RMAX 6

/* dot()'s last steps for 8 keys at once: t[l] holds key l's 8 sums after its first tree step (lanes l + lanes l + 8);
 * the steps over lanes 4, 2, 1 apart are dot()'s additions, the same operands in the same order; key l's result in
 * lane l. */
static inline __m256 tree8(const __m256 *t) {
    __m256 x[4], y[2];
    for (int i = 0; i < 4; i++) /* lanes l and l + 4 of keys 2i (low half) and 2i + 1 (high half) */
        x[i] = _mm256_add_ps(_mm256_permute2f128_ps(t[2 * i], t[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(t[2 * i], t[2 * i + 1], 0x31));
    for (int i = 0; i < 2; i++) { /* lanes l and l + 2: keys 4i, 4i + 2 | 4i + 1, 4i + 3 */
        const __m256d a = _mm256_castps_pd(x[2 * i]), b = _mm256_castps_pd(x[2 * i + 1]);
        y[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    /* lanes l and l + 1: keys 0, 2, 4, 6 | 1, 3, 5, 7, then in key order */
    const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], 0x88), _mm256_shuffle_ps(y[0], y[1], 0xdd));
    return _mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The sums of KB keys (kp[b]: bfloat16 rows) with R query rows (qf, float, 16 * C dimensions), dot()'s 16 lanes:
 * t[r * 8 + b] = lanes 0-7 plus lanes 8-15 (dot()'s first tree step), each lane's fma chain from zero in dimension
 * order. Each key chunk is widened in registers once for all rows; R * KB * 2 independent chains keep the FMA
 * units busy (constants, so the sums stay in registers). */
static inline __attribute__((always_inline)) void dots_block(const int R, const int KB, const int C, const float *qf,
                                                             const uint16_t *const *kp, __m256 *t) {
    __m256 lo[RMAX * 4], hi[RMAX * 4];
#pragma GCC unroll 24
    for (int i = 0; i < R * KB; i++) lo[i] = _mm256_setzero_ps(), hi[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int b = 0; b < KB; b++) {
            const __m256 k0 = load_bf16x8(kp[b] + 16 * c), k1 = load_bf16x8(kp[b] + 16 * c + 8);
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                lo[r * KB + b] = _mm256_fmadd_ps(_mm256_loadu_ps(qf + (r * C + c) * 16), k0, lo[r * KB + b]);
                hi[r * KB + b] = _mm256_fmadd_ps(_mm256_loadu_ps(qf + (r * C + c) * 16 + 8), k1, hi[r * KB + b]);
            }
        }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int b = 0; b < KB; b++) t[r * 8 + b] = _mm256_add_ps(lo[r * KB + b], hi[r * KB + b]);
}

/* scores of rows r < R (queries qf[r], float, hd = 16 * C; row r sees keys 0 .. Lr[r] - 1) 8 keys at a time:
 * s[r * ls + j] = dot(q_r, k_j) * scale, dot()'s bits (tree8 finishes each key's tree). Keys go KB at a time into
 * dots_block (4 for one row, 2 for two or three, else 1: enough chains without spilling the sums); a block past the
 * last key reads key j0 again and stores nothing of it. R, KB and C constant: a loop over a variable head size kept
 * the sums in memory (the loop before, profiled: ~65% of a call, widening keys into memory and summing each key's
 * chains one after another). */
static inline __attribute__((always_inline)) void scores_rows_fixed(const int R, const int C, const float *qf,
                                                                    const int64_t *Lr, const uint16_t *kc,
                                                                    int64_t Lmax, float scale, float *s, int64_t ls) {
    const int KB = R == 1 ? 4 : (R <= 3 ? 2 : 1);
    const int64_t hd = 16 * C;
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 t[RMAX * 8];
    for (int64_t j0 = 0; j0 < Lmax; j0 += 8) {
        const int cnt = Lmax - j0 < 8 ? (int)(Lmax - j0) : 8;
#pragma GCC unroll 1
        for (int l0 = 0; l0 < 8; l0 += KB) { /* not unrolled: GCC then interleaved the blocks and spilled their sums */
            const uint16_t *kp[4];
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) kp[b] = kc + (l0 + b < cnt ? j0 + l0 + b : j0) * hd;
            dots_block(R, KB, C, qf, kp, t + l0);
        }
        for (int r = 0; r < R; r++) {
            const int64_t left = Lr[r] - j0;
            if (left <= 0) continue;
            const __m256 res = _mm256_mul_ps(tree8(t + r * 8), sc);
            if (left >= 8 && cnt == 8) {
                _mm256_storeu_ps(s + r * ls + j0, res);
            } else {
                float out[8];
                _mm256_storeu_ps(out, res);
                memcpy(s + r * ls + j0, out, (size_t)(left < cnt ? left : cnt) * sizeof(float));
            }
        }
    }
}

static void scores_rows(const float *qf, const int64_t *Lr, int R, const uint16_t *kc, int64_t hd, int64_t Lmax,
                        float scale, float *s, int64_t ls) {
#define SCR_CASE(N)                                                                                   \
    case N:                                                                                           \
        if (hd == 64) scores_rows_fixed(N, 4, qf, Lr, kc, Lmax, scale, s, ls);                        \
        else if (hd == 128) scores_rows_fixed(N, 8, qf, Lr, kc, Lmax, scale, s, ls);                  \
        else scores_rows_fixed(N, (int)(hd / 16), qf, Lr, kc, Lmax, scale, s, ls);                    \
        break;
    switch (R) { SCR_CASE(1) SCR_CASE(2) SCR_CASE(3) SCR_CASE(4) SCR_CASE(5) default: SCR_CASE(RMAX) }
#undef SCR_CASE
}

/* Key j's value row (its 16 * P dimensions at v) into the sums of rows r < R that see it
 * (``every``, a constant: all do, so no condition). 16 bfloat16 values a load, widened by one shift (dimensions
 * 0, 2, .. 14: ev) and one mask (1, 3, .. 15: od) instead of a widening move and a shift every 8. */
static inline __attribute__((always_inline)) void pv_key2(const int R, const int P, const int every, int64_t j,
                                                          const float *s, int64_t ls, const int64_t *Lr,
                                                          const uint16_t *v, __m256i high, __m256 *ev, __m256 *od) {
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(v + 16 * p));
        const __m256 ve = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
        const __m256 vo = _mm256_castsi256_ps(_mm256_and_si256(x, high));
#pragma GCC unroll 6
        for (int r = 0; r < R; r++)
            if (every || j < Lr[r]) {
                const __m256 w = _mm256_broadcast_ss(s + r * ls + j);
                ev[r * P + p] = _mm256_fmadd_ps(w, ve, ev[r * P + p]);
                od[r * P + p] = _mm256_fmadd_ps(w, vo, od[r * P + p]);
            }
    }
}

/* The weighted sums of values for rows r < R, 16 * P dimensions at a time, keys in order: each dimension's sum is
 * attend_one's fmaf chain (from 0), so the same bits whatever P, with the rows' sums in registers (R * P * 2 <= 12)
 * and each value row widened once for all of them. The keys every row sees run in a loop of their own, without the
 * per-row condition. One row takes 64 dimensions a pass: 8 chains, as the FMA units' latency wants (a one-position
 * pass's items hold 1 or 2 rows: SmolLM2's 9 heads on 3 KV heads, 2 threads). The lanes hold even and odd
 * dimensions and are put back in order at the end. */
static inline __attribute__((always_inline)) void pv_rows_n(const int R, const int P, const float *s, int64_t ls,
                                                            const int64_t *Lr, int64_t Lmin, int64_t Lmax,
                                                            const uint16_t *vc, int64_t hd, float *o) {
    const __m256i high = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int64_t c = 0; c < hd; c += 16 * P) {
        __m256 ev[RMAX * 2], od[RMAX * 2];
#pragma GCC unroll 12
        for (int i = 0; i < R * P; i++) ev[i] = _mm256_setzero_ps(), od[i] = _mm256_setzero_ps();
        for (int64_t j = 0; j < Lmin; j++) pv_key2(R, P, 1, j, s, ls, Lr, vc + j * hd + c, high, ev, od);
        for (int64_t j = Lmin; j < Lmax; j++) pv_key2(R, P, 0, j, s, ls, Lr, vc + j * hd + c, high, ev, od);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int p = 0; p < P; p++) {
                /* (e0 o0 e1 o1 | e4 o4 e5 o5) and (e2 o2 e3 o3 | e6 o6 e7 o7) -> dimensions 0-7 and 8-15 */
                const __m256 lo = _mm256_unpacklo_ps(ev[r * P + p], od[r * P + p]);
                const __m256 hi = _mm256_unpackhi_ps(ev[r * P + p], od[r * P + p]);
                _mm256_storeu_ps(o + r * hd + c + 16 * p, _mm256_permute2f128_ps(lo, hi, 0x20));
                _mm256_storeu_ps(o + r * hd + c + 16 * p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
            }
    }
}

static void pv_rows(int R, const float *s, int64_t ls, const int64_t *Lr, int64_t Lmin, int64_t Lmax,
                    const uint16_t *vc, int64_t hd, float *o) {
    /* hd is a multiple of 32 here (sd_attend's condition) */
    switch (R) {
    case 1:
        if (hd % 64 == 0) pv_rows_n(1, 4, s, ls, Lr, Lmin, Lmax, vc, hd, o);
        else pv_rows_n(1, 2, s, ls, Lr, Lmin, Lmax, vc, hd, o);
        break;
    case 2: pv_rows_n(2, 2, s, ls, Lr, Lmin, Lmax, vc, hd, o); break;
    case 3: pv_rows_n(3, 2, s, ls, Lr, Lmin, Lmax, vc, hd, o); break;
    case 4: pv_rows_n(4, 1, s, ls, Lr, Lmin, Lmax, vc, hd, o); break;
    case 5: pv_rows_n(5, 1, s, ls, Lr, Lmin, Lmax, vc, hd, o); break;
    default: pv_rows_n(RMAX, 1, s, ls, Lr, Lmin, Lmax, vc, hd, o); break;
    }
}

/* Whether attend_rows serves this head size (dot() takes 16 dimensions a step), and how many rows it takes at once. */
static int rows_block(int64_t hd) { return hd % 16 == 0 && hd <= 256 ? RMAX : 0; }

/* Floats of attend_rows' work space for R rows over up to L keys. */
static int64_t rows_work(int64_t R, int64_t L, int64_t hd) { return R * L + 2 * R * hd + 16; }

/* Rows sharing a KV head, as the AVX-512 kernel's attend_rows: each key and value loaded once for all rows, each row's
 * scores, softmax and weighted sum attend_one's, operation for operation in the same order (so the same bits). */
static void attend_rows(const uint16_t *const *qr, uint16_t *const *outr, const int64_t *Lr, int R,
                        const uint16_t *kc, const uint16_t *vc, int64_t hd, float scale, float *work) {
    int64_t Lmin, Lmax;
    key_span(Lr, R, &Lmin, &Lmax);
    float *restrict s = work;           /* (R, Lmax) scores, then weights */
    float *restrict o = s + R * Lmax;   /* (R, hd) */
    float *restrict qf = o + R * hd;    /* (R, hd) */
    for (int r = 0; r < R; r++)
        for (int64_t i = 0; i < hd; i++) qf[r * hd + i] = bf(qr[r][i]);
    scores_rows(qf, Lr, R, kc, hd, Lmax, scale, s, Lmax);
    for (int r = 0; r < R; r++) softmax_row(s + r * Lmax, Lr[r]);
    pv_rows(R, s, Lmax, Lr, Lmin, Lmax, vc, hd, o);
    for (int r = 0; r < R; r++)
        for (int64_t i = 0; i < hd; i++) outr[r][i] = to_bf(o[r * hd + i]);
}
#endif

static void attend_one(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, int64_t hd, int64_t g,
                       int64_t prefix, const int64_t *extras, int64_t n_extra, float scale, uint16_t *out,
                       float *work) {
    const int64_t L = prefix + n_extra;
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
    for (int64_t i = 0; i < g; i++) softmax_row(s + i * L, L);
#ifdef FAST_SCORES
    int64_t Lr[RMAX];
    for (int64_t i = 0; i < g && i < RMAX; i++) Lr[i] = L;
    if (g <= RMAX && pv_rows((int)g, hd / 16, s, L, Lr, L, L, vc, prefix, extras, o)) {
        /* done: every dimension at once */
    } else if (g <= 16) {
        /* 16 output dimensions at a time, the g heads' sums in registers, keys in order */
        for (int64_t c = 0; c < hd; c += 16) {
            __m512 acc[16];
            for (int64_t i = 0; i < g; i++) acc[i] = _mm512_setzero_ps();
            for (int64_t j = 0; j < L; j++) {
                const uint16_t *v = vc + (j < prefix ? j : extras[j - prefix]) * hd + c;
                const __m512 vf = load_bf16x16(v);
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
#if defined(FAST_SCORES) || defined(ROWS_AVX2)
    if (rows_block(hd) && hd % 32 == 0 && extra_off[n] == 0) {
        /* Items of up to RMAX rows on one KV head (row t * g + i: position t's query head i), the rows split evenly,
         * and into smaller items where there would be fewer than two a thread (one position of SmolLM2's 3 KV heads
         * on 2 threads: 6 items of 2 and 1 rows; measured against 3 of 3 rows and 9 of 1, the old kernel's split,
         * at 2,000 keys: 1.9 ms for the 30 layers against 2.2 and 2.8). */
        const int64_t rows = n * g;
        int64_t blocks = (rows + rows_block(hd) - 1) / rows_block(hd);
        while (hk * blocks < 2 * threads && blocks < rows) blocks++;
        const int64_t rb = (rows + blocks - 1) / blocks;
        blocks = (rows + rb - 1) / rb;
        const int64_t items = hk * blocks;
        const int64_t per = rows_work(rb, longest, hd);
        if (threads > items) threads = (int)items;
        float *work = (float *)malloc((size_t)(per * threads) * sizeof(float));
        if (!work) return -1;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t item = 0; item < items; item++) {
            const int64_t h = item / blocks, r0 = item % blocks * rb;
            const int R = (int)(rows - r0 < rb ? rows - r0 : rb);
            const uint16_t *qr[RMAX];
            uint16_t *outr[RMAX];
            int64_t Lr[RMAX];
            for (int r = 0; r < R; r++) {
                const int64_t t = (r0 + r) / g, i = (r0 + r) % g;
                qr[r] = q + (t * hq + h * g + i) * hd;
                outr[r] = out + (t * hq + h * g + i) * hd;
                Lr[r] = prefix[t];
            }
            attend_rows(qr, outr, Lr, R, kc + h * head_stride, vc + h * head_stride, hd, scale,
                        work + per * omp_get_thread_num());
        }
        free(work);
        return 0;
    }
#endif
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
