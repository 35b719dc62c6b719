/* Row-wise operations of a decoder layer in one call each (the lean decoder's RMSNorm): torch's form takes eight
 * small operations, ~20 us on a 2-core CPU, 61 times in a SmolLM2 pass. Each row by the same instructions, alone or
 * among others (row-invariant, as a verify pass needs).
 *
 * rmsnorm: y = bf16(w * bf16(x * 1 / sqrt(mean(x^2) + eps))), x and w bfloat16, the mean in float32: what
 * LeanDecoder._norm computes, its sum in another order. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "scalars.h" /* and immintrin.h with AVX-512 */

#define LANES 16

#if defined(__AVX2__) && defined(__FMA__)
/* Sampling's weights of 8 bfloat16 logits at p: exp_fast((f - m) * inv_t), and no mass where f is -inf or under
 * floor_x (-inf: no floor), a NaN as the scalar loops' tests have it (f == -inf || f < floor_x is false for it). */
static inline __m256 weights8(const uint16_t *p, __m256 vm, __m256 vt, __m256 vfloor) {
    const __m256 f = load_bf16x8(p);
    const __m256 live = _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ),
                                      _mm256_cmp_ps(f, vfloor, _CMP_NLT_UQ));
    return _mm256_and_ps(live, exp_fast8(_mm256_mul_ps(_mm256_sub_ps(f, vm), vt)));
}
#endif

void sd_rmsnorm(const uint16_t *x, int64_t n, int64_t h, const uint16_t *w, float eps, uint16_t *out) {
    const int64_t full = h / LANES * LANES;
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *xr = x + r * h;
        float acc[LANES] = {0};
        for (int64_t d0 = 0; d0 < full; d0 += LANES)
            for (int l = 0; l < LANES; l++) acc[l] = fmaf(bf(xr[d0 + l]), bf(xr[d0 + l]), acc[l]);
        for (int64_t d = full; d < h; d++) acc[d - full] = fmaf(bf(xr[d]), bf(xr[d]), acc[d - full]);
        for (int s = LANES / 2; s > 0; s /= 2)
            for (int l = 0; l < s; l++) acc[l] += acc[l + s];
        const float inv = 1.0f / sqrtf(acc[0] / (float)h + eps);
        for (int64_t d = 0; d < h; d++) out[r * h + d] = to_bf(bf(w[d]) * bf(to_bf(bf(xr[d]) * inv)));
    }
}

/* Rotary embedding of q and k and the KV cache write of a pass, in one call. qkv: (n, (hq + 2 hk) * hd), each row
 * q heads, k heads, v heads; cos, sin_signed: (n, hd) (sin with its first half negated). q_out: (n, hq, hd), rotated;
 * rotated k and v go to cache slots p0 .. p0 + n - 1 (KV head h, slot j at cache + h * head_stride + j * hd).
 * Rotation as LeanDecoder._rotate computes it: bf16(bf16(t * cos) + bf16(roll(t, hd / 2) * sin_signed)). */
void sd_rope_kv(const uint16_t *qkv, int64_t n, int64_t hq, int64_t hk, int64_t hd, const uint16_t *cos,
                const uint16_t *sin_signed, uint16_t *q_out, uint16_t *kc, uint16_t *vc, int64_t head_stride,
                int64_t p0) {
    const int64_t half = hd / 2, width = (hq + 2 * hk) * hd;
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *row = qkv + t * width, *c = cos + t * hd, *s = sin_signed + t * hd;
        for (int64_t h = 0; h < hq + hk; h++) {
            const uint16_t *x = row + h * hd;
            uint16_t *dst = h < hq ? q_out + (t * hq + h) * hd : kc + (h - hq) * head_stride + (p0 + t) * hd;
            /* in two halves, each dimension's partner at a fixed offset, so that the loops vectorize */
            for (int64_t d = 0; d < half; d++)
                dst[d] = to_bf(bf(to_bf(bf(x[d]) * bf(c[d]))) + bf(to_bf(bf(x[d + half]) * bf(s[d]))));
            for (int64_t d = half; d < hd; d++)
                dst[d] = to_bf(bf(to_bf(bf(x[d]) * bf(c[d]))) + bf(to_bf(bf(x[d - half]) * bf(s[d]))));
        }
        for (int64_t h = 0; h < hk; h++)
            memcpy(vc + h * head_stride + (p0 + t) * hd, row + (hq + hk + h) * hd, (size_t)hd * 2);
    }
}

/* SwiGLU's product: out (n, inter) = bf16(bf16(silu(gate)) * up), gu (n, 2 inter) = [gate, up] per row. */
void sd_silu_mul(const uint16_t *gu, int64_t n, int64_t inter, uint16_t *out) {
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *g = gu + t * 2 * inter, *u = g + inter;
        uint16_t *o = out + t * inter;
        int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
        /* the scalar loop's operations 8 lanes at a time (its exp_fast is a dozen dependent steps per element: ~0.3 ms
         * of a SmolLM2 pass on a 2-core AMD Zen 3 when scalar) */
        const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
        for (; i + 8 <= inter; i += 8) {
            const __m256 x = load_bf16x8(g + i);
            const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, exp_fast8(_mm256_xor_ps(x, sign))));
            store_bf8(o + i, _mm256_mul_ps(_mm256_castsi256_ps(to_bf8_high(s)), load_bf16x8(u + i)));
        }
#endif
        for (; i < inter; i++) {
            const float x = bf(g[i]);
            o[i] = to_bf(bf(to_bf(x / (1.0f + exp_fast(-x)))) * bf(u[i]));
        }
    }
}

/* Greedy decoding's choice: per row of x (n, v) bfloat16, the index of the first largest value (torch.argmax's rule).
 * torch's argmax over bfloat16 takes ~180 us for SmolLM2's 49,152 logits. With AVX-512, one pass: each lane keeps its
 * largest value and where it first saw it (only a strictly larger value moves it); the first largest is then the
 * smallest such index among the lanes that hold the row's largest, and the tail after the last whole 16 moves it
 * only where strictly larger. Called from Python on a 2-core AMD EPYC: one row 14 us, a k=2 verify's 3 rows 24, where
 * the two passes below (the AVX2 path) took 35 and 104: their search for the first index is scalar. Else two
 * passes: the largest value, then the first index that holds it. NaNs are passed over (logits are never NaN). */
void sd_argmax_bf16(const uint16_t *x, int64_t n, int64_t v, int64_t *out) {
    const int64_t full = v / LANES * LANES;
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *row = x + r * v;
#if defined(__AVX512F__)
        __m512 top = _mm512_set1_ps(-INFINITY);
        __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), where = idx;
        const __m512i sixteen = _mm512_set1_epi32(16);
        for (int64_t j0 = 0; j0 < full; j0 += 16) {
            const __m512 f = load_bf16x16(row + j0);
            const __mmask16 up = _mm512_cmp_ps_mask(f, top, _CMP_GT_OQ);
            top = _mm512_mask_mov_ps(top, up, f);
            where = _mm512_mask_mov_epi32(where, up, idx);
            idx = _mm512_add_epi32(idx, sixteen);
        }
        float tops[16];
        int32_t wheres[16];
        _mm512_storeu_ps(tops, top);
        _mm512_storeu_si512((void *)wheres, where);
        float m = -INFINITY;
        int64_t at = 0;
        for (int l = 0; l < 16 && l < full; l++)
            if (l == 0 || tops[l] > m || (tops[l] == m && wheres[l] < at)) m = tops[l], at = wheres[l];
        for (int64_t j = full; j < v; j++)
            if (bf(row[j]) > m || (full == 0 && j == 0)) m = bf(row[j]), at = j;
        out[r] = at;
#else
        float top[LANES];
        for (int l = 0; l < LANES; l++) top[l] = -INFINITY;
        for (int64_t j0 = 0; j0 < full; j0 += LANES)
            for (int l = 0; l < LANES; l++) {
                const float f = bf(row[j0 + l]);
                top[l] = f > top[l] ? f : top[l];
            }
        float m = -INFINITY;
        for (int64_t j = full; j < v; j++) m = bf(row[j]) > m ? bf(row[j]) : m;
        for (int l = 0; l < LANES; l++) m = top[l] > m ? top[l] : m;
        int64_t at = 0;
        while (at < v && !(bf(row[at]) == m)) at++;
        out[r] = at < v ? at : 0; /* every value NaN: torch would name a NaN; 0 here */
#endif
    }
}

/* Sampling's distributions: per row of x (n, v) bfloat16, softmax(x / t) in float32 into out (n, v), with inv_t =
 * 1 / t: exp((x - max) * inv_t) by exp_fast, over their sum. What torch's x.float() / t then softmax computes, to a
 * few float32 ulps (the temperature is applied after the max is taken off, one rounding instead of two); ~15 us a
 * SmolLM2 row of 49,152 logits where those three operations took ~90 (they are also what plain sampling pays per
 * token). */

void sd_softmax_bf16(const uint16_t *x, int64_t n, int64_t v, float inv_t, float *out) {
    const int64_t full = v / LANES * LANES;
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *row = x + r * v;
        float *o = out + r * v;
        float top[LANES], sums[LANES];
#if defined(__AVX512F__)
        __m512 vtop = _mm512_set1_ps(-INFINITY);
        for (int64_t j0 = 0; j0 < full; j0 += 16) vtop = _mm512_max_ps(vtop, load_bf16x16(row + j0));
        _mm512_storeu_ps(top, vtop);
#elif defined(__AVX2__) && defined(__FMA__)
        /* the scalar loop's 16 lanes as two vectors, each lane by the same operations (the same bits) */
        __m256 tlo = _mm256_set1_ps(-INFINITY), thi = tlo;
        for (int64_t j0 = 0; j0 < full; j0 += LANES) {
            tlo = _mm256_max_ps(load_bf16x8(row + j0), tlo); /* f > top ? f : top, NaN f included */
            thi = _mm256_max_ps(load_bf16x8(row + j0 + 8), thi);
        }
        _mm256_storeu_ps(top, tlo);
        _mm256_storeu_ps(top + 8, thi);
#else
        for (int l = 0; l < LANES; l++) top[l] = -INFINITY;
        for (int64_t j0 = 0; j0 < full; j0 += LANES)
            for (int l = 0; l < LANES; l++) {
                const float f = bf(row[j0 + l]);
                top[l] = f > top[l] ? f : top[l];
            }
#endif
        float m = -INFINITY;
        for (int l = 0; l < LANES && l < full; l++) m = top[l] > m ? top[l] : m;
        for (int64_t j = full; j < v; j++) m = bf(row[j]) > m ? bf(row[j]) : m;
#if defined(__AVX512F__)
        __m512 vsum = _mm512_setzero_ps();
        const __m512 vm = _mm512_set1_ps(m), vt = _mm512_set1_ps(inv_t), ninf = _mm512_set1_ps(-INFINITY);
        for (int64_t j0 = 0; j0 < full; j0 += 16) {
            const __m512 f = load_bf16x16(row + j0);
            const __mmask16 live = _mm512_cmp_ps_mask(f, ninf, _CMP_NEQ_UQ); /* a masked logit: no mass */
            const __m512 e = _mm512_maskz_mov_ps(live, exp_fast16(_mm512_mul_ps(_mm512_sub_ps(f, vm), vt)));
            _mm512_storeu_ps(o + j0, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        _mm512_storeu_ps(sums, vsum);
#elif defined(__AVX2__) && defined(__FMA__)
        __m256 slo = _mm256_setzero_ps(), shi = slo;
        const __m256 vm = _mm256_set1_ps(m), vt = _mm256_set1_ps(inv_t), none = _mm256_set1_ps(-INFINITY);
        for (int64_t j0 = 0; j0 < full; j0 += LANES) {
            const __m256 lo = weights8(row + j0, vm, vt, none), hi = weights8(row + j0 + 8, vm, vt, none);
            _mm256_storeu_ps(o + j0, lo);
            _mm256_storeu_ps(o + j0 + 8, hi);
            slo = _mm256_add_ps(slo, lo);
            shi = _mm256_add_ps(shi, hi);
        }
        _mm256_storeu_ps(sums, slo);
        _mm256_storeu_ps(sums + 8, shi);
#else
        for (int l = 0; l < LANES; l++) sums[l] = 0.0f;
        for (int64_t j0 = 0; j0 < full; j0 += LANES)
            for (int l = 0; l < LANES; l++) {
                const float f = bf(row[j0 + l]);
                const float e = f == -INFINITY ? 0.0f : exp_fast((f - m) * inv_t); /* a masked logit: no mass */
                o[j0 + l] = e;
                sums[l] += e;
            }
#endif
        float s = 0.0f;
        for (int l = 0; l < LANES; l++) s += sums[l];
        for (int64_t j = full; j < v; j++) {
            o[j] = bf(row[j]) == -INFINITY ? 0.0f : exp_fast((bf(row[j]) - m) * inv_t);
            s += o[j];
        }
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < v; j++) o[j] *= inv;
    }
}

/* bfloat16 bits -> a key whose unsigned order is the values' order (negative values' bits reversed). */
static inline uint32_t bf_key(uint16_t h) { return (h & 0x8000u) ? (uint32_t)(~h & 0xffffu) : (uint32_t)(h | 0x8000u); }

/* The k-th largest value of a bfloat16 row (1 <= k <= v) by two counting passes over its 16-bit keys (high byte,
 * then low byte within the high byte's bucket): ~2 passes over the row where a sort took ~2 ms. */
static float kth_largest_bf16(const uint16_t *row, int64_t v, int64_t k) {
    int64_t count[256] = {0};
    for (int64_t j = 0; j < v; j++) count[bf_key(row[j]) >> 8]++;
    int hi = 255;
    int64_t above = 0; /* values in buckets above hi */
    while (hi > 0 && above + count[hi] < k) above += count[hi--];
    int64_t low[256] = {0};
    for (int64_t j = 0; j < v; j++) {
        const uint32_t key = bf_key(row[j]);
        if ((int)(key >> 8) == hi) low[key & 255]++;
    }
    int lo = 255;
    while (lo > 0 && above + low[lo] < k) above += low[lo--];
    const uint32_t key = ((uint32_t)hi << 8) | (uint32_t)lo;
    const uint16_t h = (key & 0x8000u) ? (uint16_t)(key & 0x7fffu) : (uint16_t)(~key & 0xffffu);
    return bf(h);
}

/* A probability's binary exponent (its float32 exponent field), 0 for no mass: top-p's buckets. */
static inline int exponent_bucket(float q) {
    uint32_t bits;
    memcpy(&bits, &q, 4);
    return q > 0.0f ? (int)((bits >> 23) & 255u) : 0;
}

/* The sum of v float32 values in a fixed order: LANES lane sums over the whole blocks, then the tail (sd_residual_f32
 * and sd_process_bf16 normalize by it). */
static float lane_sum(const float *o, int64_t v) {
    float sums[LANES] = {0};
    const int64_t full = v / LANES * LANES;
    for (int64_t j0 = 0; j0 < full; j0 += LANES)
        for (int l = 0; l < LANES; l++) sums[l] += o[j0 + l];
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += sums[l];
    for (int64_t j = full; j < v; j++) s += o[j];
    return s;
}

/* Probabilities of index and value, ascending by value then index (the order top-p removes them in). */
typedef struct {
    float p;
    int64_t j;
} ranked;

/* Ascending by value; tied values by descending index (the order torch's sort gave them on SmolLM2-sized rows, so
 * that top-p keeps the same one of tied tokens where it can). */
static int by_value(const void *a, const void *b) {
    const ranked *x = (const ranked *)a, *y = (const ranked *)b;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return x->j > y->j ? -1 : (x->j < y->j);
}

/* Sampling's distributions with top-k and top-p, per row of x (n, v) bfloat16, into out (n, v) float32: what
 * sampling.process_logits computes (Hugging Face's warpers in their order: temperature, top-k, top-p, then softmax over
 * what is left), in ~3 passes over the row where torch's sort, cumsum and scatter took ~1.7 ms a SmolLM2 row (half of
 * plain sampling's time per token at top_p 0.9). top-k (0 < top_k < v): logits under the k-th largest have no mass
 * (ties with it are kept). top-p (< 1): the tokens whose ascending cumulative probability stays <= 1 - top_p have none
 * (the most likely is always kept); the probabilities are summed in double, as torch's CPU cumsum does, whole
 * exponent ranges at a time below the boundary, and only the boundary range's tokens are sorted (by_value: where
 * values tie at the boundary, torch's sort may keep another of them). The kept tokens' weights are
 * exp((x - max) / t) by exp_fast, as sd_softmax_bf16's, over their sum. Returns 0, or -1 if out of memory. */
int sd_process_bf16(const uint16_t *x, int64_t n, int64_t v, float inv_t, int64_t top_k, double top_p, float *out) {
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *row = x + r * v;
        float *o = out + r * v;
        const float floor_x = (top_k > 0 && top_k < v) ? kth_largest_bf16(row, v, top_k) : -INFINITY;
        float m = -INFINITY, total = 0.0f;
        int64_t j = 0;
#if defined(__AVX512F__)
        const int64_t full = v / 16 * 16;
        __m512 vtop = _mm512_set1_ps(-INFINITY);
        for (; j < full; j += 16) vtop = _mm512_max_ps(vtop, load_bf16x16(row + j));
        m = _mm512_reduce_max_ps(vtop);
#elif defined(__AVX2__) && defined(__FMA__)
        const int64_t full_max = v / 8 * 8;
        __m256 vtop = _mm256_set1_ps(-INFINITY);
        for (; j < full_max; j += 8) vtop = _mm256_max_ps(load_bf16x8(row + j), vtop);
        float tops[8];
        _mm256_storeu_ps(tops, vtop);
        for (int l = 0; l < 8; l++) m = tops[l] > m ? tops[l] : m;
#endif
        for (; j < v; j++) m = bf(row[j]) > m ? bf(row[j]) : m;
        j = 0;
#if defined(__AVX512F__)
        __m512 vsum = _mm512_setzero_ps();
        const __m512 vm = _mm512_set1_ps(m), vt = _mm512_set1_ps(inv_t), vfloor = _mm512_set1_ps(floor_x),
                     ninf = _mm512_set1_ps(-INFINITY);
        for (; j < full; j += 16) {
            const __m512 f = load_bf16x16(row + j);
            const __mmask16 live = _mm512_cmp_ps_mask(f, ninf, _CMP_NEQ_UQ) & _mm512_cmp_ps_mask(f, vfloor, _CMP_GE_OQ);
            const __m512 e = _mm512_maskz_mov_ps(live, exp_fast16(_mm512_mul_ps(_mm512_sub_ps(f, vm), vt)));
            _mm512_storeu_ps(o + j, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        total = _mm512_reduce_add_ps(vsum);
#elif defined(__AVX2__) && defined(__FMA__)
        /* exp 8 lanes at a time; the total summed in order, as the scalar loop below does (the same bits) */
        const int64_t full8 = v / 8 * 8;
        const __m256 vm = _mm256_set1_ps(m), vt = _mm256_set1_ps(inv_t), vfloor = _mm256_set1_ps(floor_x);
        for (; j < full8; j += 8) {
            _mm256_storeu_ps(o + j, weights8(row + j, vm, vt, vfloor));
            for (int l = 0; l < 8; l++) total += o[j + l];
        }
#endif
        for (; j < v; j++) {
            const float f = bf(row[j]);
            o[j] = (f == -INFINITY || f < floor_x) ? 0.0f : exp_fast((f - m) * inv_t);
            total += o[j];
        }
        if (top_p < 1.0) {
            /* mass and count per binary exponent of the probability e / total (bucket 0: no mass) */
            double mass[256] = {0};
            int64_t count[256] = {0};
            const float inv = 1.0f / total;
            for (int64_t j = 0; j < v; j++) {
                if (o[j] == 0.0f) {
                    count[0]++;
                    continue;
                }
                const float q = o[j] * inv;
                const int e = exponent_bucket(q);
                mass[e] += q;
                count[e]++;
            }
            int last = 0; /* the highest bucket with mass: its largest token is always kept */
            for (int e = 255; e > 0; e--)
                if (count[e]) {
                    last = e;
                    break;
                }
            const double drop = 1.0 - top_p;
            double acc = 0.0;
            int b = 0;
            while (b < last && acc + mass[b] <= drop) acc += mass[b++];
            int64_t c = 0;
            ranked *edge = (ranked *)malloc((size_t)(count[b] > 0 ? count[b] : 1) * sizeof(ranked));
            if (!edge) return -1;
            for (int64_t j = 0; j < v; j++) {
                if (o[j] == 0.0f) continue;
                const float q = o[j] * inv;
                const int e = exponent_bucket(q);
                if (e < b) o[j] = 0.0f;
                else if (e == b) edge[c++] = (ranked){q, j};
            }
            qsort(edge, (size_t)c, sizeof(ranked), by_value);
            for (int64_t i = 0; i < c; i++) {
                if (acc + edge[i].p > drop || (b == last && i == c - 1)) break;
                acc += edge[i].p;
                o[edge[i].j] = 0.0f;
            }
            free(edge);
        }
        const float inv = 1.0f / lane_sum(o, v);
        for (j = 0; j < v; j++) o[j] *= inv;
    }
    return 0;
}

/* One draw from p (v float32 masses, >= 0, not all 0; not necessarily summing to 1) by the inverse of the cumulative
 * mass: the first index whose cumulative mass exceeds u * total (held under the total), u in [0, 1). The masses are
 * summed by blocks of LANES (vectorized) and the walk goes block by block, then within the block: ~10 us over
 * SmolLM2's 49,152 tokens where torch's cumsum and searchsorted took ~65. A token with no mass is never drawn (the
 * cumulative mass does not grow there); where rounding of the block sums leaves the walk short, the block's last
 * token with mass is drawn. */
int64_t sd_sample_f32(const float *p, int64_t v, double u) {
    const int64_t nb = (v + LANES - 1) / LANES;
    float stack_sums[4096];
    float *bs = nb <= 4096 ? stack_sums : (float *)malloc((size_t)nb * sizeof(float));
    if (bs == NULL) return -1;
    float total = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t j0 = b * LANES, j1 = j0 + LANES < v ? j0 + LANES : v;
        float s = 0.0f;
        for (int64_t j = j0; j < j1; j++) s += p[j];
        bs[b] = s;
        total += s;
    }
    float target = (float)(u * (double)total);
    if (!(target < total)) target = nextafterf(total, 0.0f);
    int64_t at = -1;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb && at < 0; b++) {
        if (acc + bs[b] <= target) {
            acc += bs[b];
            continue;
        }
        const int64_t j0 = b * LANES, j1 = j0 + LANES < v ? j0 + LANES : v;
        for (int64_t j = j0; j < j1; j++) {
            acc += p[j];
            if (p[j] > 0.0f) at = j;
            if (acc > target && p[j] > 0.0f) break;
        }
    }
    if (at < 0) /* rounding left the walk short of the target at the very end: the last token with mass */
        for (int64_t j = v - 1; j >= 0 && at < 0; j--)
            if (p[j] > 0.0f) at = j;
    if (bs != stack_sums) free(bs);
    return at;
}

/* Speculative sampling's residual after a rejection: out = normalize(max(0, pt - pd)) over v tokens, where the draft's
 * probabilities pd (h of them) belong to the tokens ids (every other token has none under the draft; a point mass is
 * h = 1 and pd 1), or, with ids NULL, pd is a whole row of v; or pt itself where nothing is left (the two
 * distributions equal to rounding). The same float subtraction per token as the wide form; its sum in another order.
 * One pass over the vocabulary and one over the draft's tokens, ~10 us for SmolLM2's 49,152 and its draft's 8,192,
 * where torch's six operations took ~60-120 (~350 us right after a pass, for a point mass). */
void sd_residual_f32(const float *pt, int64_t v, const float *pd, const int64_t *ids, int64_t h, float *out) {
    if (ids == NULL) {
        for (int64_t j = 0; j < v; j++) {
            const float d = pt[j] - pd[j];
            out[j] = d > 0.0f ? d : 0.0f;
        }
    } else {
        memcpy(out, pt, (size_t)v * sizeof(float));
        for (int64_t i = 0; i < h; i++) {
            const float d = pt[ids[i]] - pd[i];
            out[ids[i]] = d > 0.0f ? d : 0.0f;
        }
    }
    const float s = lane_sum(out, v);
    if (!(s > 0.0f)) {
        memcpy(out, pt, (size_t)v * sizeof(float));
        return;
    }
    const float inv = 1.0f / s;
    for (int64_t j = 0; j < v; j++) out[j] *= inv;
}

/* One row's sampling distribution: sd_softmax_bf16's at a temperature alone, else sd_process_bf16's (top-k, top-p).
 * Returns 0, or -1 if out of memory. */
static int row_probs(const uint16_t *x, int64_t v, float inv_t, int64_t top_k, double top_p, float *out) {
    if ((top_k <= 0 || top_k >= v) && top_p >= 1.0) {
        sd_softmax_bf16(x, 1, v, inv_t, out);
        return 0;
    }
    return sd_process_bf16(x, 1, v, inv_t, top_k, top_p, out);
}

/* A sampled draft token: one bfloat16 row's distribution (temperature 1 / inv_t, top-k, top-p: row_probs) into out,
 * then one draw from it at u (sd_sample_f32's): what sampling.process_logits and draw_one give, in one call. Returns
 * the index, or -1 if out of memory. */
int64_t sd_softmax_draw(const uint16_t *x, int64_t v, float inv_t, int64_t top_k, double top_p, double u, float *out) {
    if (row_probs(x, v, inv_t, top_k, top_p, out) != 0) return -1;
    return sd_sample_f32(out, v, u);
}

/* Speculative sampling's verification from the target's logits (k + 1, v) bfloat16 at temperature 1 / inv_t with
 * top-k and top-p (row_probs), as acceptance.verify_sampled decides it on sampling.process_logits' rows: for each
 * drafted token in turn, accept while u[i] < min(1, pt / max(pd, FLT_MIN)) in float32 (pt from row i's distribution,
 * pd the draft's probability:
 * pd_rows (k, h) at column cols[i], or 1 where pd_rows is NULL, a point mass); then one draw at u_next, from the
 * last row's distribution when every token was kept, else from the residual normalize(max(0, pt - pd)) of the
 * first rejected row (sd_residual_f32: the draft's probabilities belong to the tokens ids, h of them; with ids NULL
 * its rows are whole rows, h = v; with pd_rows NULL the row's drafted token is a point mass). Rows after the first
 * rejection are never computed (a third of a k=2 step's softmax work at half acceptance). probs (v floats): left
 * holding the softmax of the row the draw comes from, or of the rejected row. Returns the number kept, with *next the
 * drawn token; -2 if out of memory. */
int64_t sd_verify_sampled(const uint16_t *logits, int64_t k, int64_t v, float inv_t, int64_t top_k, double top_p,
                          const int64_t *tokens, const float *pd_rows, int64_t h, const int64_t *cols,
                          const int64_t *ids, const float *u, double u_next, float *probs, float *residual,
                          int64_t *next) {
    int64_t n = 0;
    for (; n < k; n++) {
        if (row_probs(logits + n * v, v, inv_t, top_k, top_p, probs) != 0) return -2;
        const float pt = probs[tokens[n]];
        const float pd = pd_rows ? pd_rows[n * h + cols[n]] : 1.0f;
        const float q = pt / (pd > FLT_MIN ? pd : FLT_MIN);
        if (!(u[n] < (q < 1.0f ? q : 1.0f))) break;
    }
    const float *from = probs;
    if (n == k) {
        if (row_probs(logits + k * v, v, inv_t, top_k, top_p, probs) != 0) return -2;
    } else {
        const float one = 1.0f;
        if (pd_rows)
            sd_residual_f32(probs, v, pd_rows + n * h, ids, h, residual);
        else
            sd_residual_f32(probs, v, &one, tokens + n, 1, residual);
        from = residual;
    }
    *next = sd_sample_f32(from, v, u_next);
    return *next < 0 ? -2 : n;
}
