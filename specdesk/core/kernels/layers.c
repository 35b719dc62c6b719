/* A lean decoder pass's layers in one call: for each layer RMSNorm, the q/k/v product, rotary embedding with the KV
 * cache write, attention, the output product and its residual add, RMSNorm, the gate/up product, SwiGLU, the down
 * product and its residual add; the same kernels, in the same order, on the same bfloat16 values as
 * LeanDecoder._run calls them one by one from Python (so the same bits). Why: on a small model Python's ~15 calls a
 * layer (ctypes, torch's allocations and adds, ~40 us a layer on a 2-core CPU) were ~20% of a one-position pass and
 * half of a draft layer's time.
 *
 * The residual add is torch's bfloat16 add: bf16(float(x) + float(y)), rounded to nearest even. */
#include <stdlib.h>
#include <string.h>

#include "scalars.h"

/* Built with -DSD_PROFILE (devscripts/host_limits.py only): seconds spent in each stage of the passes since the
 * caller last zeroed sd_prof: 0 norm, 1 q/k/v product, 2 rotary + cache write, 3 attention, 4 output product,
 * 5 residual add + norm, 6 gate/up product, 7 SwiGLU, 8 down product, 9 residual add, 10 final norm + head,
 * 11 argmax. */
#ifdef SD_PROFILE
#include <time.h>
double sd_prof[16];
static double prof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
#define PROF_START double prof_t = prof_now()
#define TICK(i) do { const double t_ = prof_now(); sd_prof[i] += t_ - prof_t; prof_t = t_; } while (0)
#else
#define PROF_START do {} while (0)
#define TICK(i) do {} while (0)
#endif

int sd_gemm(int kind, const uint16_t *x, int64_t M, int64_t K, const void *w, const uint16_t *s, int64_t N,
            uint16_t *y, int threads);
void sd_rmsnorm(const uint16_t *x, int64_t n, int64_t h, const uint16_t *w, float eps, uint16_t *out);
void sd_rope_kv(const uint16_t *qkv, int64_t n, int64_t hq, int64_t hk, int64_t hd, const uint16_t *cos,
                const uint16_t *sin_signed, uint16_t *q_out, uint16_t *kc, uint16_t *vc, int64_t head_stride,
                int64_t p0);
void sd_silu_mul(const uint16_t *gu, int64_t n, int64_t inter, uint16_t *out);
int sd_attend(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, int64_t head_stride, int64_t n, int64_t hq,
              int64_t hk, int64_t hd, const int64_t *prefix, const int64_t *extra_off, const int64_t *extras,
              float scale, uint16_t *out, int threads);

/* One product: kind 4 (q4 layout) or 8 (q8 layout) of q4gemm.c, its codes and scales, a bias (NULL: none), n outputs. */
typedef struct {
    int64_t kind;
    const void *w;
    const uint16_t *s;
    const uint16_t *bias;
    int64_t n;
} sd_linear;

/* One decoder layer: its two norms' weights, four products (q/k/v joined, gate/up joined), its KV cache (hk heads of
 * head_stride values each). */
typedef struct {
    const uint16_t *ln1, *ln2;
    sd_linear qkv, o, gu, down;
    uint16_t *kc, *vc;
} sd_layer;

static void add_into(uint16_t *x, const uint16_t *y, int64_t count) {
    for (int64_t i = 0; i < count; i++) x[i] = to_bf(bf(x[i]) + bf(y[i]));
}

static int product(const sd_linear *lin, const uint16_t *x, int64_t n, int64_t k, uint16_t *y, int threads) {
    if (sd_gemm((int)lin->kind, x, n, k, lin->w, lin->s, lin->n, y, threads) != 0) return -1;
    if (lin->bias)
        for (int64_t r = 0; r < n; r++) add_into(y + r * lin->n, lin->bias, lin->n);
    return 0;
}

/* x (n, hidden) bfloat16, updated in place: the residual stream after every layer. cos, sin_signed (n, hd): each
 * position's rotary rows; positions go to cache slots p0 .. p0 + n - 1; prefix / extra_off / extras: the keys each
 * position attends to (sd_attend). Returns 0, or -1 if out of memory. */
int sd_forward(uint16_t *x, int64_t n, const sd_layer *layers, int64_t n_layers, int64_t hidden, int64_t hq,
               int64_t hk, int64_t hd, const uint16_t *cos, const uint16_t *sin_signed, int64_t head_stride,
               int64_t p0, const int64_t *prefix, const int64_t *extra_off, const int64_t *extras, float scale,
               float eps, int threads) {
    int64_t widest = hidden;
    for (int64_t l = 0; l < n_layers; l++) {
        const sd_layer *L = layers + l;
        if (L->qkv.n > widest) widest = L->qkv.n;
        if (L->gu.n > widest) widest = L->gu.n;
    }
    const int64_t heads = hq * hd;
    uint16_t *h = (uint16_t *)malloc((size_t)(n * hidden) * 2);
    uint16_t *wide = (uint16_t *)malloc((size_t)(n * widest) * 2); /* q/k/v rows, then gate/up rows */
    uint16_t *q = (uint16_t *)malloc((size_t)(n * heads) * 2);
    uint16_t *att = (uint16_t *)malloc((size_t)(n * heads) * 2);
    uint16_t *act = (uint16_t *)malloc((size_t)(n * widest) * 2);
    int rc = (h && wide && q && att && act) ? 0 : -1;
    for (int64_t l = 0; l < n_layers && rc == 0; l++) {
        const sd_layer *L = layers + l;
        const int64_t inter = L->gu.n / 2;
        PROF_START;
        sd_rmsnorm(x, n, hidden, L->ln1, eps, h);
        TICK(0);
        if (product(&L->qkv, h, n, hidden, wide, threads) != 0) rc = -1;
        if (rc) break;
        TICK(1);
        sd_rope_kv(wide, n, hq, hk, hd, cos, sin_signed, q, L->kc, L->vc, head_stride, p0);
        TICK(2);
        if (sd_attend(q, L->kc, L->vc, head_stride, n, hq, hk, hd, prefix, extra_off, extras, scale, att, threads))
            rc = -1;
        TICK(3);
        if (rc || product(&L->o, att, n, heads, h, threads) != 0) rc = -1;
        if (rc) break;
        TICK(4);
        add_into(x, h, n * hidden);
        sd_rmsnorm(x, n, hidden, L->ln2, eps, h);
        TICK(5);
        if (product(&L->gu, h, n, hidden, wide, threads) != 0) rc = -1;
        if (rc) break;
        TICK(6);
        sd_silu_mul(wide, n, inter, act);
        TICK(7);
        if (product(&L->down, act, n, inter, h, threads) != 0) rc = -1;
        if (rc) break;
        TICK(8);
        add_into(x, h, n * hidden);
        TICK(9);
    }
    free(h), free(wide), free(q), free(att), free(act);
    return rc;
}

void sd_argmax_bf16(const uint16_t *x, int64_t n, int64_t v, int64_t *out);
void sd_softmax_bf16(const uint16_t *x, int64_t n, int64_t v, float inv_t, float *out);
int sd_gemm_map(int kind, const uint16_t *x, int64_t M, int64_t K, const void *w, const uint16_t *s, int64_t N,
                uint16_t *y, int64_t ldy, const int64_t *map, int threads);

/* What surrounds the layers in a pass for token ids: the embedding table, the final RMSNorm's weight, the head's
 * product (no bias) and where its stored rows go (map, as sd_gemm_map's; NULL: in order). */
typedef struct {
    const uint16_t *embed; /* (rows, hidden) bfloat16 */
    int64_t rows;
    const uint16_t *norm;
    sd_linear head;
    const int64_t *map;
} sd_ends;

/* A whole pass for token ids (LeanDecoder.forward_ids, and its greedy form): the tokens' embedding rows, every layer
 * (sd_forward), the final RMSNorm and the head's product for the last position (every position: all), and where asked
 * each of those rows' argmax over its first `limit` logits and that logit's probability under softmax (as
 * sd_argmax_bf16 and sd_softmax_bf16 give them). The same kernels on the same values as the calls LeanDecoder makes
 * one by one, so the same bits. Why: right after a target pass has streamed its weights through the caches, each of
 * the Python-side operations between those kernels cost 60-90 us (the embedding index, the norm's output tensor, the
 * argmax), a third of a SmolLM2 draft forward's 0.69 ms on a 2-core AMD EPYC.
 * logits: (rows, head.n) out, or NULL (kept here only for the argmax); top, top_p: one per row, or NULL. Returns 0,
 * -1 if out of memory, -2 if a token id is outside the embedding table. */
int sd_forward_ids(const int64_t *ids, int64_t n, const sd_ends *ends, int every, int64_t limit, uint16_t *logits,
                   int64_t *top, float *top_p, const sd_layer *layers, int64_t n_layers, int64_t hidden, int64_t hq,
                   int64_t hk, int64_t hd, const uint16_t *cos, const uint16_t *sin_signed, int64_t head_stride,
                   int64_t p0, const int64_t *prefix, const int64_t *extra_off, const int64_t *extras, float scale,
                   float eps, int threads) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= ends->rows) return -2;
    const int64_t rows = every ? n : 1, v = ends->head.n;
    uint16_t *x = (uint16_t *)malloc((size_t)(n * hidden) * 2);
    uint16_t *h = (uint16_t *)malloc((size_t)(rows * hidden) * 2);
    uint16_t *y = logits ? logits : (uint16_t *)malloc((size_t)(rows * v) * 2);
    float *probs = top_p ? (float *)malloc((size_t)limit * sizeof(float)) : NULL;
    int rc = (x && h && y && (probs || !top_p)) ? 0 : -1;
    if (rc == 0) {
        for (int64_t i = 0; i < n; i++) memcpy(x + i * hidden, ends->embed + ids[i] * hidden, (size_t)hidden * 2);
        rc = sd_forward(x, n, layers, n_layers, hidden, hq, hk, hd, cos, sin_signed, head_stride, p0, prefix,
                        extra_off, extras, scale, eps, threads);
    }
    PROF_START;
    if (rc == 0) {
        sd_rmsnorm(x + (n - rows) * hidden, rows, hidden, ends->norm, eps, h);
        rc = sd_gemm_map((int)ends->head.kind, h, rows, hidden, ends->head.w, ends->head.s, v, y, v, ends->map,
                         threads);
    }
    TICK(10);
    if (rc == 0 && top)
        for (int64_t r = 0; r < rows; r++) {
            sd_argmax_bf16(y + r * v, 1, limit, top + r);
            if (top_p) {
                sd_softmax_bf16(y + r * v, 1, limit, 1.0f, probs);
                top_p[r] = probs[top[r]];
            }
        }
    TICK(11);
    if (y != logits) free(y);
    free(x), free(h), free(probs);
    return rc;
}
