/* W8A8 products on aarch64 CPUs with the dot-product extension (Armv8.2 `asimddp`: Kunpeng 920,
 * Neoverse N1 and later), #included by cpu_gemm.c when the compiler targets it
 * (-march=armv8.2-a+dotprod, which native.py passes where /proc/cpuinfo lists asimddp).
 *
 * Why: without it, W8A8 runs the AVX2 path's int16 pairs through simd_neon.h (each weight
 * widened to int16, 8 products per smull); sdot multiplies 16 signed bytes by 16 signed bytes
 * and adds them into four int32 lanes in one instruction, with no widening. Activation rows are
 * int8 here (q in [-127, 127], quantized exactly as the int16 path does), so the int32 sums are
 * exact (|sum| <= 127 * 127 * K) and the results equal the other builds' bit for bit: the same
 * integer, then the same two fp32 multiplies in the same order. Its speed on a real Kunpeng host
 * has not been measured (none was at hand).
 */

#define S8_MR 4 /* activation rows per tile */
#define S8_NR 4 /* weight rows per tile: 16 accumulators, 4 weight and 1 activation register */

static inline int64_t s8_ld(int64_t K) { return (K + 15) / 16 * 16; }

/* fp32 rows -> int8 rows, ld8 apart, padding zero: the same scale, rounding and clamp as
 * quantize_rows (row_scale, round_clamp8, round_clamp1) */
static void quantize_rows_s8(const float *x, int64_t M, int64_t K, int per_token,
                             float static_scale, int8_t *q, int64_t ld8, float *sx) {
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        const float s = row_scale(xr, K, per_token, static_scale, 127.0f);
        sx[m] = s;
        int8_t *qr = q + m * ld8;
        const __m256 vs = _mm256_set1_ps(s);
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            const __m256i i = round_clamp8(xr + k, vs, lo, hi);
            vst1_s8(qr + k, vqmovn_s16(vcombine_s16(vqmovn_s32(i.lo), vqmovn_s32(i.hi))));
        }
        for (; k < K; k++) qr[k] = (int8_t)round_clamp1(xr[k], s, 127.0f);
        for (k = K; k < ld8; k++) qr[k] = 0;
    }
}

/* mr activation rows x nr weight rows (unpadded, K apart): y = sum * sx[i] * sw[j] */
static inline __attribute__((always_inline)) void
s8_tile(const int8_t *q, int64_t ld8, const int8_t *w, int64_t K, const float *sx,
        const float *sw, float *y, int64_t ldy, const int mr, const int nr) {
    int32x4_t acc[S8_MR][S8_NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = vdupq_n_s32(0);
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        if ((k & 63) == 0)
            for (int j = 0; j < nr; j++) __builtin_prefetch(w + j * K + k + ROW_PF_I8, 0, 3);
        int8x16_t wv[S8_NR];
        for (int j = 0; j < nr; j++) wv[j] = vld1q_s8(w + j * K + k);
        for (int i = 0; i < mr; i++) {
            const int8x16_t qv = vld1q_s8(q + i * ld8 + k);
            for (int j = 0; j < nr; j++) acc[i][j] = vdotq_s32(acc[i][j], qv, wv[j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            int32_t s = vaddvq_s32(acc[i][j]);
            for (int64_t t = k; t < K; t++) s += (int32_t)q[i * ld8 + t] * (int32_t)w[j * K + t];
            y[i * ldy + j] = (float)s * sx[i] * sw[j];
        }
}

#define S8_CASE(a, b) s8_tile(q, ld8, w, K, sx, sw, y, N, a, b)

static void s8_rows(const int8_t *q, int64_t ld8, const int8_t *w, const float *sx,
                    const float *sw, float *y, int mr, int nr, int64_t K, int64_t N) {
    switch (mr * 16 + nr) { CASES(S8_CASE) }
}

/* few rows: each thread walks its weight rows front to back, S8_NR at a time */
static void s8_stream(const gemm_t *g, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n += S8_NR) {
        const int nn = (int)(n1 - n < S8_NR ? n1 - n : S8_NR);
        s8_rows(g->q8, g->ldx, g->w + n * g->K, g->sx, g->sw + n, g->y + n, (int)g->M, nn,
                g->K, g->N);
    }
}

static void s8_tile_at(const gemm_t *g, int64_t m0, int mm, int64_t n0, int nn) {
    s8_rows(g->q8 + m0 * g->ldx, g->ldx, g->w + n0 * g->K, g->sx + m0, g->sw + n0,
            g->y + m0 * g->N + n0, mm, nn, g->K, g->N);
}

/* y[M, N] = sx[m] * sw[n] * sum_k q[m, k] w[n, k], int8 rows q (quantize_rows_s8) */
static void s8_gemm(const int8_t *q, int64_t ld8, const int8_t *w, const float *sx,
                    const float *sw, float *y, int64_t M, int64_t N, int64_t K, int nthreads) {
    gemm_t g = {NULL, NULL, ld8, w, sx, sw, NULL, NULL, y, M, N, K, 0, 0, NULL};
    g.q8 = q;
    run(&g, s8_stream, s8_tile_at, S8_NR, ld8, nthreads);
}
