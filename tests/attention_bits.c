/* attention.c's two paths compared in float32, before the bfloat16 output rounds small differences away: attend_rows
 * (rows sharing a KV head in one pass over the keys: a verify pass's positions, a position's query heads) against
 * attend_one (one query head alone: a tree's positions, and every head where the rows path does not serve). Per row,
 * the weights after softmax and the weighted sums must be the same bits, for every row count the rows path takes,
 * rows of equal and of different lengths, and key counts around its blocks of 8 and 16.
 *
 * tests/test_own_kernels.py builds it with the kernels' flags (this CPU's, and x86-64-v3's AVX2 paths) and runs it:
 * it prints "ok N" (N rows compared), or the first difference and exits 1. */
#include "../specdesk/core/kernels/attention.c"

#include <stdio.h>
#include <string.h>

static uint64_t state = 88172645463325252ull;

static float rnd(void) { /* xorshift64: uniform in [-1, 1) */
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

int main(void) {
    long checked = 0;
#if defined(FAST_SCORES) || defined(ROWS_AVX2)
    const int64_t hds[] = {32, 64, 96, 128};
    const int64_t lengths[] = {1, 7, 8, 9, 15, 16, 17, 33, 150, 301};
    const int64_t cap = 320;
    for (size_t h = 0; h < sizeof hds / sizeof *hds; h++) {
        const int64_t hd = hds[h];
        if (!rows_block(hd) || hd % 32) continue; /* sd_attend takes the rows path only for these */
        uint16_t *kc = malloc(cap * hd * 2), *vc = malloc(cap * hd * 2), *q = malloc(RMAX * hd * 2);
        uint16_t *out = malloc(RMAX * hd * 2), *one = malloc(hd * 2);
        float *work = malloc(rows_work(RMAX, cap, hd) * sizeof(float)), *work1 = malloc((3 * hd + cap + 16) * sizeof(float));
        for (int64_t i = 0; i < cap * hd; i++) kc[i] = to_bf(2.0f * rnd()), vc[i] = to_bf(2.0f * rnd());
        for (int64_t i = 0; i < RMAX * hd; i++) q[i] = to_bf(3.0f * rnd());
        const float scale = 1.0f / sqrtf((float)hd);
        for (int R = 1; R <= rows_block(hd); R++)
            for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
                for (int spread = 0; spread < 2; spread++) { /* all rows one length, or a verify pass's L, L+1, .. */
                    const uint16_t *qr[RMAX];
                    uint16_t *outr[RMAX];
                    int64_t Lr[RMAX], Lmin, Lmax;
                    for (int r = 0; r < R; r++) {
                        qr[r] = q + r * hd, outr[r] = out + r * hd;
                        Lr[r] = lengths[li] + (spread ? (r * 5) % 3 : 0);
                    }
                    key_span(Lr, R, &Lmin, &Lmax);
                    attend_rows(qr, outr, Lr, R, kc, vc, hd, scale, work);
                    const float *s = work, *o = work + R * Lmax; /* attend_rows' weights (R, Lmax), sums (R, hd) */
                    for (int r = 0; r < R; r++) {
                        attend_one(qr[r], kc, vc, hd, 1, Lr[r], NULL, 0, scale, one, work1);
                        const float *o1 = work1 + 2 * hd, *s1 = o1 + hd; /* attend_one's sums (hd), weights (L) */
                        if (memcmp(s + r * Lmax, s1, Lr[r] * sizeof(float)) || memcmp(o + r * hd, o1, hd * sizeof(float)) ||
                            memcmp(outr[r], one, hd * 2)) {
                            printf("differ: head size %ld, %d rows, row %d over %ld keys\n", (long)hd, R, r, (long)Lr[r]);
                            return 1;
                        }
                        checked++;
                    }
                }
        free(kc), free(vc), free(q), free(out), free(one), free(work), free(work1);
    }
#endif
    printf("ok %ld\n", checked);
    return 0;
}
