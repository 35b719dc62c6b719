/* Row-wise operations of a decoder layer in one call each (the lean decoder's RMSNorm): torch's form takes eight
 * small operations, ~20 us on a 2-core CPU, 61 times in a SmolLM2 pass. Each row by the same instructions, alone or
 * among others (row-invariant, as a verify pass needs).
 *
 * rmsnorm: y = bf16(w * bf16(x * 1 / sqrt(mean(x^2) + eps))), x and w bfloat16, the mean in float32: what
 * LeanDecoder._norm computes, its sum in another order. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 16

static inline float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t to_bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

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
