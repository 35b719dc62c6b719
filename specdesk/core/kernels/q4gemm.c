/* Few-row products with 4-bit (Q4_1-style) and 8-bit (Q8_0-style) weights on x86 CPUs, as llama.cpp computes them:
 * each row of activations is quantized to 8 bits per group of 32 (a step dx and the group's sum), integer dot
 * products over each group (AVX512-VNNI's vpdpbusd, or AVX2's vpmaddubsw), then one float multiply-add per group.
 *
 * Why: torch's int4 kernel turns every weight into a float for every row it multiplies, so on a small model every
 * row of a verify pass costs ~30% of a one-row pass; here a weight is widened once per call and a row costs one
 * instruction per 64 products. Every row is computed by the same instructions in the same order whatever the number
 * of rows or threads (each output column by one thread, groups in order): a verify pass over k + 1 rows gives bit for
 * bit the outputs of k + 1 one-row calls, which keeps speculative decoding exact.
 *
 * Layouts (N a multiple of 16, K of 32; G = K / 32, nb = N / 16 column blocks):
 *   q4 codes  w4[nb][G][4][64] bytes: in chunk t, byte 4c + i holds column c's code for input 32g + 4t + i in its
 *             low nibble and for input 32g + 4(t + 4) + i in its high one (codes 0..15; weight = step * (q - 8) + zero)
 *   q4 scales s4[nb][G][2][16] bfloat16: 16 steps, then 16 zeros
 *   q8 codes  w8[nb][G][8][64] int8: in chunk j, byte 4c + i is column c's code for input 32g + 4j + i (weight = d * q)
 *   q8 scales s8[nb][G][16] bfloat16
 * x: (M, K) bfloat16 rows; y: (M, N) bfloat16 rows (rounded to nearest even).
 */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>

#include "scalars.h"

#define MR 8 /* rows per register block */
/* Software prefetch of the weights this many groups ahead (8 KB of q4 codes): a one-row pass streams ~96 MB for
 * SmolLM2 and stalled on those loads; measured on the 2-core Xeon, 8 and 32 groups beat none by ~10-20%. */
#define PREFETCH 32

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define QUANTIZE_AVX512 1
/* quantize_rows below, 32 inputs at a time: the same float operations per element (max is exact, one multiply,
 * rounding to nearest even), so the same codes bit for bit. */
static void quantize_rows_avx512(const uint16_t *x, int64_t M, int64_t K, int8_t *qx, float *dx, int32_t *isum) {
    const int64_t G = K / 32;
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t m = 0; m < M; m++) {
        for (int64_t g = 0; g < G; g++) {
            const uint16_t *p = x + m * K + g * 32;
            __m512 v0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
            __m512 v1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 16))), 16));
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(v0, absmask), _mm512_and_ps(v1, absmask)));
            float d = amax / 127.0f, id = d > 0.0f ? 127.0f / amax : 0.0f;
            __m512 vid = _mm512_set1_ps(id);
            __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
            q0 = _mm512_min_epi32(_mm512_max_epi32(q0, lo), hi);
            q1 = _mm512_min_epi32(_mm512_max_epi32(q1, lo), hi);
            _mm_storeu_si128((__m128i *)(qx + m * K + g * 32), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(qx + m * K + g * 32 + 16), _mm512_cvtepi32_epi8(q1));
            dx[m * G + g] = d;
            isum[m * G + g] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        }
    }
}
#endif

/* Row m's 8-bit codes (K bytes), and per group its step dx and the group's code sum. */
static void quantize_rows(const uint16_t *x, int64_t M, int64_t K, int8_t *qx, float *dx, int32_t *isum) {
#ifdef QUANTIZE_AVX512
    quantize_rows_avx512(x, M, K, qx, dx, isum);
    return;
#endif
    const int64_t G = K / 32;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t g = 0; g < G; g++) {
            float v[32], amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                v[i] = bf(x[m * K + g * 32 + i]);
                float a = fabsf(v[i]);
                amax = a > amax ? a : amax;
            }
            float d = amax / 127.0f, id = d > 0.0f ? 127.0f / amax : 0.0f;
            int32_t s = 0;
            for (int i = 0; i < 32; i++) {
                int q = (int)nearbyintf(v[i] * id);
                q = q > 127 ? 127 : (q < -127 ? -127 : q);
                qx[m * K + g * 32 + i] = (int8_t)q;
                s += q;
            }
            dx[m * G + g] = d;
            isum[m * G + g] = s;
        }
    }
}

/* `call` with R the row count as a constant (1 .. MR): the rows' sums stay in registers and the loops over rows
 * unroll, the same operations in the same order (measured on the 2-core Xeon: SmolLM2's layers 4-9% faster at 1-4
 * rows). */
#define BY_ROWS(rows, call)                                   \
    switch (rows) {                                           \
    case 1: { enum { R = 1 }; call; break; }                  \
    case 2: { enum { R = 2 }; call; break; }                  \
    case 3: { enum { R = 3 }; call; break; }                  \
    case 4: { enum { R = 4 }; call; break; }                  \
    case 5: { enum { R = 5 }; call; break; }                  \
    case 6: { enum { R = 6 }; call; break; }                  \
    case 7: { enum { R = 7 }; call; break; }                  \
    default: { enum { R = MR }; call; break; }                \
    }

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SD_ISA "avx512vnni"

/* A row's 16 outputs of a block, to columns cols[0..15] of row p. */
static void store_bf16x16(uint16_t *p, const int64_t *cols, __m512 v) {
    float f[16];
    _mm512_storeu_ps(f, v);
    store_bf_cols(p, cols, f, 16);
}

/* The 8 dot products of a group (32 inputs x 16 outputs) in four independent sums: one chain of 8 vpdpbusd waits
 * ~40 cycles; integer sums are exact, so the split changes no bit. */
static inline __m512i dot8(const __m512i *wv, const int32_t *xq) {
    __m512i a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], _mm512_set1_epi32(xq[0]));
    __m512i a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[1], _mm512_set1_epi32(xq[1]));
    __m512i a2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[2], _mm512_set1_epi32(xq[2]));
    __m512i a3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[3], _mm512_set1_epi32(xq[3]));
    a0 = _mm512_dpbusd_epi32(a0, wv[4], _mm512_set1_epi32(xq[4]));
    a1 = _mm512_dpbusd_epi32(a1, wv[5], _mm512_set1_epi32(xq[5]));
    a2 = _mm512_dpbusd_epi32(a2, wv[6], _mm512_set1_epi32(xq[6]));
    a3 = _mm512_dpbusd_epi32(a3, wv[7], _mm512_set1_epi32(xq[7]));
    return _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
}

/* The same sums in two chains: where several rows share the weights their chains overlap, and the adds are fewer. */
static inline __m512i dot8_2(const __m512i *wv, const int32_t *xq) {
    __m512i a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], _mm512_set1_epi32(xq[0]));
    __m512i a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[4], _mm512_set1_epi32(xq[4]));
    for (int j = 1; j < 4; j++) {
        a0 = _mm512_dpbusd_epi32(a0, wv[j], _mm512_set1_epi32(xq[j]));
        a1 = _mm512_dpbusd_epi32(a1, wv[j + 4], _mm512_set1_epi32(xq[j + 4]));
    }
    return _mm512_add_epi32(a0, a1);
}

static inline __attribute__((always_inline)) void q4_block_n(const int8_t *qx, const float *dx, const float *dsum,
                                                             int64_t rows, int64_t K, const uint8_t *w, const uint16_t *s,
                                                             uint16_t *y, int64_t ldy, const int64_t *cols) {
    const int64_t G = K / 32;
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512 acc[MR];
    for (int r = 0; r < rows; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const uint8_t *wp = w + g * 256;
        for (int c = 0; c < 4; c++) _mm_prefetch((const char *)(wp + PREFETCH * 256 + 64 * c), _MM_HINT_T0);
        _mm_prefetch((const char *)(s + (g + PREFETCH) * 32), _MM_HINT_T0);
        __m512i wv[8];
        for (int t = 0; t < 4; t++) {
            __m512i v = _mm512_loadu_si512((const void *)(wp + 64 * t));
            wv[t] = _mm512_and_si512(v, low);
            wv[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        }
        __m512 step = load_bf16x16(s + g * 32), zero = load_bf16x16(s + g * 32 + 16);
        __m512 c = _mm512_fmadd_ps(step, _mm512_set1_ps(-8.0f), zero); /* the weight at code 0 */
        for (int r = 0; r < rows; r++) {
            const int32_t *xq = (const int32_t *)(qx + r * K + g * 32);
            __m512i a = rows == 1 ? dot8(wv, xq) : dot8_2(wv, xq);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(step, _mm512_set1_ps(dx[r * G + g])), acc[r]);
            acc[r] = _mm512_fmadd_ps(c, _mm512_set1_ps(dsum[r * G + g]), acc[r]);
        }
    }
    for (int r = 0; r < rows; r++) store_bf16x16(y + r * ldy, cols, acc[r]);
}

static void q4_block(const int8_t *qx, const float *dx, const float *dsum, int64_t rows, int64_t K, const uint8_t *w,
                     const uint16_t *s, uint16_t *y, int64_t ldy, const int64_t *cols) {
    BY_ROWS(rows, q4_block_n(qx, dx, dsum, R, K, w, s, y, ldy, cols));
}

static inline __attribute__((always_inline)) void q8_block_n(const int8_t *qx, const float *dx, const int32_t *isum,
                                                             int64_t rows, int64_t K, const int8_t *w, const uint16_t *s,
                                                             uint16_t *y, int64_t ldy, const int64_t *cols) {
    const int64_t G = K / 32;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[MR];
    for (int r = 0; r < rows; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const int8_t *wp = w + g * 512;
        for (int c = 0; c < 8; c++) _mm_prefetch((const char *)(wp + PREFETCH * 512 + 64 * c), _MM_HINT_T0);
        if (g % 2 == 0) _mm_prefetch((const char *)(s + (g + PREFETCH) * 16), _MM_HINT_T0);
        __m512i wv[8];
        for (int j = 0; j < 8; j++) wv[j] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(wp + 64 * j)), flip);
        __m512 dw = load_bf16x16(s + g * 16);
        for (int r = 0; r < rows; r++) {
            const int32_t *xq = (const int32_t *)(qx + r * K + g * 32);
            __m512i a = rows == 1 ? dot8(wv, xq) : dot8_2(wv, xq);
            a = _mm512_sub_epi32(a, _mm512_set1_epi32(128 * isum[r * G + g])); /* (w + 128) x -> w x */
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(dw, _mm512_set1_ps(dx[r * G + g])), acc[r]);
        }
    }
    for (int r = 0; r < rows; r++) store_bf16x16(y + r * ldy, cols, acc[r]);
}

static void q8_block(const int8_t *qx, const float *dx, const int32_t *isum, int64_t rows, int64_t K, const int8_t *w,
                     const uint16_t *s, uint16_t *y, int64_t ldy, const int64_t *cols) {
    BY_ROWS(rows, q8_block_n(qx, dx, isum, R, K, w, s, y, ldy, cols));
}

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
/* Products over 16 rows and more (a prompt's prefill) on AMX's tile unit (Intel Sapphire Rapids and later): each
 * group's 16 x 16 integer sums in one tile instruction (TDPBSUD: 8-bit activations x the codes as unsigned bytes) in
 * place of 16 x 8 vpdpbusd. Integer sums are exact, so they are the vector kernel's to the bit, and what follows is
 * its float operations in its order: the same outputs. The q4 layout is already the tile's: chunk t's low nibbles
 * are inputs 4t .. 4t+3 of the 16 columns (tile row t), its high ones inputs 4(t+4) .. (row t+4). */
#include <sys/syscall.h>
#include <unistd.h>
#define SD_AMX 1
#define AMX_ROWS 16

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static int amx_state; /* 0 not asked yet, 1 granted, -1 refused */

/* Linux lends the tile registers to a process that asks (ARCH_REQ_XCOMP_PERM for XTILEDATA). SPECDESK_NO_AMX set:
 * the vector kernel only (the same outputs; for comparing the two, or a system where tiles misbehave). */
static int amx_ready(void) {
    if (amx_state == 0) {
        const char *off = getenv("SPECDESK_NO_AMX");
        amx_state = (off && *off) ? -1 : (syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1);
    }
    return amx_state > 0;
}

/* A thread's tiles: 0 the sums (16 rows x 16 int32), 1 the activations (16 rows x 32 bytes), 2 the codes (8 x 64). */
static void amx_config(void) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = AMX_ROWS, cfg.colsb[0] = 64;
    cfg.rows[1] = AMX_ROWS, cfg.colsb[1] = 32;
    cfg.rows[2] = 8, cfg.colsb[2] = 64;
    _tile_loadconfig(&cfg);
}

/* A column block's codes, every group, as bytes in tile layout: wb[g][8][64]. */
static void q4_unpack(const uint8_t *w, int64_t G, uint8_t *wb) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int64_t g = 0; g < G; g++)
        for (int t = 0; t < 4; t++) {
            const __m512i v = _mm512_loadu_si512((const void *)(w + g * 256 + 64 * t));
            _mm512_store_si512((void *)(wb + g * 512 + 64 * t), _mm512_and_si512(v, low));
            _mm512_store_si512((void *)(wb + g * 512 + 64 * (t + 4)), _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
        }
}

/* q4_block's sums for 16 rows, its float steps after them in the same order. sums: 16 x 16 int32 of scratch. */
static void q4_block_amx(const int8_t *qx, const float *dx, const float *dsum, int64_t K, const uint8_t *wb,
                         const uint16_t *s, uint16_t *y, int64_t ldy, const int64_t *cols, int32_t *sums) {
    const int64_t G = K / 32;
    __m512 acc[AMX_ROWS];
    for (int r = 0; r < AMX_ROWS; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        _tile_zero(0);
        _tile_loadd(1, qx + g * 32, K);
        _tile_loadd(2, wb + g * 512, 64);
        _tile_dpbsud(0, 1, 2);
        _tile_stored(0, sums, 64);
        __m512 step = load_bf16x16(s + g * 32), zero = load_bf16x16(s + g * 32 + 16);
        __m512 c = _mm512_fmadd_ps(step, _mm512_set1_ps(-8.0f), zero);
        for (int r = 0; r < AMX_ROWS; r++) {
            const __m512i a = _mm512_load_si512((const void *)(sums + 16 * r));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(step, _mm512_set1_ps(dx[r * G + g])), acc[r]);
            acc[r] = _mm512_fmadd_ps(c, _mm512_set1_ps(dsum[r * G + g]), acc[r]);
        }
    }
    for (int r = 0; r < AMX_ROWS; r++) store_bf16x16(y + r * ldy, cols, acc[r]);
}
#endif

#elif defined(__AVX2__) && defined(__FMA__)
#define SD_ISA "avx2"

static void store_bf16x8(uint16_t *p, const int64_t *cols, __m256 v) {
    float f[8];
    _mm256_storeu_ps(f, v);
    store_bf_cols(p, cols, f, 8);
}

/* A group's codes for 8 columns (bytes 0 .. 31 of each of its four 64-byte chunks from p): wv[t] its chunk t's low
 * nibbles, wv[t + 4] its high ones. */
static inline __attribute__((always_inline)) void unpack_half(const uint8_t *p, __m256i *wv) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int t = 0; t < 4; t++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 64 * t));
        wv[t] = _mm256_and_si256(v, low);
        wv[t + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
}

/* AVX2 has no 8-bit dot product, so a group's products are vpmaddubsw's (pairs of code x input, |pair| <= 2 * 15 *
 * 127 = 3810): its eight are summed in 16 bits (at most 8 * 3810 = 30480, so exactly) and widened once (vpmaddwd),
 * not each on its own: the same integer sums, so the same bits, in fewer instructions. On a CPU with only AVX2 (AMD
 * Zen 2 and 3, Intel Core chips without AVX-512) the products are bound by those instructions, not by memory: on a
 * 2-core AMD EPYC (Zen 3), SmolLM2's 30 layers' products, the builds alternated (ms, weights from memory): 1 row
 * 2.78 -> 2.39, 2 rows 3.60 -> 2.89, 3 rows 4.39 -> 3.94, 4 rows 5.36 -> 4.71.
 *
 * One half of a 16-column block (lanes 8h .. 8h + 7: bytes 32h .. 32h + 31 of each 64-byte chunk) at a time: for
 * three rows and more, where both halves' codes and sums would not fit the 16 registers. */
static inline __attribute__((always_inline)) void q4_block_halves(const int8_t *qx, const float *dx, const float *dsum,
                                                             int64_t rows, int64_t K, const uint8_t *w,
                                                             const uint16_t *s, uint16_t *y, int64_t ldy,
                                                             const int64_t *cols) {
    const int64_t G = K / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; h++) {
        __m256 acc[MR];
        for (int r = 0; r < rows; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t g = 0; g < G; g++) {
            const uint8_t *wp = w + g * 256 + 32 * h;
            if (h == 0) {
                for (int c = 0; c < 4; c++) _mm_prefetch((const char *)(wp + PREFETCH * 256 + 64 * c), _MM_HINT_T0);
                _mm_prefetch((const char *)(s + (g + PREFETCH) * 32), _MM_HINT_T0);
            }
            __m256i wv[8];
            unpack_half(wp, wv);
            __m256 step = load_bf16x8(s + g * 32 + 8 * h), zero = load_bf16x8(s + g * 32 + 16 + 8 * h);
            __m256 c = _mm256_fmadd_ps(step, _mm256_set1_ps(-8.0f), zero);
            for (int r = 0; r < rows; r++) {
                const int32_t *xq = (const int32_t *)(qx + r * K + g * 32);
                __m256i p[8];
                for (int j = 0; j < 8; j++) p[j] = _mm256_maddubs_epi16(wv[j], _mm256_set1_epi32(xq[j]));
                const __m256i s16 = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])),
                                                     _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7])));
                const __m256i a = _mm256_madd_epi16(s16, ones);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(step, _mm256_set1_ps(dx[r * G + g])), acc[r]);
                acc[r] = _mm256_fmadd_ps(c, _mm256_set1_ps(dsum[r * G + g]), acc[r]);
            }
        }
        for (int r = 0; r < rows; r++) store_bf16x8(y + r * ldy, cols + 8 * h, acc[r]);
    }
}

/* Both halves of a block at once, each input broadcast once for 16 columns: for one and two rows. */
static inline __attribute__((always_inline)) void q4_block_whole(const int8_t *qx, const float *dx, const float *dsum,
                                                             int64_t rows, int64_t K, const uint8_t *w,
                                                             const uint16_t *s, uint16_t *y, int64_t ldy,
                                                             const int64_t *cols) {
    const int64_t G = K / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0[MR], acc1[MR];
    for (int r = 0; r < rows; r++) acc0[r] = _mm256_setzero_ps(), acc1[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const uint8_t *wp = w + g * 256;
        for (int c = 0; c < 4; c++) _mm_prefetch((const char *)(wp + PREFETCH * 256 + 64 * c), _MM_HINT_T0);
        _mm_prefetch((const char *)(s + (g + PREFETCH) * 32), _MM_HINT_T0);
        __m256i wv[16];
        unpack_half(wp, wv);
        unpack_half(wp + 32, wv + 8);
        __m256 step0 = load_bf16x8(s + g * 32), zero0 = load_bf16x8(s + g * 32 + 16);
        __m256 step1 = load_bf16x8(s + g * 32 + 8), zero1 = load_bf16x8(s + g * 32 + 24);
        __m256 c0 = _mm256_fmadd_ps(step0, _mm256_set1_ps(-8.0f), zero0);
        __m256 c1 = _mm256_fmadd_ps(step1, _mm256_set1_ps(-8.0f), zero1);
        for (int r = 0; r < rows; r++) {
            const int32_t *xq = (const int32_t *)(qx + r * K + g * 32);
            __m256i p0[8], p1[8];
            for (int j = 0; j < 8; j++) {
                const __m256i xb = _mm256_set1_epi32(xq[j]);
                p0[j] = _mm256_maddubs_epi16(wv[j], xb);
                p1[j] = _mm256_maddubs_epi16(wv[8 + j], xb);
            }
            const __m256i s0 = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p0[0], p0[1]), _mm256_add_epi16(p0[2], p0[3])),
                                                _mm256_add_epi16(_mm256_add_epi16(p0[4], p0[5]), _mm256_add_epi16(p0[6], p0[7])));
            const __m256i s1 = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p1[0], p1[1]), _mm256_add_epi16(p1[2], p1[3])),
                                                _mm256_add_epi16(_mm256_add_epi16(p1[4], p1[5]), _mm256_add_epi16(p1[6], p1[7])));
            const __m256 d = _mm256_set1_ps(dx[r * G + g]), ds = _mm256_set1_ps(dsum[r * G + g]);
            acc0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s0, ones)), _mm256_mul_ps(step0, d), acc0[r]);
            acc0[r] = _mm256_fmadd_ps(c0, ds, acc0[r]);
            acc1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s1, ones)), _mm256_mul_ps(step1, d), acc1[r]);
            acc1[r] = _mm256_fmadd_ps(c1, ds, acc1[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        store_bf16x8(y + r * ldy, cols, acc0[r]);
        store_bf16x8(y + r * ldy, cols + 8, acc1[r]);
    }
}

static void q4_block(const int8_t *qx, const float *dx, const float *dsum, int64_t rows, int64_t K, const uint8_t *w,
                     const uint16_t *s, uint16_t *y, int64_t ldy, const int64_t *cols) {
    if (rows == 1) q4_block_whole(qx, dx, dsum, 1, K, w, s, y, ldy, cols);
    else if (rows == 2) q4_block_whole(qx, dx, dsum, 2, K, w, s, y, ldy, cols);
    else BY_ROWS(rows, q4_block_halves(qx, dx, dsum, R, K, w, s, y, ldy, cols));
}

static void q8_block(const int8_t *qx, const float *dx, const int32_t *isum, int64_t rows, int64_t K,
                     const int8_t *w, const uint16_t *s, uint16_t *y, int64_t ldy, const int64_t *cols) {
    const int64_t G = K / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    (void)isum;
    for (int h = 0; h < 2; h++) {
        __m256 acc[MR];
        for (int r = 0; r < rows; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t g = 0; g < G; g++) {
            const int8_t *wp = w + g * 512 + 32 * h;
            if (h == 0) {
                for (int c = 0; c < 8; c++) _mm_prefetch((const char *)(wp + PREFETCH * 512 + 64 * c), _MM_HINT_T0);
                if (g % 2 == 0) _mm_prefetch((const char *)(s + (g + PREFETCH) * 16), _MM_HINT_T0);
            }
            __m256i wv[8], wa[8];
            for (int j = 0; j < 8; j++) {
                wv[j] = _mm256_loadu_si256((const __m256i *)(wp + 64 * j));
                wa[j] = _mm256_abs_epi8(wv[j]); /* |w| x sign(x, w) = w x, and |w| <= 127 keeps int16 pairs exact */
            }
            __m256 dw = load_bf16x8(s + g * 16 + 8 * h);
            for (int r = 0; r < rows; r++) {
                const int32_t *xq = (const int32_t *)(qx + r * K + g * 32);
                __m256i a = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++)
                    a = _mm256_add_epi32(a, _mm256_madd_epi16(
                        _mm256_maddubs_epi16(wa[j], _mm256_sign_epi8(_mm256_set1_epi32(xq[j]), wv[j])), ones));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(dw, _mm256_set1_ps(dx[r * G + g])), acc[r]);
            }
        }
        for (int r = 0; r < rows; r++) store_bf16x8(y + r * ldy, cols + 8 * h, acc[r]);
    }
}

#else
#error "specdesk's q4 kernel needs AVX2 and FMA, or AVX512-VNNI"
#endif

const char *sd_isa(void) {
#ifdef SD_AMX
    if (amx_ready()) return SD_ISA ", amx";
#endif
    return SD_ISA;
}

/* Column block nb's output columns in y: map's, or nb * 16 .. nb * 16 + 15. */
static void block_cols(const int64_t *map, int64_t nb, int64_t *cols) {
    for (int i = 0; i < 16; i++) cols[i] = map ? map[nb * 16 + i] : nb * 16 + i;
}

/* Rows m_from .. M - 1 of one column block (its codes wb and scales sb) on the vector kernel, MR rows at a time. */
static void vector_rows(int kind, int64_t m_from, int64_t M, int64_t K, const int8_t *qx, const float *dx,
                        const int32_t *isum, const float *dsum, const uint8_t *wb, const uint16_t *sb, uint16_t *y,
                        int64_t ldy, const int64_t *cols) {
    const int64_t G = K / 32;
    for (int64_t m0 = m_from; m0 < M; m0 += MR) {
        const int64_t rows = M - m0 < MR ? M - m0 : MR;
        if (kind == 4)
            q4_block(qx + m0 * K, dx + m0 * G, dsum + m0 * G, rows, K, wb, sb, y + m0 * ldy, ldy, cols);
        else
            q8_block(qx + m0 * K, dx + m0 * G, isum + m0 * G, rows, K, (const int8_t *)wb, sb, y + m0 * ldy, ldy,
                     cols);
    }
}

/* kind 4: w = q4 codes, s = q4 scales; kind 8: w = q8 codes, s = q8 scales. Output column j (the j-th of the N
 * the codes hold) goes to column map[j] of y's rows of ldy values (map NULL: column j, ldy N): a head whose rows are
 * stored in another order (a draft's rows first, to share them) still writes its logits in vocabulary order.
 * Returns 0, or -1 if out of memory. */
int sd_gemm_map(int kind, const uint16_t *x, int64_t M, int64_t K, const void *w, const uint16_t *s, int64_t N,
                uint16_t *y, int64_t ldy, const int64_t *map, int threads) {
    const int64_t G = K / 32, NB = N / 16;
    int8_t *qx = (int8_t *)malloc((size_t)(M * K + 64));
    float *dx = (float *)malloc((size_t)(M * G) * sizeof(float) + 64);
    int32_t *isum = (int32_t *)malloc((size_t)(M * G) * sizeof(int32_t) + 64);
    float *dsum = (float *)malloc((size_t)(M * G) * sizeof(float) + 64); /* dx * isum: q4's zero-point term */
    if (!qx || !dx || !isum || !dsum) {
        free(qx), free(dx), free(isum), free(dsum);
        return -1;
    }
    quantize_rows(x, M, K, qx, dx, isum);
    for (int64_t i = 0; i < M * G; i++) dsum[i] = dx[i] * (float)isum[i];
    const int64_t wblock = kind == 4 ? G * 256 : G * 512, sblock = kind == 4 ? G * 32 : G * 16;
    int done = 0;
#ifdef SD_AMX
    if (kind == 4 && M >= AMX_ROWS && amx_ready()) {
        const int64_t full = M / AMX_ROWS * AMX_ROWS; /* rows past the last 16 on the vector kernel */
        uint8_t *wb = (uint8_t *)aligned_alloc(64, (size_t)(threads * G * 512));
        int32_t *sums = (int32_t *)aligned_alloc(64, (size_t)threads * 1024);
        if (wb && sums) { /* else (out of memory for the tiles' scratch) the vector kernel */
#pragma omp parallel num_threads(threads)
            {
                const int me = omp_get_thread_num();
                amx_config();
#pragma omp for schedule(static)
                for (int64_t nb = 0; nb < NB; nb++) {
                    int64_t cols[16];
                    block_cols(map, nb, cols);
                    q4_unpack((const uint8_t *)w + nb * wblock, G, wb + me * G * 512);
                    for (int64_t m0 = 0; m0 < full; m0 += AMX_ROWS)
                        q4_block_amx(qx + m0 * K, dx + m0 * G, dsum + m0 * G, K, wb + me * G * 512, s + nb * sblock,
                                     y + m0 * ldy, ldy, cols, sums + me * 256);
                    vector_rows(kind, full, M, K, qx, dx, isum, dsum, (const uint8_t *)w + nb * wblock,
                                s + nb * sblock, y, ldy, cols);
                }
                _tile_release();
            }
            done = 1;
        }
        free(wb), free(sums);
    }
#endif
    if (!done) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t nb = 0; nb < NB; nb++) {
            int64_t cols[16];
            block_cols(map, nb, cols);
            vector_rows(kind, 0, M, K, qx, dx, isum, dsum, (const uint8_t *)w + nb * wblock, s + nb * sblock, y, ldy,
                        cols);
        }
    }
    free(qx), free(dx), free(isum), free(dsum);
    return 0;
}

int sd_gemm(int kind, const uint16_t *x, int64_t M, int64_t K, const void *w, const uint16_t *s, int64_t N,
            uint16_t *y, int threads) {
    return sd_gemm_map(kind, x, M, K, w, s, N, y, N, NULL, threads);
}
