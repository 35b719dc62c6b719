/* Scalar helpers the kernels share: bfloat16 <-> float32 (round to nearest even, NaN kept), and exp in a form the
 * compiler vectorizes (libm's expf is a call per element); with AVX-512, 16-lane forms of the widening and of exp; with
 * AVX2 and FMA, 8-lane forms of those and of the rounding to bfloat16. */
#ifndef SPECDESK_SCALARS_H
#define SPECDESK_SCALARS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t to_bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Values f[0 .. n-1] rounded to bfloat16 into p[cols[0]] .. p[cols[n-1]] (a product's outputs, through a column map). */
static inline void store_bf_cols(uint16_t *p, const int64_t *cols, const float *f, int n) {
    for (int i = 0; i < n; i++) p[cols[i]] = to_bf(f[i]);
}

/* exp(x), |x| clamped to 87: Cephes' expf, 2^n (1 + r + r^2 P(r)). */
static inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : (x > 87.0f ? 87.0f : x);
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* 16 bfloat16 values widened to float32 (exact). */
static inline __m512 load_bf16x16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* exp_fast on 16 floats: the same operations in the same order (so the same bits). */
static inline __m512 exp_fast16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* 8 bfloat16 values widened to float32 (exact). */
static inline __m256 load_bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* exp_fast on 8 floats: the same operations in the same order (so the same bits). The clamp takes x as max's and
 * min's second operand, which they return for a NaN, as the scalar form's comparisons do. */
static inline __m256 exp_fast8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(87.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* to_bf on 8 floats, each result in the high half of its 32-bit lane (bf(to_bf(f)) as a float: the low half 0). */
static inline __m256i to_bf8_high(__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(64 << 16));
    return _mm256_slli_epi32(_mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16), 16);
}

/* to_bf on 8 floats, packed into 8 uint16 at p. */
static inline void store_bf8(uint16_t *p, __m256 f) {
    const __m256i w = _mm256_srli_epi32(to_bf8_high(f), 16);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(w, w), 0x08); /* 64-bit halves 0 and 2 */
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
#endif

#endif
