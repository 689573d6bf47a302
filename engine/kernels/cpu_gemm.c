/* Matrix products of decode steps for x86 CPUs with AVX2 + FMA, and for aarch64 CPUs (NEON,
 * through simd_neon.h, which gives the same floats bit for bit; W8A8 on sdot where the CPU has
 * the dot-product extension), built on first use by native.py: INT8 (W8A16 with per-channel or
 * per-group weight scales, W8A8) for quantized layers, fp32 for the engine's float layers.
 *
 * Why this exists: on AVX2 CPUs without VNNI, PyTorch's int8 kernels are slow where decode
 * spends its time (a few rows times a large weight): aten._weight_int8pack_mm streams int8
 * weights at ~10 GB/s where a GEMV gets ~16 here, and fbgemm's u8 x s8 product saturates int16
 * pair sums, so its exact use must split activations into nibbles (two GEMMs' worth of work).
 * MKL's sgemm, for its part, charges 2-16 rows 2-5x what one row costs (npc_f32 below).
 * Measured: docs/benchmarks.md, "Native AVX2 kernels". Exported: npc_w8a16,
 * npc_w8a16_grouped, npc_w8a8_f32 and npc_f32. Both int8 products multiply in integers
 * (vpmaddwd: int16 x int16 pairs summed into int32, which cannot overflow for int8 weights):
 *   - W8A16: activations as 16-bit block floating point (an int16 per value, one power-of-two
 *            scale per 32 values; see blockfloat_rows), summed in int32 per block, then one
 *            fp32 multiply-add per block;
 *   - W8A8:  int8 activations (per-token or static scale) carried in int16, summed in int32
 *            over the whole row, then one fp32 multiply by both scales.
 * Threads: one OpenMP team over output-channel tiles. The library links libgomp.so.1 by its
 * soname, so in a process that already loaded torch's copy it shares torch's runtime and the
 * calling thread's team (no second pool of spinning workers).
 */
#if defined(__aarch64__)
#include "simd_neon.h"
#else
#include <immintrin.h>
#endif
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MR 4        /* activation rows per register tile */
#define ROW_MAX_M 4 /* up to this many rows: stream one weight row at a time (decode) */
#define ROW_PF 512  /* software prefetch distance in a streamed fp32 weight row, bytes */
#define ROW_PF_I8 1024 /* the same for int8 rows: their loops spend more time per byte;
                        * 1024 ran them 5-15 % faster than 512, where fp32 ran 10-16 % slower
                        * (docs/benchmarks.md, "W8A16 activations") */
#define PF_TILES 1  /* tiled path: prefetch the tile this many tiles ahead */

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* Decode streams every weight once from DRAM. The tile's rows are read as nr interleaved
 * streams that the hardware prefetchers follow poorly (8 GB/s measured of ~26), so each cache
 * line of the next tile (the nr rows that follow) is requested while this one computes. */
static inline __attribute__((always_inline)) void
prefetch_next_tile(const void *w, int64_t row_bytes, int64_t off, const int nr) {
    for (int j = 0; j < nr; j++)
        _mm_prefetch((const char *)w + (PF_TILES * nr + j) * row_bytes + off, _MM_HINT_T0);
}

/* ---- fp32 FMA products ---------------------------------------------------------------------
 * y[m, n] = sum_k x[m, k] * w[n, k] + bias[n], bias optional. */

/* MKL's sgemm handles 2-16 rows times a big weight poorly on this class of CPU (docs/
 * benchmarks.md, "Batching on this CPU": a 16-row product of the MLP's shape ran at 54 GFLOP/s
 * where the same kernel reaches 140 at 512 rows), and decode batches live exactly there.
 * These tiles read each weight once per step at any row count up to a few dozen. */
static inline __attribute__((always_inline)) void
fma_tile(const float *x, int64_t ldx, const float *w, int64_t K, const float *bias, float *y,
         int64_t ldy, const int mr, const int nr) {
    __m256 acc[MR][4];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        if ((k & 15) == 0) prefetch_next_tile(w, K * 4, k * 4, nr);
        __m256 wv[4];
        for (int j = 0; j < nr; j++) wv[j] = _mm256_loadu_ps(w + j * K + k);
        for (int i = 0; i < mr; i++) {
            __m256 xv = _mm256_loadu_ps(x + i * ldx + k);
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float s = hsum_ps(acc[i][j]);
            for (int64_t t = k; t < K; t++) s += x[i * ldx + t] * w[j * K + t];
            y[i * ldy + j] = bias ? s + bias[j] : s;
        }
}

/* Every (mr, nr) gets its own inlined copy with constant bounds, so that the accumulators
 * live in registers. */
#define CASES(F)                                                                          \
    case 0x11: F(1, 1); break; case 0x12: F(1, 2); break; case 0x13: F(1, 3); break;      \
    case 0x14: F(1, 4); break; case 0x21: F(2, 1); break; case 0x22: F(2, 2); break;      \
    case 0x23: F(2, 3); break; case 0x24: F(2, 4); break; case 0x31: F(3, 1); break;      \
    case 0x32: F(3, 2); break; case 0x33: F(3, 3); break; case 0x34: F(3, 4); break;      \
    case 0x41: F(4, 1); break; case 0x42: F(4, 2); break; case 0x43: F(4, 3); break;      \
    case 0x44: F(4, 4); break;

#define FMA_CASE(a, b) fma_tile(x, K, w, K, bias, y, N, a, b)

static inline __attribute__((always_inline)) void
fma_rows(const float *x, const float *w, const float *bias, float *y, int mr, int nr, int64_t K,
         int64_t N) {
    switch (mr * 16 + nr) { CASES(FMA_CASE) }
}

/* Few activation rows: one weight row at a time, read front to back, so that each thread
 * streams one contiguous range (the prefetchers' best case); u independent accumulators per
 * activation row hide the FMA latency. */
static inline __attribute__((always_inline)) void
fma_row(const float *x, int64_t ldx, const float *w, int64_t K, const float *bias, float *y,
        int64_t ldy, const int mr, const int u) {
    __m256 acc[MR][4];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < u; j++) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 * u <= K; k += 8 * u) {
        for (int c = 0; c < 32 * u; c += 64) /* one prefetch per 64-byte line */
            _mm_prefetch((const char *)(w + k) + c + ROW_PF, _MM_HINT_T0);
        __m256 wv[4];
        for (int j = 0; j < u; j++) wv[j] = _mm256_loadu_ps(w + k + 8 * j);
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < u; j++)
                acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + k + 8 * j), wv[j],
                                            acc[i][j]);
    }
    for (; k + 8 <= K; k += 8) {
        __m256 wv = _mm256_loadu_ps(w + k);
        for (int i = 0; i < mr; i++)
            acc[i][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + k), wv, acc[i][0]);
    }
    for (int i = 0; i < mr; i++) {
        for (int j = 1; j < u; j++) acc[i][0] = _mm256_add_ps(acc[i][0], acc[i][j]);
        float s = hsum_ps(acc[i][0]);
        for (int64_t t = k; t < K; t++) s += x[i * ldx + t] * w[t];
        y[i * ldy] = bias ? s + *bias : s;
    }
}

static inline __attribute__((always_inline)) void
fma_rows_one(const float *x, const float *w, const float *bias, float *y, int mr, int64_t K,
             int64_t N) {
    switch (mr) {
    case 1: fma_row(x, K, w, K, bias, y, N, 1, 4); break;
    case 2: fma_row(x, K, w, K, bias, y, N, 2, 4); break;
    case 3: fma_row(x, K, w, K, bias, y, N, 3, 2); break;
    default: fma_row(x, K, w, K, bias, y, N, 4, 2); break;
    }
}

/* ---- Scheduling shared by all products ------------------------------------------------ */

/* One product's operands: fp32 rows x (F32) or int16 rows q (W8A8, W8A16), ldx apart. */
typedef struct {
    const float *x;
    const int16_t *q;
    int64_t ldx;
    const int8_t *w;
    const float *sx;        /* W8A8: per-row scales; W8A16: block scales, ldx / QB per row */
    const float *sw;        /* int8: per-output-channel weight scales, or W8A16 per-group ones */
    const float *wf, *bias; /* fp32 product: weights; optional bias (F32, W8A16) */
    float *y;
    int64_t M, N, K;
    int64_t gb, ng; /* W8A16 per-group scales: activation blocks per group, groups per weight
                     * row (sw is [N, ng]); gb 0: one scale per output channel */
    const int8_t *q8; /* W8A8 on sdot: int8 rows, ldx apart */
} gemm_t;

typedef void (*stream_fn)(const gemm_t *g, int64_t n0, int64_t n1);
typedef void (*tile_fn)(const gemm_t *g, int64_t m0, int mm, int64_t n0, int nn);

/* Up to ROW_MAX_M rows (decode): every thread streams one contiguous range of weight rows.
 * More rows: nr-wide tiles, with the activation rows in blocks that stay in L2 while every
 * weight tile streams past them. */
static void run(const gemm_t *g, stream_fn stream, tile_fn tile, int nr, int64_t row_bytes,
                int nthreads) {
    const int64_t M = g->M, N = g->N;
    if (M <= ROW_MAX_M) {
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
            stream(g, N * t / nt, N * (t + 1) / nt);
        }
        return;
    }
    const int64_t tiles = (N + nr - 1) / nr;
    int64_t mb = (256 * 1024) / row_bytes;
    mb = mb < MR ? MR : mb - mb % MR;
    for (int64_t b0 = 0; b0 < M; b0 += mb) {
        const int64_t b1 = M - b0 < mb ? M : b0 + mb;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t n0 = t * nr;
            const int nn = (int)(N - n0 < nr ? N - n0 : nr);
            for (int64_t m0 = b0; m0 < b1; m0 += MR)
                tile(g, m0, (int)(b1 - m0 < MR ? b1 - m0 : MR), n0, nn);
        }
    }
}

static void f32_stream(const gemm_t *g, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++)
        fma_rows_one(g->x, g->wf + n * g->K, g->bias ? g->bias + n : NULL, g->y + n, (int)g->M,
                     g->K, g->N);
}

static void f32_tile_at(const gemm_t *g, int64_t m0, int mm, int64_t n0, int nn) {
    fma_rows(g->x + m0 * g->ldx, g->wf + n0 * g->K, g->bias ? g->bias + n0 : NULL,
             g->y + m0 * g->N + n0, mm, nn, g->K, g->N);
}

void npc_f32(const float *x, const float *w, const float *bias, float *y, int64_t M, int64_t N,
             int64_t K, int nthreads) {
    /* 4 x 3 tiles: 12 accumulators, 3 weight rows, 1 activation row */
    const gemm_t g = {x, NULL, K, NULL, NULL, NULL, w, bias, y, M, N, K};
    run(&g, f32_stream, f32_tile_at, 3, 4 * K, nthreads);
}

/* ---- W8A8: activations to int16 rows, then y[m, n] = sx[m] * sw[n] * sum_k q[m,k] w[n,k] -- */

/* Symmetric quantization of fp32 rows to integers of at most qmax (127: int8, as
 * engine.kernels.qmath does it; 16383: the int8 head's int16 rows): per-row scale
 * max|x| / qmax (at least 1e-8) when per_token, else the given scale; round half to even
 * (nearbyintf in the default rounding mode), clamp to +-qmax. Rows are stored as int16 with
 * ldq >= K; the padding is zero. */
static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Vectorized, with the scalar loop's exact results: max is order-free, and each value is
 * divided (not multiplied by a reciprocal) and rounded half to even as the scalar tail does.
 * A scalar version of this was a tenth of a W8A8 pass at 8 rows. */
/* A row's scale: max|x| / qmax (at least 1e-8) when per_token, else the static one */
static inline float row_scale(const float *xr, int64_t K, int per_token, float static_scale,
                              float qmax) {
    if (!per_token) return static_scale;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vmax = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)  /* a NaN input is skipped, as fmaxf skips it */
        vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xr + k)), vmax);
    float amax = hmax_ps(vmax);
    for (; k < K; k++) amax = fmaxf(amax, fabsf(xr[k]));
    const float s = amax / qmax;
    return s < 1e-8f ? 1e-8f : s;
}

/* round-half-even(x / s) clamped to +-qmax, for 8 values (vs = s, hi = qmax, lo = -qmax) and
 * for one */
static inline __m256i round_clamp8(const float *x, __m256 vs, __m256 lo, __m256 hi) {
    const __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x), vs),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
}

static inline int round_clamp1(float x, float s, float qmax) {
    const float v = nearbyintf(x / s);
    return (int)(v > qmax ? qmax : (v < -qmax ? -qmax : v));
}

/* q[0..n) = round-half-even(x / s) clamped to +-qmax, as int16; q[n..pad) = 0 */
static inline void round_span(const float *x, int64_t n, float s, float qmax, int16_t *q,
                              int64_t pad) {
    const __m256 hi = _mm256_set1_ps(qmax), lo = _mm256_set1_ps(-qmax), vs = _mm256_set1_ps(s);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m256i i = round_clamp8(x + k, vs, lo, hi);
        _mm_storeu_si128((__m128i *)(q + k), _mm_packs_epi32(_mm256_castsi256_si128(i),
                                                             _mm256_extracti128_si256(i, 1)));
    }
    for (; k < n; k++) q[k] = (int16_t)round_clamp1(x[k], s, qmax);
    for (; k < pad; k++) q[k] = 0;
}

static void quantize_rows_to(const float *x, int64_t M, int64_t K, int per_token,
                             float static_scale, float qmax, int16_t *q, int64_t ldq,
                             float *sx) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        const float s = row_scale(xr, K, per_token, static_scale, qmax);
        sx[m] = s;
        round_span(xr, K, s, qmax, q + m * ldq, ldq);
    }
}

/* int8 activations (W8A8), carried as int16 */
static void quantize_rows(const float *x, int64_t M, int64_t K, int per_token,
                          float static_scale, int16_t *q, int64_t ldq, float *sx) {
    quantize_rows_to(x, M, K, per_token, static_scale, 127.0f, q, ldq, sx);
}

static inline __attribute__((always_inline)) void
i8_tile(const int16_t *q, int64_t ldq, const int8_t *w, int64_t K, const float *sx,
        const float *sw, float *y, int64_t ldy, const int mr, const int nr) {
    __m256i acc[MR][4];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        if ((k & 63) == 0) prefetch_next_tile(w, K, k, nr);
        __m256i wv[4];
        for (int j = 0; j < nr; j++)
            wv[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + j * K + k)));
        for (int i = 0; i < mr; i++) {
            __m256i qv = _mm256_loadu_si256((const __m256i *)(q + i * ldq + k));
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(qv, wv[j]));
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            int32_t s = hsum_epi32(acc[i][j]);
            for (int64_t t = k; t < K; t++) s += (int32_t)q[i * ldq + t] * (int32_t)w[j * K + t];
            y[i * ldy + j] = (float)s * sx[i] * sw[j];
        }
}

#define I8_CASE(a, b) i8_tile(q, ldq, w, K, sx, sw, y, N, a, b)

static void i8_rows(const int16_t *q, int64_t ldq, const int8_t *w, const float *sx,
                    const float *sw, float *y, int mr, int nr, int64_t K, int64_t N) {
    switch (mr * 16 + nr) { CASES(I8_CASE) }
}

static inline __attribute__((always_inline)) void
i8_row(const int16_t *q, int64_t ldq, const int8_t *w, int64_t K, const float *sx, float sw,
       float *y, int64_t ldy, const int mr, const int u) {
    __m256i acc[MR][4];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < u; j++) acc[i][j] = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 16 * u <= K; k += 16 * u) {
        _mm_prefetch((const char *)(w + k + ROW_PF_I8), _MM_HINT_T0);
        __m256i wv[4];
        for (int j = 0; j < u; j++)
            wv[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + k + 16 * j)));
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < u; j++)
                acc[i][j] = _mm256_add_epi32(
                    acc[i][j],
                    _mm256_madd_epi16(
                        _mm256_loadu_si256((const __m256i *)(q + i * ldq + k + 16 * j)), wv[j]));
    }
    for (; k + 16 <= K; k += 16) {
        __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + k)));
        for (int i = 0; i < mr; i++)
            acc[i][0] = _mm256_add_epi32(
                acc[i][0],
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(q + i * ldq + k)), wv));
    }
    for (int i = 0; i < mr; i++) {
        for (int j = 1; j < u; j++) acc[i][0] = _mm256_add_epi32(acc[i][0], acc[i][j]);
        int32_t s = hsum_epi32(acc[i][0]);
        for (int64_t t = k; t < K; t++) s += (int32_t)q[i * ldq + t] * (int32_t)w[t];
        y[i * ldy] = (float)s * sx[i] * sw;
    }
}

static void i8_rows_one(const int16_t *q, int64_t ldq, const int8_t *w, const float *sx,
                        float sw, float *y, int mr, int64_t K, int64_t N) {
    switch (mr) {
    case 1: i8_row(q, ldq, w, K, sx, sw, y, N, 1, 4); break;
    case 2: i8_row(q, ldq, w, K, sx, sw, y, N, 2, 4); break;
    case 3: i8_row(q, ldq, w, K, sx, sw, y, N, 3, 2); break;
    default: i8_row(q, ldq, w, K, sx, sw, y, N, 4, 2); break;
    }
}

static void i8_stream(const gemm_t *g, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++)
        i8_rows_one(g->q, g->ldx, g->w + n * g->K, g->sx, g->sw[n], g->y + n, (int)g->M, g->K,
                    g->N);
}

static void i8_tile_at(const gemm_t *g, int64_t m0, int mm, int64_t n0, int nn) {
    i8_rows(g->q + m0 * g->ldx, g->ldx, g->w + n0 * g->K, g->sx + m0, g->sw + n0,
            g->y + m0 * g->N + n0, mm, nn, g->K, g->N);
}

/* ---- W8A16: int8 weights x 16-bit block floating point activations -----------------------
 * y[m, n] = sw[n] * sum_b xs[m, b] * (sum_{k in block b} q[m, k] w[n, k]) + bias[n]
 * or, with per-group weight scales (groups of a whole number of blocks, sw [N, K / group]),
 * y[m, n] = sum_b xs[m, b] * sw[n, group of b] * (sum_{k in block b} ...) + bias[n]:
 * the block loop already multiplies once per block, so a group costs one more multiply there.
 *
 * Why not fp32 activations: widening each int8 weight to fp32 took three vector ops per 8
 * weights, so that loop streamed ~13 GB/s per core, less than memory gives each of two cores;
 * the integer loop does half the work per weight (docs/benchmarks.md, "W8A16 activations").
 * 16-bit activations are what W8A16 means; in this format each value keeps 15 bits relative
 * to its block's largest (error at most 2^-15 of that), finer than fp16's 11 bits or bf16's 8
 * (PyTorch's own W8A16 CPU kernel takes bf16), and far below the int8 weights' error. */
#define QB 32 /* activation values per block scale */

static inline int64_t blockfloat_ld(int64_t K) { return (K + QB - 1) / QB * QB; }

/* frexpf's exponent and ldexpf(1, k) from the bits, for normal floats and results (a block's
 * largest is >= 2^-110 and finite here, so e - 15 and 15 - e stay within [-126, 127]): the same
 * values without two libm calls per block through the PLT (about 0.5 % of a batch-16 step). */
static inline int frexp_exponent(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (int)((u >> 23) & 0xff) - 126;
}

static inline float pow2f(int k) {
    const uint32_t u = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Each span of `span` blocks of QB values of a row (the last one cut at K) gets the scale
 * 2^(e-15), e the exponent that puts the span's largest magnitude in [2^(e-1), 2^e), so that
 * it lands in [2^14, 2^15); each value becomes round-half-even(x / scale), exact but for that
 * rounding (the scale is a power of two). Rows are int16 with ldq = blockfloat_ld(K) >= K, the
 * padding zero, and ldq / QB scales each in xs, one per block (a span's blocks repeat its
 * scale, so any reader of per-block scales reads these rows right). A span with a NaN or an
 * infinity gets scale NaN (and zeros), so that its outputs are NaN as the float product's
 * would be; a span below 2^-110 (no finite 1 / scale) is zero. span > 1 lets a packed product
 * sum a span's blocks in int32 and scale them once (pk_span): the int16 values then carry 15
 * bits of the span's largest, not each block's. Inlined so that each caller's constant span
 * gives loops of known length: a span read at run time made the rows' conversion slow enough
 * to cost a VNNI build's packed product 4-11 % (bench_packed_ab.py). */
static inline __attribute__((always_inline)) void
blockfloat_span_rows(const float *x, int64_t M, int64_t K, int16_t *q, int64_t ldq, float *xs,
                     const int64_t span) {
    const __m256 sign = _mm256_set1_ps(-0.0f), hi = _mm256_set1_ps(32767.0f),
                 lo = _mm256_set1_ps(-32767.0f);
    const int64_t nb = ldq / QB;
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        for (int64_t b0 = 0; b0 < nb; b0 += span) {
            const int64_t blocks = nb - b0 < span ? nb - b0 : span, w = blocks * QB;
            const float *xb = xr + b0 * QB;
            int16_t *qb = q + m * ldq + b0 * QB;
            const int64_t n = K - b0 * QB < w ? K - b0 * QB : w; /* values present */
            float amax = 0.0f, sc;
            int bad = 0;
            if (n == w) {
                __m256 vmax = _mm256_setzero_ps(), vnan = _mm256_setzero_ps();
                for (int64_t i = 0; i < w; i += 8) {
                    const __m256 v = _mm256_loadu_ps(xb + i);
                    vmax = _mm256_max_ps(_mm256_andnot_ps(sign, v), vmax);
                    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                }
                amax = hmax_ps(vmax);
                bad = _mm256_movemask_ps(vnan) != 0;
            } else {
                for (int64_t i = 0; i < n; i++) {
                    bad |= isnan(xb[i]);
                    amax = fmaxf(amax, fabsf(xb[i]));
                }
            }
            bad |= isinf(amax);
            if (bad || amax < 0x1p-110f) {
                for (int64_t i = 0; i < w; i++) qb[i] = 0;
                sc = bad ? NAN : 0.0f;
            } else {
                const int e = frexp_exponent(amax);
                const float inv = pow2f(15 - e);
                sc = pow2f(e - 15);
                if (n == w) {
                    const __m256 vi = _mm256_set1_ps(inv);
                    for (int64_t i = 0; i < w; i += 8) {
                        const __m256 v =
                            _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i), vi),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                        const __m256i iv =
                            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
                        _mm_storeu_si128((__m128i *)(qb + i),
                                         _mm_packs_epi32(_mm256_castsi256_si128(iv),
                                                         _mm256_extracti128_si256(iv, 1)));
                    }
                } else {
                    for (int64_t i = 0; i < w; i++) {
                        const float v = i < n ? nearbyintf(xb[i] * inv) : 0.0f;
                        qb[i] = (int16_t)(v > 32767.0f ? 32767.0f : (v < -32767.0f ? -32767.0f : v));
                    }
                }
            }
            for (int64_t b = 0; b < blocks; b++) xs[m * nb + b0 + b] = sc;
        }
    }
}

/* blockfloat_span_rows with a scale for each block */
static void blockfloat_rows(const float *x, int64_t M, int64_t K, int16_t *q, int64_t ldq,
                            float *xs) {
    blockfloat_span_rows(x, M, K, q, ldq, xs, 1);
}

/* W8A8 with one activation scale per block of QB values, as llama.cpp's Q8_0 quantizes its
 * activations: a block's scale is max|x| / 127 (at least 1e-8), each value
 * round-half-even(x / scale) clamped to +-127 (row_scale / round_clamp8, the per-token rule
 * applied to each block). The int8 values are carried as int16 in blockfloat_rows' layout, so
 * the W8A16 block products (bf_row, and bw_row on VNNI) compute the layer: an outlier channel
 * then coarsens only its own block of 32, not its whole row. */
static void blockint8_rows(const float *x, int64_t M, int64_t K, int16_t *q, int64_t ldq,
                           float *xs) {
    const int64_t nb = ldq / QB;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + m * K + b * QB;
            int16_t *qb = q + m * ldq + b * QB;
            const int64_t n = K - b * QB < QB ? K - b * QB : QB;
            const float s = row_scale(xb, n, 1, 0.0f, 127.0f);
            xs[m * nb + b] = s;
            round_span(xb, n, s, 127.0f, qb, QB);
        }
    }
}

static inline __attribute__((always_inline)) __m256i widen16(const int8_t *w) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w));
}

/* int32 partial sums of one block: 32 int16 activations times 32 widened int8 weights (each
 * lane at most 4 * 32767 * 127) */
static inline __attribute__((always_inline)) __m256i block_dot(const int16_t *q, __m256i w0,
                                                               __m256i w1) {
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)q), w0),
                            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(q + 16)), w1));
}

/* the last, partial block of a row (the weight row ends at K, unpadded) */
static float blockfloat_tail(const int16_t *q, const int8_t *w, int64_t k, int64_t K,
                             float scale) {
    int32_t t = 0;
    for (; k < K; k++) t += (int32_t)q[k] * (int32_t)w[k];
    return (float)t * scale;
}

/* Per-group weight scales, walked block by block along a weight row without a division:
 * the scale of the current block, then on to the next block (gs: this group's scale, left:
 * blocks left in it). */
static inline __attribute__((always_inline)) float next_group_scale(const float **gs,
                                                                     int64_t *left, int64_t gb) {
    const float s = **gs;
    if (--*left == 0) {
        ++*gs;
        *left = gb;
    }
    return s;
}

/* Few activation rows: one weight row at a time, front to back (see fma_row); two blocks per
 * pass, into alternating accumulators. G, a constant in each inlined copy, says how the row's
 * weight is scaled: 0, by its one scale sw, once at the end; else by per-group scales gs, gb
 * blocks per group: G = gb for groups of 1, 2 or 4 blocks (32, 64, 128 values), G = -1 for
 * any other gb. With G = 1 each block's group scale multiplies its activation scale; with
 * G = 2 or 4 a pass's two blocks share one group, whose scale multiplies their sum once;
 * G = -1 walks the groups block by block (next_group_scale). */
static inline __attribute__((always_inline)) void
bf_row(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w, int64_t K, float sw,
       const float *gs, int64_t gb, const float *bias, float *y, int64_t ldy, const int mr,
       const int G) {
    const int64_t nb = ldq / QB;
    int64_t left = gb;
    __m256 acc[MR][2];
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 2 * QB <= K; k += 2 * QB) {
        _mm_prefetch((const char *)(w + k + ROW_PF_I8), _MM_HINT_T0);
        const __m256i w0 = widen16(w + k), w1 = widen16(w + k + 16), w2 = widen16(w + k + 32),
                      w3 = widen16(w + k + 48);
        const int64_t b = k / QB; /* even: with G = 2 or 4 both blocks are in one group */
        __m256 g0 = _mm256_setzero_ps(), g1 = g0;
        if (G == 1) {
            g0 = _mm256_broadcast_ss(gs + b);
            g1 = _mm256_broadcast_ss(gs + b + 1);
        } else if (G > 1) {
            g0 = _mm256_broadcast_ss(gs + b / G);
        } else if (G < 0) {
            g0 = _mm256_set1_ps(next_group_scale(&gs, &left, gb));
            g1 = _mm256_set1_ps(next_group_scale(&gs, &left, gb));
        }
        for (int i = 0; i < mr; i++) {
            const int16_t *qi = q + i * ldq + k;
            const float *si = xs + i * nb + b;
            const __m256 d0 = _mm256_cvtepi32_ps(block_dot(qi, w0, w1)),
                         d1 = _mm256_cvtepi32_ps(block_dot(qi + QB, w2, w3));
            if (G > 1) {
                const __m256 t = _mm256_fmadd_ps(
                    d1, _mm256_broadcast_ss(si + 1), _mm256_mul_ps(d0, _mm256_broadcast_ss(si)));
                acc[i][0] = _mm256_fmadd_ps(t, g0, acc[i][0]);
            } else {
                __m256 s0 = _mm256_broadcast_ss(si), s1 = _mm256_broadcast_ss(si + 1);
                if (G != 0) {
                    s0 = _mm256_mul_ps(s0, g0);
                    s1 = _mm256_mul_ps(s1, g1);
                }
                acc[i][0] = _mm256_fmadd_ps(d0, s0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(d1, s1, acc[i][1]);
            }
        }
    }
    if (k + QB <= K) {
        const __m256i w0 = widen16(w + k), w1 = widen16(w + k + 16);
        float g = 1.0f;
        if (G > 0) g = gs[k / QB / G];
        else if (G < 0) g = next_group_scale(&gs, &left, gb);
        for (int i = 0; i < mr; i++)
            acc[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(q + i * ldq + k, w0, w1)),
                                        _mm256_set1_ps(xs[i * nb + k / QB] * g), acc[i][0]);
        k += QB;
    }
    float gt = 1.0f; /* the partial last block's group */
    if (k < K && G != 0) gt = G > 0 ? gs[k / QB / G] : *gs;
    for (int i = 0; i < mr; i++) {
        float s = hsum_ps(_mm256_add_ps(acc[i][0], acc[i][1]));
        if (k < K) s += blockfloat_tail(q + i * ldq, w, k, K, xs[i * nb + k / QB] * gt);
        if (G == 0) s *= sw;
        y[i * ldy] = bias ? s + *bias : s;
    }
}

#define BF_ROW_CASES(G)                                                                       \
    switch (mr) {                                                                             \
    case 1: bf_row(q, ldq, xs, w, K, sw, gs, gb, bias, y, N, 1, G); break;                    \
    case 2: bf_row(q, ldq, xs, w, K, sw, gs, gb, bias, y, N, 2, G); break;                    \
    case 3: bf_row(q, ldq, xs, w, K, sw, gs, gb, bias, y, N, 3, G); break;                    \
    default: bf_row(q, ldq, xs, w, K, sw, gs, gb, bias, y, N, 4, G); break;                   \
    }

/* gs NULL: per-channel scale sw; else the row's group scales, gb blocks per group */
static void bf_rows_one(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
                        float sw, const float *gs, int64_t gb, const float *bias, float *y,
                        int mr, int64_t K, int64_t N) {
    if (!gs) {
        BF_ROW_CASES(0)
    } else if (gb == 1) {
        BF_ROW_CASES(1)
    } else if (gb == 2) {
        BF_ROW_CASES(2)
    } else if (gb == 4) {
        BF_ROW_CASES(4)
    } else {
        BF_ROW_CASES(-1)
    }
}

/* More rows: mr x nr tiles, one block at a time (8 accumulators, 4 widened weight halves, 2
 * activation halves and a scale fill the 16 ymm registers at 4 x 2). grouped: gs holds the
 * tile's rows of per-group scales (ng apart, gb blocks per group), in place of sw. */
static inline __attribute__((always_inline)) void
bf_tile(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w, int64_t K,
        const float *sw, const float *gs, int64_t gb, int64_t ng, const float *bias, float *y,
        int64_t ldy, const int mr, const int nr, const int grouped) {
    const int64_t nb = ldq / QB;
    int64_t left = gb;
    __m256 acc[MR][2];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + QB <= K; k += QB) {
        if ((k & 63) == 0) prefetch_next_tile(w, K, k, nr);
        __m256i wv[2][2];
        for (int j = 0; j < nr; j++) {
            wv[j][0] = widen16(w + j * K + k);
            wv[j][1] = widen16(w + j * K + k + 16);
        }
        const float *gk = gs; /* this block's group, in the tile's first row of scales */
        if (grouped) next_group_scale(&gs, &left, gb);
        for (int i = 0; i < mr; i++) {
            const int16_t *qi = q + i * ldq + k;
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)qi),
                          q1 = _mm256_loadu_si256((const __m256i *)(qi + 16));
            const __m256 si = _mm256_broadcast_ss(xs + i * nb + k / QB);
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(q0, wv[j][0]),
                                                        _mm256_madd_epi16(q1, wv[j][1]))),
                    grouped ? _mm256_mul_ps(si, _mm256_broadcast_ss(gk + j * ng)) : si,
                    acc[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float s = hsum_ps(acc[i][j]);
            if (k < K)
                s += blockfloat_tail(q + i * ldq, w + j * K, k, K,
                                     xs[i * nb + k / QB] * (grouped ? gs[j * ng] : 1.0f));
            if (!grouped) s *= sw[j];
            y[i * ldy + j] = bias ? s + bias[j] : s;
        }
}

#define BF_CASE(a, b) bf_tile(q, ldq, xs, w, K, sw, gs, gb, ng, bias, y, N, a, b, G)
#define BF_TILE_CASES                                                                         \
    switch (mr * 16 + nr) {                                                                   \
    case 0x11: BF_CASE(1, 1); break; case 0x12: BF_CASE(1, 2); break;                         \
    case 0x21: BF_CASE(2, 1); break; case 0x22: BF_CASE(2, 2); break;                         \
    case 0x31: BF_CASE(3, 1); break; case 0x32: BF_CASE(3, 2); break;                         \
    case 0x41: BF_CASE(4, 1); break; case 0x42: BF_CASE(4, 2); break;                         \
    }

/* gs NULL: per-channel scales sw; else per-group ones (see bf_tile) */
static void bf_rows(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
                    const float *sw, const float *gs, int64_t gb, int64_t ng,
                    const float *bias, float *y, int mr, int nr, int64_t K, int64_t N) {
    if (gs) {
        enum { G = 1 };
        BF_TILE_CASES
    } else {
        enum { G = 0 };
        BF_TILE_CASES
    }
}

static void w8a16_stream(const gemm_t *g, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++)
        bf_rows_one(g->q, g->ldx, g->sx, g->w + n * g->K, g->gb ? 1.0f : g->sw[n],
                    g->gb ? g->sw + n * g->ng : NULL, g->gb, g->bias ? g->bias + n : NULL,
                    g->y + n, (int)g->M, g->K, g->N);
}

static void w8a16_tile_at(const gemm_t *g, int64_t m0, int mm, int64_t n0, int nn) {
    bf_rows(g->q + m0 * g->ldx, g->ldx, g->sx + m0 * (g->ldx / QB), g->w + n0 * g->K,
            g->sw + n0, g->gb ? g->sw + n0 * g->ng : NULL, g->gb, g->ng,
            g->bias ? g->bias + n0 : NULL, g->y + m0 * g->N + n0, mm, nn, g->K, g->N);
}

/* Whether W8A16 weight scales per group of `group` inputs fit these kernels: groups of whole
 * activation blocks that tile the row (0: one scale per output channel). */
static int w8a16_group_ok(int64_t group, int64_t K) {
    return group == 0 || (group > 0 && group % QB == 0 && K % group == 0);
}

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define NPC_SDOT 1
#include "cpu_i8_sdot.c"
#else
#define NPC_SDOT 0
#endif

/* The packed products (cpu_i8_vnni.c, cpu_pk_avx2.c): how many blocks ahead the first pass
 * over a strip asks for its weights. They come from memory once a step, and 2 blocks (1 KiB)
 * was less than a DRAM read takes to arrive; 6-16 measured alike, 4-15 % faster than 2 on
 * Llama-2-7B's cold shape, the same on shapes the cache holds (docs/benchmarks.md,
 * "Prefetching the packed weights further ahead") */
#define PK_PF 8
/* blocks per activation scale in an AVX2 build's packed W8A16 rows, where weight groups allow
 * (pk_span below) */
#define PK_SPAN 4

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define NPC_VNNI 1
#include "cpu_i8_vnni.c"
#else
#define NPC_VNNI 0
#endif

/* the packed W8A16 layout's product (npc_w8a16_pack): cpu_i8_vnni.c on VNNI builds, with pairs
 * and, for w8a8-dynamic's int8 blocks, quads; cpu_pk_avx2.c, pairs only, on other x86 builds */
#if NPC_VNNI
#define NPC_PACKED 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define NPC_PACKED 1
#include "cpu_pk_avx2.c"
#else
#define NPC_PACKED 0
#endif

#if NPC_PACKED
/* Activation rows to the blocks a packed product reads, one row at a time (pk_quant_row):
 * x [M, K] fp32 -> q and their block scales xs, as blockfloat_rows (kind PK_Q_FLOAT),
 * blockint8_rows (PK_Q_INT8) or, on VNNI builds, blockint8_rows_u8 (PK_Q_U8; ldq = K bytes) */
enum { PK_Q_FLOAT = 0, PK_Q_INT8 = 1, PK_Q_U8 = 2 };
typedef struct {
    const float *x;
    int64_t K, ldq;
    void *q;
    float *xs;
    int kind;
    int64_t span; /* PK_Q_FLOAT: blocks per scale (blockfloat_span_rows; pk_span) */
} pk_quant_t;

/* Blocks per activation scale in the W8A16 rows of a packed product whose weight scales change
 * every gb of its nb blocks. On AVX2 builds PK_SPAN where a span never straddles two weight
 * groups, so that cpu_pk_avx2.c sums a span's blocks in int32 and scales them once: that
 * epilogue (a conversion and a multiply-add per row and 8 channels, with the sums' load and
 * store) was about one op in eight of the product, and spans ran it 3-10 % faster at 4-16 rows
 * (docs/benchmarks.md, "Activation scales per 128 on AVX2"). A span of 4 blocks sums at most
 * 128 * 32767 * 127 < 2^31. Per-channel scales (gb = nb, SmolLM2's w8a16) span; Q8_0's and
 * the head's groups of 32 do not. VNNI builds keep a scale per block: there a span makes each
 * row's sums one chain of vpdpwssd (5 cycles each), and 1-2 rows ran 1-6 % slower. */
static inline int64_t pk_span(int64_t gb, int64_t nb) {
    return !NPC_VNNI && (gb == nb || gb % PK_SPAN == 0) ? PK_SPAN : 1;
}

static void pk_quant_row(const pk_quant_t *c, int64_t m) {
    const float *x = c->x + m * c->K;
#if NPC_VNNI
    if (c->kind == PK_Q_U8) {
        blockint8_rows_u8(x, 1, c->K, (uint8_t *)c->q + m * c->ldq, c->xs + m * (c->ldq / QB));
        return;
    }
#endif
    if (c->kind == PK_Q_INT8)
        blockint8_rows(x, 1, c->K, (int16_t *)c->q + m * c->ldq, c->ldq, c->xs + m * (c->ldq / QB));
    else if (c->span == PK_SPAN) /* the two spans pk_span gives, each with its loops' lengths */
        blockfloat_span_rows(x, 1, c->K, (int16_t *)c->q + m * c->ldq, c->ldq,
                             c->xs + m * (c->ldq / QB), PK_SPAN);
    else
        blockfloat_rows(x, 1, c->K, (int16_t *)c->q + m * c->ldq, c->ldq, c->xs + m * (c->ldq / QB));
}

/* Work on the activation rows before a packed product, shared out by rows among the product's
 * own threads: row(ctx, m) prepares row m (a decode layer's norm, residual add, SiLU, and the
 * rows' conversion to blocks), and after one barrier the same threads multiply. Done by the
 * calling thread alone before the product, that work kept the other thread waiting: 2-5 % of a
 * decode step at batch 8-16 (docs/benchmarks.md, "The rows' work shared by the threads"). */
typedef struct {
    void (*row)(const void *ctx, int64_t m);
    const void *ctx;
} pk_pre_t;

static void pk_quant_rows_pre(const void *ctx, int64_t m) {
    pk_quant_row((const pk_quant_t *)ctx, m);
}

/* One packed product of a layer's input: N channels' packed weight wp with fp16 scales sp per
 * group of gb blocks, bias (or NULL), into y [M, N] */
typedef struct {
    const int8_t *wp;
    const uint16_t *sp;
    const float *bias;
    float *y;
    int64_t N, gb;
} pk_seg_t;

/* M activation rows times the packed weights of nseg products that read them (a layer's q, k
 * and v, or gate and up), K = nb * QB inputs: int16 rows (blockfloat_rows, lda >= K elements
 * apart) by pairs, or, on VNNI builds, with quads u8 rows (blockint8_rows_u8, lda = K bytes
 * apart). Passes of PK_MR rows over a strip (pk_rows_any: cpu_i8_vnni.c or cpu_pk_avx2.c);
 * the rows go in chunks that stay in L2 while every strip passes over them (one chunk for a
 * decode step). The products run in one parallel region, each split among the threads as
 * on its own but with no barrier between them: a region per product made the threads wait for
 * each other at its end (docs/benchmarks.md, "q, k, v and gate, up in one region"). One loop
 * over all their strips measured slower on VNNI's quads at one row. pre (or NULL) prepares the
 * rows first, in the same region. span: blocks the rows share a scale over (pk_span, 1 for int8
 * blocks), for every product (each seg's gb allowing it). */
static void pk_gemm_segs(const void *a, int64_t lda, const float *xs, const pk_seg_t *seg,
                         int nseg, int64_t M, int64_t K, int nthreads, int quads, int64_t span,
                         const pk_pre_t *pre) {
    const int64_t nb = K / QB, xsld = lda / QB;
    const int64_t row_bytes = quads ? lda : 2 * lda;
    int64_t mb = (256 * 1024) / row_bytes;
    mb = mb < PK_MR ? PK_MR : mb - mb % PK_MR;
    if (pre && M == 1) { /* one row cannot be shared: in the region it would only add a barrier */
        pre->row(pre->ctx, 0);
        pre = NULL;
    }
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        if (pre) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) pre->row(pre->ctx, m);
        }
        for (int64_t b0 = 0; b0 < M; b0 += mb) {
            const int64_t b1 = M - b0 < mb ? M : b0 + mb;
            for (int i = 0; i < nseg; i++) {
                const pk_seg_t *g = seg + i;
                const int64_t N = g->N, ng = nb / g->gb, S = (N + PK_C - 1) / PK_C;
                /* no barrier between the products, or between chunks of rows: they write
                 * apart, and the rows were prepared before the barrier above */
#pragma omp for schedule(static) nowait
                for (int64_t s = 0; s < S; s++) {
                    const int nc = (int)(N - s * PK_C < PK_C ? N - s * PK_C : PK_C);
                    for (int64_t m0 = b0; m0 < b1; m0 += PK_MR)
                        pk_rows_any((const char *)a + m0 * row_bytes, lda, xs + m0 * xsld,
                                    g->wp + s * nb * PK_C * QB, g->sp + s * ng * PK_C, g->gb,
                                    g->bias ? g->bias + s * PK_C : NULL,
                                    g->y + m0 * N + s * PK_C, N, nb,
                                    (int)(b1 - m0 < PK_MR ? b1 - m0 : PK_MR), nc, quads, span);
                }
            }
        }
    }
}

/* one packed product (pk_gemm_segs) */
static void pk_gemm(const void *a, int64_t lda, const float *xs, const int8_t *wp,
                    const uint16_t *sp, int64_t gb, const float *bias, float *y, int64_t M,
                    int64_t N, int64_t K, int nthreads, int quads, int64_t span,
                    const pk_pre_t *pre) {
    const pk_seg_t seg = {wp, sp, bias, y, N, gb};
    pk_gemm_segs(a, lda, xs, &seg, 1, M, K, nthreads, quads, span, pre);
}
#endif

/* the product of rows already in block floating point (blockfloat_rows, ldq = blockfloat_ld);
 * group: 0 for per-channel scales sw [N], else sw is [N, K / group] (w8a16_group_ok) */
static void w8a16_rows(const int16_t *q, int64_t ldq, const float *xs, const int8_t *w,
                       const float *sw, int64_t group, const float *bias, float *y, int64_t M,
                       int64_t N, int64_t K, int nthreads) {
#if NPC_VNNI
    if (group == 0) {
        bw_gemm(q, ldq, xs, w, sw, bias, y, M, N, K, nthreads);
        return;
    }
#endif
    const gemm_t g = {NULL, q,    ldq, w, xs, sw, NULL, bias, y, M, N, K,
                      group / QB, group ? K / group : 0};
    run(&g, w8a16_stream, w8a16_tile_at, 2, 2 * ldq, nthreads);
}

typedef void (*block_rows_fn)(const float *x, int64_t M, int64_t K, int16_t *q, int64_t ldq,
                              float *xs);

/* A block-scaled layer in one call: fp32 rows to blocks (rows_fn), then the W8A16 block
 * product. Returns 0, -1 when the scratch rows cannot be allocated, -2 for a group size the
 * kernels do not take. */
static int block_layer(block_rows_fn rows_fn, const float *x, const int8_t *w,
                       const float *scale, int64_t group, float *y, int64_t M, int64_t N,
                       int64_t K, int nthreads) {
    if (!w8a16_group_ok(group, K)) return -2;
    const int64_t ldq = blockfloat_ld(K);
    int16_t *q = (int16_t *)malloc((size_t)(M * ldq + 1) * sizeof(int16_t));
    float *xs = (float *)malloc((size_t)(M * (ldq / QB) + 1) * sizeof(float));
    if (!q || !xs) {
        free(q);
        free(xs);
        return -1;
    }
    rows_fn(x, M, K, q, ldq, xs);
    w8a16_rows(q, ldq, xs, w, scale, group, NULL, y, M, N, K, nthreads);
    free(q);
    free(xs);
    return 0;
}

/* The whole W8A16 layer in one call (16-bit block floating point activations) */
int npc_w8a16_grouped(const float *x, const int8_t *w, const float *scale, int64_t group,
                      float *y, int64_t M, int64_t N, int64_t K, int nthreads) {
    return block_layer(blockfloat_rows, x, w, scale, group, y, M, N, K, nthreads);
}

/* per-channel scales (N,) */
int npc_w8a16(const float *x, const int8_t *w, const float *scale, float *y, int64_t M,
              int64_t N, int64_t K, int nthreads) {
    return npc_w8a16_grouped(x, w, scale, 0, y, M, N, K, nthreads);
}

/* The packed layout of W8A16 (pk_gemm) exists on x86 builds with AVX2 or AVX512-VNNI. */
int npc_w8a16_packs(void) { return NPC_PACKED; }

#if NPC_PACKED
/* one strip: rows [0, nr) of w (K apart) and their fp32 scales (ng apart) -> the strip's packed
 * bytes and fp16 scales (rounded to nearest), channels nr..PK_C-1 zero */
static void pack_strip(const int8_t *w, const float *scale, int nr, int64_t K, int64_t ng,
                       int8_t *wp, uint16_t *sp) {
    const int64_t nb = K / QB;
    for (int c = 0; c < PK_C; c++) {
        for (int64_t g = 0; g < ng; g++)
            sp[g * PK_C + c] = c < nr ? _cvtss_sh(scale[c * ng + g], _MM_FROUND_TO_NEAREST_INT) : 0;
        for (int64_t b = 0; b < nb; b++) {
            /* the block's 16 input pairs of channel c, 32 bytes apart */
            int8_t *dst = wp + b * PK_C * QB + 2 * c;
            const int8_t *src = w + c * K + b * QB;
            for (int kp = 0; kp < QB / 2; kp++) {
                dst[kp * 2 * PK_C] = c < nr ? src[2 * kp] : 0;
                dst[kp * 2 * PK_C + 1] = c < nr ? src[2 * kp + 1] : 0;
            }
        }
    }
}
#endif

/* w [N, K] int8 with fp32 scales [N, K / group] -> wp [ceil(N / 16) * 16 * K] and fp16 scales
 * sp [ceil(N / 16) * 16 * K / group], the packed layout above (padding channels zero). fp16
 * scales, as Q8_0 keeps them: fp32 ones were 64 of a strip-block's 576 bytes, 6 % more to read
 * than llama.cpp's Q8_0 at batch 1, where a 7B step is bound by memory (docs/benchmarks.md,
 * "fp16 scales in the packed layout"). The weight in place (wp == w) when N is a whole number of
 * strips: a strip of the packed layout takes the bytes its 16 rows took, so serving repacks a
 * loaded model without a second copy of it (a strip at a time through a small buffer); sp is
 * always its own memory. Returns -2 for a group the kernels do not take, -3 on a build without
 * the packed kernel, -4 for in place with a partial strip, -1 when a strip's buffer cannot be
 * allocated. */
int npc_w8a16_pack(const int8_t *w, const float *scale, int64_t group, int64_t N, int64_t K,
                   int8_t *wp, uint16_t *sp) {
#if NPC_PACKED
    if (group <= 0 || !w8a16_group_ok(group, K)) return -2;
    const int in_place = wp == w;
    if (in_place && N % PK_C) return -4;
    const int64_t ng = K / group, S = (N + PK_C - 1) / PK_C;
    const int nt = omp_get_max_threads();
    /* every thread's strip buffer before any strip moves: a failure leaves w as it was */
    int8_t *tw = in_place ? (int8_t *)malloc((size_t)(nt * PK_C * K)) : NULL;
    if (in_place && !tw) return -1;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t s = 0; s < S; s++) {
        const int nr = (int)(N - s * PK_C < PK_C ? N - s * PK_C : PK_C);
        const int8_t *src = w + s * PK_C * K;
        if (in_place) {
            int8_t *bw = tw + (int64_t)omp_get_thread_num() * PK_C * K;
            memcpy(bw, src, (size_t)(PK_C * K));
            src = bw;
        }
        pack_strip(src, scale + s * PK_C * ng, nr, K, ng, wp + s * PK_C * K, sp + s * PK_C * ng);
    }
    free(tw);
    return 0;
#else
    (void)w; (void)scale; (void)group; (void)N; (void)K; (void)wp; (void)sp;
    return -3;
#endif
}

/* out[i, :] = row ids[i] of a packed weight (npc_w8a16_pack: N rows of K, scales per group)
 * dequantized, each value its int8 times its scale in one fp32 multiply, as the PyTorch reader
 * of the packed copy computes it: a tied embedding's lookups, read from the packed head (the
 * dozen PyTorch ops of that reader took 0.2-0.3 ms of every decode step). Returns 0, -2 for a
 * group the layout does not take, -5 when an id is outside [0, N) (nothing is written then),
 * -3 on a build without the packed layout. */
int npc_w8a16_packed_rows(const int8_t *wp, const uint16_t *sp, int64_t group, int64_t N, int64_t K,
                          const int64_t *ids, int64_t n, float *out) {
#if NPC_PACKED
    if (group <= 0 || !w8a16_group_ok(group, K)) return -2;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= N) return -5;
    const int64_t ng = K / group;
    for (int64_t i = 0; i < n; i++) {
        const int64_t strip = ids[i] / PK_C, c = ids[i] % PK_C;
        const int8_t *w = wp + strip * PK_C * K + 2 * c;
        const uint16_t *s = sp + strip * PK_C * ng + c;
        float *o = out + i * K;
        for (int64_t b = 0; b < K / QB; b++) {
            const float sc = _cvtsh_ss(s[b * QB / group * PK_C]); /* a group is whole blocks */
            const int8_t *wb = w + b * PK_C * QB;
            /* the block's input pairs are 2 * PK_C bytes apart, channel c's two at 2c */
            for (int kp = 0; kp < QB / 2; kp++) {
                o[b * QB + 2 * kp] = (float)wb[kp * 2 * PK_C] * sc;
                o[b * QB + 2 * kp + 1] = (float)wb[kp * 2 * PK_C + 1] * sc;
            }
        }
    }
    return 0;
#else
    (void)wp; (void)sp; (void)group; (void)N; (void)K; (void)ids; (void)n; (void)out;
    return -3;
#endif
}

/* The whole layer on the packed weight (npc_w8a16_pack; group K for per-channel scales), the
 * activations as 16-bit block floating point (W8A16) or, with act_int8, int8 per block of QB
 * (w8a8-dynamic's blocks, blockint8_rows); returns as npc_w8a16_grouped, and -3 on a build
 * without the packed kernel. */
int npc_w8a16_packed(const float *x, const int8_t *wp, const uint16_t *sp, int64_t group,
                     int act_int8, float *y, int64_t M, int64_t N, int64_t K, int nthreads) {
#if NPC_PACKED
    if (group <= 0 || !w8a16_group_ok(group, K)) return -2;
    const int64_t ldq = blockfloat_ld(K);
    int16_t *q = (int16_t *)malloc((size_t)(M * ldq + 1) * sizeof(int16_t));
    float *xs = (float *)malloc((size_t)(M * (ldq / QB) + 1) * sizeof(float));
    if (!q || !xs) {
        free(q);
        free(xs);
        return -1;
    }
    /* AVX2 builds multiply int8 blocks by pairs too; 2: the pair product, to compare (tests) */
    const int quads = NPC_VNNI && act_int8 == 1;
    const int64_t span = act_int8 ? 1 : pk_span(group / QB, K / QB);
    const pk_quant_t c = {x, K, quads ? K : ldq, q, xs,
                          quads ? PK_Q_U8 : act_int8 ? PK_Q_INT8 : PK_Q_FLOAT, span};
    /* the rows' conversion to blocks shared by the product's threads (prefill: hundreds) */
    const pk_pre_t pre = {pk_quant_rows_pre, &c};
    pk_gemm(q, c.ldq, xs, wp, sp, group / QB, NULL, y, M, N, K, nthreads, quads, span, &pre);
    free(q);
    free(xs);
    return 0;
#else
    (void)x; (void)wp; (void)sp; (void)group; (void)act_int8; (void)y; (void)M; (void)N; (void)K;
    (void)nthreads;
    return -3;
#endif
}

/* Blocks of QB inputs per activation scale in npc_w8a16_packed's W8A16 rows (pk_span) for a
 * weight of K inputs with scales per group of `group` (K: per channel); 1 on builds without
 * the packed layout. */
int64_t npc_w8a16_packed_span(int64_t group, int64_t K) {
#if NPC_PACKED
    if (group <= 0 || !w8a16_group_ok(group, K)) return 1;
    return pk_span(group / QB, K / QB);
#else
    (void)group; (void)K;
    return 1;
#endif
}

/* W8A8 with int8 activations per block of QB (blockint8_rows), per-channel weight scales */
int npc_w8a8_block(const float *x, const int8_t *w, const float *scale, float *y, int64_t M,
                   int64_t N, int64_t K, int nthreads) {
    return block_layer(blockint8_rows, x, w, scale, 0, y, M, N, K, nthreads);
}

/* sum_k w[n, k] of each row of an int8 (N, K) weight (native.weight_sums), without the int32
 * copy of the whole weight that torch's sum(dtype=int32) makes */
void npc_int8_row_sums(const int8_t *w, int64_t N, int64_t K, int32_t *out) {
    for (int64_t n = 0; n < N; n++) {
        const int8_t *r = w + n * K;
        int32_t s = 0;
        for (int64_t k = 0; k < K; k++) s += r[k];
        out[n] = s;
    }
}

/* Which instructions this build's int8 products use (doctor and /v1/models name them):
 * "avx512-vnni" for W8A8 and W8A16 (grouped W8A16 on its packed layout), else "avx2"; on aarch64 "neon-dotprod" (W8A8 on
 * sdot, the rest on NEON) or "neon". */
const char *npc_int8_isa(void) {
#if defined(__aarch64__)
    return NPC_SDOT ? "neon-dotprod" : "neon";
#else
    return NPC_VNNI ? "avx512-vnni" : "avx2";
#endif
}

/* The whole W8A8 layer in one call (one crossing from Python per layer): quantize the fp32
 * rows, then the integer product. wsum: sum_k w[n, k] per weight row (int32 [N]), which the
 * VNNI product needs; NULL: it sums them itself. Returns 0, or -1 when the scratch rows cannot
 * be allocated. */
int npc_w8a8_f32(const float *x, int per_token, float static_scale, const int8_t *w,
                 const int32_t *wsum, const float *sw, float *y, int64_t M, int64_t N,
                 int64_t K, int nthreads) {
#if NPC_VNNI
    const int64_t ldu = v8_ld(K);
    uint8_t *u = (uint8_t *)malloc((size_t)(M * ldu));
    float *su = (float *)malloc((size_t)M * sizeof(float));
    if (!u || !su) {
        free(u);
        free(su);
        return -1;
    }
    quantize_rows_u8(x, M, K, per_token, static_scale, u, ldu, su);
    v8_gemm(u, ldu, w, wsum, su, sw, y, M, N, K, nthreads);
    free(u);
    free(su);
    return 0;
#elif NPC_SDOT
    (void)wsum; /* signed x signed: no correction */
    const int64_t ld8 = s8_ld(K);
    int8_t *q8 = (int8_t *)malloc((size_t)(M * ld8));
    float *s8 = (float *)malloc((size_t)M * sizeof(float));
    if (!q8 || !s8) {
        free(q8);
        free(s8);
        return -1;
    }
    quantize_rows_s8(x, M, K, per_token, static_scale, q8, ld8, s8);
    s8_gemm(q8, ld8, w, s8, sw, y, M, N, K, nthreads);
    free(q8);
    free(s8);
    return 0;
#else
    (void)wsum; /* the int16 path needs no correction */
#endif
    const int64_t ldq = (K + 15) / 16 * 16;
    int16_t *q = (int16_t *)malloc((size_t)(M * ldq) * sizeof(int16_t));
    float *sx = (float *)malloc((size_t)M * sizeof(float));
    if (!q || !sx) {
        free(q);
        free(sx);
        return -1;
    }
    quantize_rows(x, M, K, per_token, static_scale, q, ldq, sx);
    /* 4 x 3 tiles: 12 accumulators, 3 widened weight rows, 1 activation row */
    const gemm_t g = {NULL, q, ldq, w, sx, sw, NULL, NULL, y, M, N, K};
    run(&g, i8_stream, i8_tile_at, 3, 2 * ldq, nthreads);
    free(q);
    free(sx);
    return 0;
}

/* ---- The int8 head: W8A16 with one int16 scale per row -------------------------------------
 * The vocabulary head reads the final norm's output, whose largest value is ~20x a row's mean
 * on SmolLM2, not the 70x outliers of some layers' inputs that block floating point is for.
 * One scale per row, 14 bits and a sign, measured no different from fp32 activations there
 * (perplexity -0.026 % against -0.027 %, docs/quantization.md), and the whole row then sums
 * in int32 with no float work per block: the W8A8 AVX2 kernel as it is (it carries int16), or
 * on AVX512-VNNI vpdpwssd. |q| <= 16383 keeps every int32 lane under 2^31 for K <= 8192.
 * Returns 0, -1 when the scratch rows cannot be allocated, -2 for K over that. */
#define T16_QMAX 16383.0f
#define T16_KMAX 8192

int npc_w8a16_tok(const float *x, const int8_t *w, const float *sw, float *y, int64_t M,
                  int64_t N, int64_t K, int nthreads) {
    if (K > T16_KMAX) return -2;
    const int64_t ldq = (K + 31) / 32 * 32;
    int16_t *q = (int16_t *)malloc((size_t)(M * ldq) * sizeof(int16_t));
    float *sx = (float *)malloc((size_t)M * sizeof(float));
    if (!q || !sx) {
        free(q);
        free(sx);
        return -1;
    }
    quantize_rows_to(x, M, K, 1, 0.0f, T16_QMAX, q, ldq, sx);
#if NPC_VNNI
    t16_gemm(q, ldq, w, sx, sw, y, M, N, K, nthreads);
#else
    const gemm_t g = {NULL, q, ldq, w, sx, sw, NULL, NULL, y, M, N, K, 0, 0};
    run(&g, i8_stream, i8_tile_at, 3, 2 * ldq, nthreads);
#endif
    free(q);
    free(sx);
    return 0;
}
