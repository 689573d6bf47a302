/* W8A8 products on AVX512-VNNI CPUs (Intel Ice Lake and later, AMD Zen 4), #included by
 * cpu_gemm.c when the compiler targets them (-march=native on such a CPU).
 *
 * Why: the AVX2 path multiplies int16 pairs (vpmaddwd, 16 products per instruction after
 * widening each weight vector); vpdpbusd on 512-bit registers takes 64 int8 products per
 * instruction with no widening. That is where llama.cpp's Q8_0 gets its batch-8/16 speed on
 * these CPUs, and where our tiles spent most of a batch-8/16 step.
 *
 * vpdpbusd multiplies unsigned by signed bytes, so activation rows are stored as u = q + 128
 * (q in [-127, 127], u in [1, 255]) and each product subtracts 128 * sum_k w[n, k]:
 *     sum_k q w = sum_k u w - 128 sum_k w.
 * Every term is exact in int32 (|sum| <= 255 * 127 * K), so the results equal the AVX2 path's
 * bit for bit, including the final fp32 multiplies, which run in the same order. */

#define V8 64 /* bytes per 512-bit vector */
/* Up to this many activation rows stream the weights once, front to back (v8_row): 1-4 rows
 * with 4 weight rows at a time, 5-8 with 2 (16 accumulators either way). More rows go through
 * tiles. */
#define V8_ROW_M 8

static inline __attribute__((always_inline)) __mmask64 v8_tail(int64_t left) {
    return left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
}

/* 64 bytes at p; the masked form only for a row's last, partial vector (masked loads cost
 * an extra uop on the vector ports that the full vectors' loop cannot spare) */
static inline __attribute__((always_inline)) __m512i v8_load(const void *p, __mmask64 m,
                                                             const int full) {
    return full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(m, p);
}

/* one 64-byte step of mr activation rows times nr weight rows at offset k; with_ws also sums
 * the weights (vpdpbusd against all-ones) */
static inline __attribute__((always_inline)) void
v8_step(__m512i acc[][4], __m512i *ws, const uint8_t *xu, int64_t ldu, const int8_t *w,
        int64_t K, int64_t k, const int mr, const int nr, const int with_ws, const int full) {
    const __mmask64 m = full ? 0 : v8_tail(K - k);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i wv[4];
    for (int j = 0; j < nr; j++) {
        wv[j] = v8_load(w + j * K + k, m, full);
        if (with_ws) ws[j] = _mm512_dpbusd_epi32(ws[j], ones, wv[j]);
    }
    for (int i = 0; i < mr; i++) {
        const __m512i xv = v8_load(xu + i * ldu + k, m, full);
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], xv, wv[j]);
    }
}

/* the four int32 sums of four vectors, as lanes 0..3 */
static inline __attribute__((always_inline)) __m128i
hsum4_epi32(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m256i a2 = _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
    const __m256i b2 = _mm256_add_epi32(_mm512_castsi512_si256(b), _mm512_extracti64x4_epi64(b, 1));
    const __m256i c2 = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
    const __m256i d2 = _mm256_add_epi32(_mm512_castsi512_si256(d), _mm512_extracti64x4_epi64(d, 1));
    const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a2, b2), _mm256_hadd_epi32(c2, d2));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

/* y[i, j] = ((float)s * sx[i]) * sw[j] for the nr int32 sums s of activation row i, stored at
 * y + i * ldy (the AVX2 path's expression and order) */
static inline __attribute__((always_inline)) void
v8_store(const __m512i *acc, const int32_t *corr, const float *sx, const float *sw, float *y,
         const int nr) {
    if (nr == 4) {
        __m128i s = hsum4_epi32(acc[0], acc[1], acc[2], acc[3]);
        s = _mm_sub_epi32(s, _mm_loadu_si128((const __m128i *)corr));
        const __m128 f = _mm_mul_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(*sx));
        _mm_storeu_ps(y, _mm_mul_ps(f, _mm_loadu_ps(sw)));
        return;
    }
    for (int j = 0; j < nr; j++)
        y[j] = (float)(_mm512_reduce_add_epi32(acc[j]) - corr[j]) * *sx * sw[j];
}

/* Few activation rows (decode): nr weight rows at a time, front to back, one pass over them.
 * Each row's sum for the correction is the caller's (wsum, summed once when the layer was
 * bound) or, with wsum NULL, comes from the same loads (vpdpbusd against all-ones); OWN_WS is
 * that choice as a constant. */
static inline __attribute__((always_inline)) void
v8_row(const uint8_t *xu, int64_t ldu, const int8_t *w, const int32_t *wsum, int64_t K,
       const float *sx, const float *sw, float *y, int64_t ldy, const int mr, const int nr,
       const int own_ws) {
    __m512i acc[V8_ROW_M][4], ws[4];
    for (int j = 0; j < nr; j++) {
        ws[j] = _mm512_setzero_si512();
        for (int i = 0; i < mr; i++) acc[i][j] = _mm512_setzero_si512();
    }
    int64_t k = 0;
    for (; k + V8 <= K; k += V8) {
        prefetch_next_tile(w, K, k, nr);
        v8_step(acc, ws, xu, ldu, w, K, k, mr, nr, own_ws, 1);
    }
    if (k < K) v8_step(acc, ws, xu, ldu, w, K, k, mr, nr, own_ws, 0);
    int32_t corr[4] = {0, 0, 0, 0};
    for (int j = 0; j < nr; j++)
        corr[j] = 128 * (own_ws ? _mm512_reduce_add_epi32(ws[j]) : wsum[j]);
    for (int i = 0; i < mr; i++) v8_store(acc[i], corr, sx + i, sw, y + i * ldy, nr);
}

#define V8_ROW_CASE(a, b) v8_row(xu, ldu, w, wsum, K, sx, sw, y, N, a, b, OWN_WS)
#define V8_ROW_CASES                                                                      \
    switch (mr * 16 + nr) {                                                               \
        CASES(V8_ROW_CASE)                                                                \
    case 0x51: V8_ROW_CASE(5, 1); break; case 0x52: V8_ROW_CASE(5, 2); break;             \
    case 0x61: V8_ROW_CASE(6, 1); break; case 0x62: V8_ROW_CASE(6, 2); break;             \
    case 0x71: V8_ROW_CASE(7, 1); break; case 0x72: V8_ROW_CASE(7, 2); break;             \
    case 0x81: V8_ROW_CASE(8, 1); break; case 0x82: V8_ROW_CASE(8, 2); break;             \
    }

static void v8_rows(const uint8_t *xu, int64_t ldu, const int8_t *w, const int32_t *wsum,
                    const float *sx, const float *sw, float *y, int mr, int nr, int64_t K,
                    int64_t N) {
    if (wsum) {
        enum { OWN_WS = 0 };
        V8_ROW_CASES
    } else {
        enum { OWN_WS = 1 };
        V8_ROW_CASES
    }
}

/* More rows: mr x nr tiles. The first block of activation rows of a tile reads the weight
 * rows from memory and takes their correction sums from the same loads (as v8_row does); the
 * blocks after it find the rows in L1 and reuse the sums. */
static inline __attribute__((always_inline)) void
v8_tile(const uint8_t *xu, int64_t ldu, const int8_t *w, int64_t K, int32_t *corr,
        const float *sx, const float *sw, float *y, int64_t ldy, const int mr, const int nr,
        const int mode) {
    /* mode 0: a later block (rows in L1, sums known); 1: the first block, prefetching the next
     * tile and summing the weights; 2: the first block with the sums given */
    const int first = mode != 0, own_ws = mode == 1;
    __m512i acc[MR][4], ws[4];
    for (int j = 0; j < nr; j++) {
        ws[j] = _mm512_setzero_si512();
        for (int i = 0; i < mr; i++) acc[i][j] = _mm512_setzero_si512();
    }
    int64_t k = 0;
    for (; k + V8 <= K; k += V8) {
        if (first) prefetch_next_tile(w, K, k, nr);
        v8_step(acc, ws, xu, ldu, w, K, k, mr, nr, own_ws, 1);
    }
    if (k < K) v8_step(acc, ws, xu, ldu, w, K, k, mr, nr, own_ws, 0);
    if (own_ws)
        for (int j = 0; j < nr; j++) corr[j] = 128 * _mm512_reduce_add_epi32(ws[j]);
    for (int i = 0; i < mr; i++) v8_store(acc[i], corr, sx + i, sw, y + i * ldy, nr);
}

#define V8_TILE_CASE(a, b) v8_tile(xu, ldu, w, K, corr, sx, sw, y, N, a, b, F)

static void v8_tiles(const uint8_t *xu, int64_t ldu, const int8_t *w, int32_t *corr,
                     const float *sx, const float *sw, float *y, int mr, int nr, int64_t K,
                     int64_t N, int mode) {
    if (mode == 1) {
        enum { F = 1 };
        switch (mr * 16 + nr) { CASES(V8_TILE_CASE) }
    } else if (mode == 2) {
        enum { F = 2 };
        switch (mr * 16 + nr) { CASES(V8_TILE_CASE) }
    } else {
        enum { F = 0 };
        switch (mr * 16 + nr) { CASES(V8_TILE_CASE) }
    }
}

/* Activation rows as q + 128 in u8 (quantize_rows' values and scales), ldu >= K bytes apart */
static void quantize_rows_u8(const float *x, int64_t M, int64_t K, int per_token,
                             float static_scale, uint8_t *u, int64_t ldu, float *sx) {
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    const __m256i bias = _mm256_set1_epi32(128);
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        const float s = row_scale(xr, K, per_token, static_scale, 127.0f);
        sx[m] = s;
        uint8_t *ur = u + m * ldu;
        const __m256 vs = _mm256_set1_ps(s);
        int64_t k = 0;
        for (; k + 8 <= K; k += 8)
            _mm_storel_epi64((__m128i *)(ur + k),
                             _mm256_cvtepi32_epi8(
                                 _mm256_add_epi32(round_clamp8(xr + k, vs, lo, hi), bias)));
        for (; k < K; k++) ur[k] = (uint8_t)(round_clamp1(xr[k], s, 127.0f) + 128);
    }
}

/* y[M, N] = (u - 128)[M, K] W^T with both scales; u from quantize_rows_u8; wsum: the weight
 * rows' sums (int32 [N]) or NULL to take them from the weight loads */
static void v8_gemm(const uint8_t *u, int64_t ldu, const int8_t *w, const int32_t *wsum,
                    const float *sx, const float *sw, float *y, int64_t M, int64_t N, int64_t K,
                    int nthreads) {
    if (M <= V8_ROW_M) {
        const int64_t step = M <= 4 ? 4 : 2;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t n1 = N * (t + 1) / nt;
            for (int64_t n = N * t / nt; n < n1; n += step) {
                const int nn = (int)(n1 - n < step ? n1 - n : step);
                v8_rows(u, ldu, w + n * K, wsum ? wsum + n : NULL, sx, sw + n, y + n, (int)M,
                        nn, K, N);
            }
        }
        return;
    }
    const int64_t tiles = (N + 3) / 4;
    int64_t mb = (256 * 1024) / ldu;
    mb = mb < MR ? MR : mb - mb % MR;
    for (int64_t b0 = 0; b0 < M; b0 += mb) {
        const int64_t b1 = M - b0 < mb ? M : b0 + mb;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t n0 = t * 4;
            const int nn = (int)(N - n0 < 4 ? N - n0 : 4);
            int32_t corr[4] = {0, 0, 0, 0};
            if (wsum)
                for (int j = 0; j < nn; j++) corr[j] = 128 * wsum[n0 + j];
            for (int64_t m0 = b0; m0 < b1; m0 += MR)
                v8_tiles(u + m0 * ldu, ldu, w + n0 * K, corr, sx + m0, sw + n0,
                         y + m0 * N + n0, (int)(b1 - m0 < MR ? b1 - m0 : MR), nn, K, N,
                         m0 == b0 ? (wsum ? 2 : 1) : 0);
        }
    }
}

static inline int64_t v8_ld(int64_t K) { return (K + V8 - 1) / V8 * V8; }

/* ---- W8A16 with per-channel weight scales: the block loop on 512-bit registers -----------
 * One block of QB = 32 activations is one register of int16; vpdpwssd multiplies it by the 32
 * widened weights and sums pairs into 16 int32 lanes (at most 2 * 32767 * 127 each), which
 * become fp32 times the block's scale, as in bf_row / bf_tile. Same products, summed in
 * another order than the AVX2 path's, so equal to it up to fp32 rounding. Per-group scales
 * stay on the AVX2 path. */

/* one block at offset k; the last block may be partial: its weights are masked (the row
 * ends at K), its activations are zero-padded to ldq */
static inline __attribute__((always_inline)) void
bw_step(__m512 acc[][4], const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
        int64_t K, int64_t k, const int mr, const int nr, const int full) {
    const int64_t nb = ldq / QB;
    const __mmask32 m = full ? 0 : (((__mmask32)1 << (K - k)) - 1);
    __m512i wv[4];
    for (int j = 0; j < nr; j++)
        wv[j] = _mm512_cvtepi8_epi16(full ? _mm256_loadu_si256((const __m256i *)(w + j * K + k))
                                          : _mm256_maskz_loadu_epi8(m, w + j * K + k));
    for (int i = 0; i < mr; i++) {
        const __m512i qv = _mm512_loadu_si512(q + i * ldq + k);
        const __m512 si = _mm512_set1_ps(xs[i * nb + k / QB]);
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(_mm512_dpwssd_epi32(_mm512_setzero_si512(), qv, wv[j])), si,
                acc[i][j]);
    }
}

static inline __attribute__((always_inline)) void
bw_row(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w, int64_t K,
       const float *sw, const float *bias, float *y, int64_t ldy, const int mr, const int nr) {
    __m512 acc[MR][4];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + QB <= K; k += QB) {
        if ((k & 63) == 0) prefetch_next_tile(w, K, k, nr);
        bw_step(acc, q, ldq, xs, w, K, k, mr, nr, 1);
    }
    if (k < K) bw_step(acc, q, ldq, xs, w, K, k, mr, nr, 0);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            const float s = _mm512_reduce_add_ps(acc[i][j]) * sw[j];
            y[i * ldy + j] = bias ? s + bias[j] : s;
        }
}

#define BW_CASE(a, b) bw_row(q, ldq, xs, w, K, sw, bias, y, N, a, b)

static void bw_rows(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
                    const float *sw, const float *bias, float *y, int mr, int nr, int64_t K,
                    int64_t N) {
    switch (mr * 16 + nr) { CASES(BW_CASE) }
}

/* mr activation rows x nr weight rows of a 512-bit product, written to y (ldy = N) */
typedef void (*z_rows_fn)(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
                          const float *sw, const float *bias, float *y, int mr, int nr,
                          int64_t K, int64_t N);

/* Up to ROW_MAX_M rows: each thread streams its range of weight rows, 4 at a time; more: 4 x 4
 * tiles, the activation rows in blocks that stay in L2. xs_ld: activation scales per row. */
static void z_gemm(z_rows_fn rows, const int16_t *q, int64_t ldq, const float *xs,
                   int64_t xs_ld, const int8_t *w, const float *sw, const float *bias, float *y,
                   int64_t M, int64_t N, int64_t K, int nthreads) {
    if (M <= ROW_MAX_M) {
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t n1 = N * (t + 1) / nt;
            for (int64_t n = N * t / nt; n < n1; n += 4) {
                const int nn = (int)(n1 - n < 4 ? n1 - n : 4);
                rows(q, ldq, xs, w + n * K, sw + n, bias ? bias + n : NULL, y + n, (int)M, nn, K,
                     N);
            }
        }
        return;
    }
    const int64_t tiles = (N + 3) / 4;
    int64_t mb = (256 * 1024) / (2 * ldq);
    mb = mb < MR ? MR : mb - mb % MR;
    for (int64_t b0 = 0; b0 < M; b0 += mb) {
        const int64_t b1 = M - b0 < mb ? M : b0 + mb;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t n0 = t * 4;
            const int nn = (int)(N - n0 < 4 ? N - n0 : 4);
            for (int64_t m0 = b0; m0 < b1; m0 += MR)
                rows(q + m0 * ldq, ldq, xs + m0 * xs_ld, w + n0 * K, sw + n0,
                     bias ? bias + n0 : NULL, y + m0 * N + n0,
                     (int)(b1 - m0 < MR ? b1 - m0 : MR), nn, K, N);
        }
    }
}

/* rows already in block floating point (blockfloat_rows), per-channel scales sw [N] */
static void bw_gemm(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
                    const float *sw, const float *bias, float *y, int64_t M, int64_t N,
                    int64_t K, int nthreads) {
    z_gemm(bw_rows, q, ldq, xs, ldq / QB, w, sw, bias, y, M, N, K, nthreads);
}

/* ---- the int8 head's W8A16 (npc_w8a16_tok): int16 rows with one scale each, summed in int32
 * over the whole row by vpdpwssd; y = ((float)sum * sx[m]) * sw[n] as the AVX2 path */
static inline __attribute__((always_inline)) void
t16_step(__m512i acc[][4], const int16_t *q, int64_t ldq, const int8_t *w, int64_t K,
         int64_t k, const int mr, const int nr, const int full) {
    const __mmask32 m = full ? 0 : (((__mmask32)1 << (K - k)) - 1);
    __m512i wv[4];
    for (int j = 0; j < nr; j++)
        wv[j] = _mm512_cvtepi8_epi16(full ? _mm256_loadu_si256((const __m256i *)(w + j * K + k))
                                          : _mm256_maskz_loadu_epi8(m, w + j * K + k));
    for (int i = 0; i < mr; i++) {
        const __m512i qv = _mm512_loadu_si512(q + i * ldq + k);
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_dpwssd_epi32(acc[i][j], qv, wv[j]);
    }
}

static inline __attribute__((always_inline)) void
t16_row(const int16_t *q, int64_t ldq, const float *sx, const int8_t *w, int64_t K,
        const float *sw, float *y, int64_t ldy, const int mr, const int nr) {
    __m512i acc[MR][4];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        if ((k & 63) == 0) prefetch_next_tile(w, K, k, nr);
        t16_step(acc, q, ldq, w, K, k, mr, nr, 1);
    }
    if (k < K) t16_step(acc, q, ldq, w, K, k, mr, nr, 0);
    static const int32_t zero[4] = {0, 0, 0, 0};
    for (int i = 0; i < mr; i++) v8_store(acc[i], zero, sx + i, sw, y + i * ldy, nr);
}

#define T16_CASE(a, b) t16_row(q, ldq, xs, w, K, sw, y, N, a, b)

static void t16_rows(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
                     const float *sw, const float *bias, float *y, int mr, int nr, int64_t K,
                     int64_t N) {
    (void)bias;
    switch (mr * 16 + nr) { CASES(T16_CASE) }
}

static void t16_gemm(const int16_t *q, int64_t ldq, const int8_t *w, const float *sx,
                     const float *sw, float *y, int64_t M, int64_t N, int64_t K, int nthreads) {
    z_gemm(t16_rows, q, ldq, sx, 1, w, sw, NULL, y, M, N, K, nthreads);
}

/* ---- grouped W8A16 on a packed layout: Q8_0's one scale per 32 weights, at batch 8 ----------
 * Row-major, a per-group scale changes every 32 inputs of every output channel, so each
 * block's int32 sum is converted and scaled on its own (bf_tile: a conversion and two
 * multiplies per 32 products); that, not memory, bounded a 7B model's batch-8 step. Packed,
 * one register holds 16 output channels, one per lane: vpdpwssd multiplies a broadcast pair of
 * activations by 16 channels' weight pairs, and a block's conversion and scaling serve all 16
 * channels at once. Same products as the row-major path, summed in another order, so equal to
 * it up to fp32 rounding (tests/test_native_packed.py).
 * Layout (npc_w8a16_pack): strips of PK_C channels (the last one zero-padded); in a strip the
 * K / 32 blocks in order; in a block 16 input pairs, each as PK_C channels x 2 int8 (32
 * bytes, widened to one zmm). Scales: per strip and group, PK_C fp16 (one vcvtph2ps). */
#define PK_C 16
#define PK_MR 8 /* activation rows per pass over a strip: 8 int32 + 8 fp32 accumulators */

/* ---- w8a8-dynamic's int8 blocks on the packed layout: vpdpbusd -----------------------------
 * The pair path carries int8 activations as int16 and multiplies pairs (vpdpwssd, 32 products per
 * instruction); vpdpbusd takes quads, 64 products per instruction, from the same packed
 * weights: one vpermw turns a block's two input pairs of 16 channels (64 bytes) into 16
 * channels' four inputs each, and serves every activation row. vpdpbusd multiplies unsigned
 * by signed bytes, so activations are u = q + 128 and a block's sum loses 128 times the block's
 * weight sum, taken from the same loads (vpdpbusd against all-ones), as v8_row does. Every
 * block's int32 sum is the pair path's exactly and the fp32 epilogue is the same, so the
 * results equal the pair path's bit for bit (tests/test_native_packed.py). pk_rows (quads = 1)
 * below does both. */

/* blockint8_rows' values as u = q + 128, ldu = K bytes apart (K a whole number of blocks) */
static void blockint8_rows_u8(const float *x, int64_t M, int64_t K, uint8_t *u, float *xs) {
    const int64_t nb = K / QB;
    int16_t q[QB];
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + m * K + b * QB;
            const float s = row_scale(xb, QB, 1, 0.0f, 127.0f);
            xs[m * nb + b] = s;
            round_span(xb, QB, s, 127.0f, q, QB);
            uint8_t *ub = u + m * K + b * QB;
            for (int i = 0; i < QB; i++) ub[i] = (uint8_t)(q[i] + 128);
        }
}

/* one pass of up to PK_MR activation rows over a strip. quads = 0: rows in block floating
 * point as int16 (blockfloat_rows / blockint8_rows, lda elements apart), multiplied by pairs
 * (vpdpwssd). quads = 1: int8 blocks as u = q + 128 (blockint8_rows_u8, lda bytes apart),
 * multiplied by quads (vpdpbusd, below). Both: lda / QB block scales per row in xs. quads is a
 * constant in each use, so each is its own loop */
static inline __attribute__((always_inline)) void
pk_rows(const void *a, int64_t lda, const float *xs, const int8_t *wp, const uint16_t *sp,
        int64_t gb, const float *bias, float *y, int64_t ldy, int64_t nb, const int mr,
        const int nc, const int quads) {
    /* quads: word 2c of a quad vector is word c of the loaded bytes (channel c's pair kp),
     * word 2c + 1 is word 16 + c (its pair kp + 1) */
    static const int16_t quad_idx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                         8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const int16_t *q = (const int16_t *)a;
    const uint8_t *u = (const uint8_t *)a;
    const int64_t xsld = lda / QB;
    __m512 out[PK_MR];
    for (int i = 0; i < mr; i++) out[i] = _mm512_setzero_ps();
    const uint16_t *g = sp;
    int64_t left = gb;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *wb = wp + b * (PK_C * QB);
        for (int l = 0; l < PK_C * QB; l += 64) _mm_prefetch((const char *)(wb + PK_PF * PK_C * QB + l), _MM_HINT_T0);
        __m512i acc[PK_MR];
        for (int i = 0; i < mr; i++) acc[i] = _mm512_setzero_si512();
        if (quads) {
            const __m512i idx = _mm512_loadu_si512(quad_idx), ones = _mm512_set1_epi8(1);
            __m512i ws = _mm512_setzero_si512();
            for (int kq = 0; kq < QB / 4; kq++) {
                const __m512i wv = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(wb + kq * 64));
                ws = _mm512_dpbusd_epi32(ws, ones, wv);
                for (int i = 0; i < mr; i++) {
                    int32_t quad;
                    memcpy(&quad, u + i * lda + b * QB + kq * 4, sizeof quad);
                    acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_set1_epi32(quad), wv);
                }
            }
            const __m512i corr = _mm512_slli_epi32(ws, 7); /* 128 x the block's weight sum */
            for (int i = 0; i < mr; i++) acc[i] = _mm512_sub_epi32(acc[i], corr);
        } else {
            for (int kp = 0; kp < QB / 2; kp++) {
                const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(wb + kp * 2 * PK_C)));
                for (int i = 0; i < mr; i++) {
                    int32_t pair;
                    memcpy(&pair, q + i * lda + b * QB + kp * 2, sizeof pair);
                    acc[i] = _mm512_dpwssd_epi32(acc[i], _mm512_set1_epi32(pair), wv);
                }
            }
        }
        const __m512 sw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        if (--left == 0) {
            g += PK_C;
            left = gb;
        }
        for (int i = 0; i < mr; i++)
            out[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]),
                                     _mm512_mul_ps(sw, _mm512_set1_ps(xs[i * xsld + b])), out[i]);
    }
    const __mmask16 m = nc >= PK_C ? (__mmask16)0xffff : (__mmask16)((1u << nc) - 1);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
    for (int i = 0; i < mr; i++) _mm512_mask_storeu_ps(y + i * ldy, m, _mm512_add_ps(out[i], bv));
}

#define PK_CASE(r)                                                                            \
    case r: if (quads) pk_rows(a, lda, xs, wp, sp, gb, bias, y, ldy, nb, r, nc, 1);           \
            else pk_rows(a, lda, xs, wp, sp, gb, bias, y, ldy, nb, r, nc, 0); break;

/* span: always 1 on this build (pk_span) */
static void pk_rows_any(const void *a, int64_t lda, const float *xs, const int8_t *wp,
                        const uint16_t *sp, int64_t gb, const float *bias, float *y, int64_t ldy,
                        int64_t nb, int mr, int nc, int quads, int64_t span) {
    (void)span;
    switch (mr) { PK_CASE(1) PK_CASE(2) PK_CASE(3) PK_CASE(4) PK_CASE(5) PK_CASE(6) PK_CASE(7)
                  default: PK_CASE(PK_MR) }
}
