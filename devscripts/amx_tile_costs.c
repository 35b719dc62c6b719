/* What AMX's tile instructions cost on this CPU (seventeenth sitting): the int8 dot product of a 16-row tile
 * (TDPBSUD) alone, with its two tile loads, and with the zeroing and store a q4 group needs (q4gemm.c's
 * q4_block_amx: one group of 32 inputs per step, since Q4_1's steps are per group). Linux only (the tiles are asked
 * for with arch_prctl).
 *
 *     cc -O2 -march=native devscripts/amx_tile_costs.c -o /tmp/amx_tile_costs && /tmp/amx_tile_costs
 *
 * On the 2-core Xeon VM: dp 12-14 ns, loads + dp 21-23 ns, zero + loads + dp + store 23-28 ns a step, a store alone
 * 7-9 ns, a 16-row activation load 7-8 ns: a 16-row step costs about what the vector kernel spends on those 16 rows,
 * so tiles did not pay for few-row verify passes, and four groups in flight (tiles 0-3) measured no faster. */
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tilecfg;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    syscall(SYS_arch_prctl, 0x1023, 18);
    tilecfg cfg; memset(&cfg, 0, sizeof cfg); cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    for (int t = 4; t < 6; t++) cfg.rows[t] = 16, cfg.colsb[t] = 32;
    for (int t = 6; t < 8; t++) cfg.rows[t] = 8, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
    static int8_t A[16 * 1536] __attribute__((aligned(64)));
    static uint8_t B[48 * 512] __attribute__((aligned(64)));
    static int32_t C[4 * 256] __attribute__((aligned(64)));
    const int N = 2000000;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, A, 576); _tile_loadd(5, A, 576); _tile_loadd(6, B, 64); _tile_loadd(7, B, 64);
    double t = now();
    for (int i = 0; i < N; i++) { _tile_dpbsud(0, 4, 6); _tile_dpbsud(1, 5, 7); _tile_dpbsud(2, 4, 7); _tile_dpbsud(3, 5, 6); }
    double dp = (now() - t) / (4.0 * N);
    t = now();
    for (int i = 0; i < N; i++) { int g = i % 18; _tile_loadd(4, A + g * 32, 576); _tile_loadd(6, B + g * 512, 64); _tile_dpbsud(0, 4, 6); }
    double ld = (now() - t) / N;
    t = now();
    for (int i = 0; i < N / 4; i++) { int g = i % 18; _tile_zero(0); _tile_loadd(4, A + g * 32, 576); _tile_loadd(6, B + g * 512, 64); _tile_dpbsud(0, 4, 6); _tile_stored(0, C, 64); }
    double st = (now() - t) / (N / 4);
    t = now();
    for (int i = 0; i < N / 4; i++) { _tile_stored(0, C, 64); }
    double so = (now() - t) / (N / 4);
    t = now();
    for (int i = 0; i < N / 4; i++) { _tile_loadd(4, A, 576); }
    double la = (now() - t) / (N / 4);
    _tile_stored(0, C, 64);
    printf("dp %.2f ns  load+load+dp %.2f ns  zero+2load+dp+store %.2f ns  store only %.2f ns  loadA only %.2f ns (C0 %d)\n", dp * 1e9, ld * 1e9, st * 1e9, so * 1e9, la * 1e9, C[0]);
    _tile_release();
    return 0;
}
