/* Whole decode steps of Llama-shaped decoders on CPU: every decoder layer of a step in one call
 * from Python (engine/runtime/native_decode.py), fp32 residual stream and KV cache, with the
 * products on the kernels of cpu_gemm.c (fp32, W8A16 per channel or per group, W8A8; any mix).
 *
 * Why: the products of a batch-1 step of the Qwen2.5-0.5B shape take ~25 ms in int8 (65 in
 * fp32), and the rest of the step - norms, rotary, the KV write, attention, residuals, as
 * ~45 PyTorch ops per layer, plus ~170 Python-to-kernel crossings - took another 15-20 ms on
 * the 2-core test machine (docs/benchmarks.md). Here that work is a few microseconds per
 * layer.
 *
 * Semantics are those of the family modules (engine/runtime/families/) for decode rows:
 * RMSNorm as Hugging Face's LlamaRMSNorm (x * rsqrt(mean(x^2) + eps) * w; Gemma's (1 + w) is
 * folded into w by the caller), optional per-head q/k RMSNorm (Qwen3, Gemma 3), rotary
 * embedding in the rotate-half convention on the first rot_dim values of each head (partial
 * rotary: Phi-3) with the caller's cos/sin rows (one table per layer kind: Gemma 3's local
 * and global layers), the new K/V written at [slot, kv_head, pos] before attention,
 * single-query attention over the layer's window of positions with grouped query heads and
 * optional tanh soft-capped scores (Gemma 2), optional norms of the attention and MLP outputs
 * (Gemma's sandwich), and a gated MLP with SiLU or tanh-approximated GELU.
 */
#include "cpu_gemm.c"

#include <string.h>

/* NPC_W8A8_BLOCK: int8 activations with one scale per block of 32 (cpu_gemm.c blockint8_rows)
 * on the W8A16 block product */
enum { NPC_F32 = 0, NPC_W8A16 = 1, NPC_W8A8 = 2, NPC_W8A8_BLOCK = 3 };
/* the scratch's kinds for packed NPC_W8A8_BLOCK rows (u8) and for packed W8A16 rows whose
 * blocks share scales by spans (pk_span > 1) */
enum { NPC_W8A8_BLOCK_U8 = 16, NPC_W8A16_SPAN = 17 };

typedef struct {
    int32_t kind;      /* NPC_* */
    int32_t per_token; /* W8A8: per-token activation scales; else static_scale */
    float static_scale;
    int32_t group;      /* W8A16: inputs per weight-scale group (scale [n, k / group]); 0: [n] */
    const void *w;      /* [n, k] row-major, fp32 or int8 */
    /* int8: fp32 per-output-channel scales [n], or per group (above); packed: fp16 (below) */
    const void *scale;
    const float *bias;  /* [n] or NULL */
    int64_t n, k;
    const int32_t *wsum; /* W8A8: sum_k w[n, k] per row [n] (the VNNI product's correction) */
    /* grouped W8A16 only: w and scale are npc_w8a16_pack's layout (VNNI builds), the
     * projection starting at a strip of 16 channels */
    int32_t packed;
} npc_linear_t;

typedef struct {
    npc_linear_t q, k, v, o, gate, up, down;
    const float *in_norm, *post_norm; /* [hidden] */
    const float *q_norm, *k_norm;     /* [head_dim] or NULL */
    /* this layer's cache, [slots, kv_heads, max_len, head_dim], fp32 or (kv_half) fp16 */
    void *kc, *vc;
    /* Gemma's sandwich: norms of the attention and MLP outputs before each residual add [hidden],
     * or NULL */
    const float *attn_out_norm, *mlp_out_norm;
    int64_t window; /* sliding window: a query sees the keys of its last `window` positions; 0: all */
    int64_t rope;   /* which of the caller's rotary tables this layer turns with */
    /* down's input turned before its product (engine/kernels/turn.py): D's signs [inter] and
     * the odd part Q [turn_m, turn_m], or NULL */
    const float *turn_signs, *turn_odd;
    int64_t turn_m;
} npc_layer_t;

/* the largest odd part of a turn (turn_row's stack row); the plan refuses wider ones */
#define NPC_TURN_MAX_M 256

enum { NPC_SILU = 0, NPC_GELU_TANH = 1 };

typedef struct {
    int64_t hidden, heads, kv_heads, head_dim, inter, max_len;
    float eps, qk_eps, scaling;
    int32_t n_layers;
    int64_t rot_dim; /* rotary values per head (<= head_dim) */
    float softcap;   /* attention scores -> tanh(s / cap) * cap; 0: none */
    int32_t act;     /* NPC_SILU or NPC_GELU_TANH, of the MLP's gate */
    int32_t kv_half; /* the KV cache holds fp16 (IEEE half), else fp32 */
} npc_model_t;

/* scratch for int8 layers' activation rows: int16 values (W8A8, W8A16) and their scales
 * (W8A8: one per row; W8A16: one per block), sized by the caller for the widest input */
typedef struct {
    int16_t *q;
    float *sx;
    /* how q / sx were last filled (linear's reuse check): kind (-1: not yet), inputs, scale */
    int32_t kind, per_token;
    int64_t k;
    float static_scale;
} i8_scratch_t;

static void add_bias(float *y, const float *bias, int64_t M, int64_t N) {
    if (!bias) return;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) y[m * N + n] += bias[n];
}

/* Whether the scratch already holds x the way L reads it: `same_x` says the caller passes the
 * rows of the previous product (q/k/v, gate/up read one input), and the previous product
 * quantized them the same way (kind, and for W8A8 the activation scale rule). */
static int scratch_fits(const i8_scratch_t *s, const npc_linear_t *L, int kind, int same_x) {
    return same_x && s->kind == kind && s->k == L->k &&
           (L->kind == NPC_W8A16 || L->kind == NPC_W8A8_BLOCK ||
            (s->per_token == L->per_token && (L->per_token || s->static_scale == L->static_scale)));
}

static void rmsnorm(const float *x, const float *w, float eps, float *out, int64_t rows,
                    int64_t n);
static void silu_mul(const float *g, float *u, int64_t n);
static void gelu_tanh_mul(const float *g, float *u, int64_t n);
static void add_into(float *h, const float *y, int64_t n);

/* What a layer's product needs done to its input rows first, row by row (prep_row), each part
 * optional, in this order: the residual add h += norm(add) (an attention or MLP output, with
 * Gemma's sandwich norm), the norm xn = rmsnorm(h), the gate u = act(gate) * u, and (quant.x
 * not NULL) the rows' conversion to blocks. On the packed products the product's threads share
 * it out by rows (pk_pre_t); before any other product it runs on the calling thread. */
typedef struct {
    const npc_model_t *md;
    float *h, *add;
    const float *add_norm, *norm;
    float *xn;
    const float *gate;
    float *u;
    const npc_layer_t *turn; /* with gate: u's rows turned after the gate (turn_signs) */
#if NPC_PACKED
    pk_quant_t quant;
#endif
} prep_t;

/* u <- u R for one row of n = 2^k * m values, R = D (H (x) Q) (kernels/turn.py apply_turn):
 * signs, the odd part's product per group of m, then Sylvester's H as butterflies on
 * contiguous runs, then 1 / sqrt(2^k). GCC turns the m-long copies into memset / memcpy
 * calls, one per group; kept as loops, a row of SmolLM2's 1536 took 7.3 us instead of 11.4 */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static void turn_row(float *u, int64_t n, const float *signs, const float *odd, int64_t m) {
    const int64_t two = n / m;
    for (int64_t i = 0; i < n; i++) u[i] *= signs[i];
    if (m > 1) {
        float t[NPC_TURN_MAX_M];
        for (int64_t a = 0; a < two; a++) {
            float *r = u + a * m;
            for (int64_t d = 0; d < m; d++) t[d] = 0.0f;
            for (int64_t b = 0; b < m; b++) {
                const float rb = r[b];
                const float *q = odd + b * m;
                for (int64_t d = 0; d < m; d++) t[d] += rb * q[d];
            }
            for (int64_t d = 0; d < m; d++) r[d] = t[d];
        }
    }
    for (int64_t h = 1; h < two; h *= 2)
        for (int64_t i = 0; i < two; i += 2 * h) {
            float *x = u + i * m, *y = u + (i + h) * m;
            for (int64_t e = 0; e < h * m; e++) {
                const float a = x[e], b = y[e];
                x[e] = a + b;
                y[e] = a - b;
            }
        }
    const float sc = 1.0f / sqrtf((float)two);
    for (int64_t i = 0; i < n; i++) u[i] *= sc;
}

static void prep_row(const void *ctx, int64_t m) {
    const prep_t *p = (const prep_t *)ctx;
    /* a prep of the conversion alone (linear's own) has no model */
    const int64_t H = p->md ? p->md->hidden : 0, I = p->md ? p->md->inter : 0;
    if (p->add) {
        float *a = p->add + m * H;
        if (p->add_norm) rmsnorm(a, p->add_norm, p->md->eps, a, 1, H);
        add_into(p->h + m * H, a, H);
    }
    if (p->norm) rmsnorm(p->h + m * H, p->norm, p->md->eps, p->xn + m * H, 1, H);
    if (p->gate) {
        (p->md->act == NPC_GELU_TANH ? gelu_tanh_mul : silu_mul)(p->gate + m * I, p->u + m * I, I);
        if (p->turn && p->turn->turn_signs)
            turn_row(p->u + m * I, I, p->turn->turn_signs, p->turn->turn_odd, p->turn->turn_m);
    }
#if NPC_PACKED
    if (p->quant.x) pk_quant_row(&p->quant, m);
#endif
}

#if NPC_PACKED
/* whether L runs on the packed products (pk_gemm_segs) */
static int packs(const npc_linear_t *L) {
    return L->packed && (L->kind == NPC_W8A16 || L->kind == NPC_W8A8_BLOCK);
}

/* blocks per activation scale in the rows of L's packed product (pk_span) */
static int64_t layer_span(const npc_linear_t *L) {
    return L->kind == NPC_W8A16 ? pk_span(L->group / QB, L->k / QB) : 1;
}

/* The packed products seg[0..nseg) of one input x [M, k] (L: the first of them; all of one
 * kind and k), in one parallel region whose threads first share out the rows' work by rows:
 * prep's (or NULL), and the rows' conversion to blocks unless the scratch already holds them
 * (same_x, scratch_fits). */
static void packed_linear(const npc_linear_t *L, const pk_seg_t *seg, int nseg, prep_t *prep,
                          const float *x, int64_t M, i8_scratch_t *s, int same_x,
                          int nthreads) {
    const int64_t K = L->k, ldq = blockfloat_ld(K), span = layer_span(L);
    /* packed w8a8-dynamic layers keep their rows as u8 (quads), not int16, and W8A16 rows
     * with spans carry other values: other contents of the scratch, so other kinds for the
     * reuse check */
    const int kind = L->kind == NPC_W8A8_BLOCK && NPC_VNNI ? NPC_W8A8_BLOCK_U8
                     : span > 1                            ? NPC_W8A16_SPAN
                                                           : L->kind;
    const int fits = scratch_fits(s, L, kind, same_x);
    s->kind = kind;
    s->k = K;
    s->per_token = L->per_token;
    s->static_scale = L->static_scale;
    const int u8 = kind == NPC_W8A8_BLOCK_U8;
    const pk_quant_t quant = {fits ? NULL : x, K, u8 ? K : ldq, s->q, s->sx,
                              u8 ? PK_Q_U8 : L->kind == NPC_W8A16 ? PK_Q_FLOAT : PK_Q_INT8, span};
    prep_t own = {0};
    prep_t *p = prep ? prep : &own;
    p->quant = quant;
    const pk_pre_t pre = {prep_row, p};
    pk_gemm_segs(s->q, u8 ? K : ldq, s->sx, seg, nseg, M, K, nthreads, u8, span,
                 prep || !fits ? &pre : NULL);
}
#endif

/* y[M, n] = x[M, k] W^T (+ bias), on the kernel matching the layer's storage; the fp32 and
 * W8A16 products add the bias in their epilogue, W8A8 after it. prep (or NULL): the work on
 * the rows that must come first (prep_t; its quant is set here). */
static void linear(const npc_linear_t *L, prep_t *prep, const float *x, float *y, int64_t M,
                   i8_scratch_t *s, int same_x, int nthreads) {
    const int64_t N = L->n, K = L->k;
#if NPC_PACKED
    if (packs(L)) {
        const pk_seg_t seg = {(const int8_t *)L->w, L->scale, L->bias, y, N, L->group / QB};
        packed_linear(L, &seg, 1, prep, x, M, s, same_x, nthreads);
        return;
    }
    if (prep) prep->quant.x = NULL; /* the conversion is the packed products' part only */
#endif
    /* the rows' work shared by the threads, as the packed products share it: turned down_proj
     * inputs (turn_row) took 2.2 of SmolLM2's 12.9 ms batch-8 step on one thread, 1.2 on two */
    if (prep) {
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && M > 1)
        for (int64_t m = 0; m < M; m++) prep_row(prep, m);
    }
    if (L->kind == NPC_F32) {
        const gemm_t g = {x, NULL, K, NULL, NULL, NULL, (const float *)L->w, L->bias, y, M, N, K};
        run(&g, f32_stream, f32_tile_at, 3, 4 * K, nthreads);
        s->kind = -1; /* the scratch no longer holds the input the next product reads */
        return;
    }
    const int kind = L->kind;
    const int fits = scratch_fits(s, L, kind, same_x);
    s->kind = kind;
    s->k = K;
    s->per_token = L->per_token;
    s->static_scale = L->static_scale;
    if (L->kind == NPC_W8A16 || L->kind == NPC_W8A8_BLOCK) {
        const int64_t ldq = blockfloat_ld(K);
        if (!fits)
            (L->kind == NPC_W8A16 ? blockfloat_rows : blockint8_rows)(x, M, K, s->q, ldq, s->sx);
        w8a16_rows(s->q, ldq, s->sx, (const int8_t *)L->w, L->scale, L->group, L->bias, y, M, N,
                   K, nthreads);
    } else {
#if NPC_VNNI
        /* u8 rows fit the int16 scratch: v8_ld(K) <= 2 * blockfloat_ld(K) */
        const int64_t ldu = v8_ld(K);
        if (!fits)
            quantize_rows_u8(x, M, K, L->per_token, L->static_scale, (uint8_t *)s->q, ldu, s->sx);
        v8_gemm((const uint8_t *)s->q, ldu, (const int8_t *)L->w, L->wsum, s->sx, L->scale, y, M,
                N, K, nthreads);
        add_bias(y, L->bias, M, N);
        return;
#elif NPC_SDOT
        /* int8 rows fit the int16 scratch: s8_ld(K) <= 2 * blockfloat_ld(K) */
        const int64_t ld8 = s8_ld(K);
        if (!fits)
            quantize_rows_s8(x, M, K, L->per_token, L->static_scale, (int8_t *)s->q, ld8, s->sx);
        s8_gemm((const int8_t *)s->q, ld8, (const int8_t *)L->w, s->sx, L->scale, y, M, N, K,
                nthreads);
        add_bias(y, L->bias, M, N);
        return;
#endif
        const int64_t ldq = (K + 15) / 16 * 16;
        if (!fits) quantize_rows(x, M, K, L->per_token, L->static_scale, s->q, ldq, s->sx);
        const gemm_t g = {NULL, s->q, ldq, (const int8_t *)L->w, s->sx, L->scale, NULL, NULL,
                          y, M, N, K};
        run(&g, i8_stream, i8_tile_at, 3, 2 * ldq, nthreads);
        add_bias(y, L->bias, M, N);
    }
}

/* The products of one input (a layer's q, k and v, or gate and up) into ys: in one packed
 * product when they are all packed alike (packed_linear), else one after another (linear).
 * prep: as linear's, done once before the first. */
static void linears(const npc_linear_t *const *Ls, float *const *ys, int n, prep_t *prep,
                    const float *x, int64_t M, i8_scratch_t *s, int nthreads) {
#if NPC_PACKED
    int alike = 1;
    for (int i = 0; i < n; i++)
        alike = alike && packs(Ls[i]) && Ls[i]->kind == Ls[0]->kind && Ls[i]->k == Ls[0]->k &&
                layer_span(Ls[i]) == layer_span(Ls[0]);
    if (alike) {
        pk_seg_t seg[3];
        for (int i = 0; i < n; i++)
            seg[i] = (pk_seg_t){(const int8_t *)Ls[i]->w, Ls[i]->scale, Ls[i]->bias, ys[i],
                                Ls[i]->n, Ls[i]->group / QB};
        packed_linear(Ls[0], seg, n, prep, x, M, s, 0, nthreads);
        return;
    }
#endif
    for (int i = 0; i < n; i++) linear(Ls[i], i ? NULL : prep, x, ys[i], M, s, i > 0, nthreads);
}

static float dot(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum_ps(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* out[m] = x[m] * rsqrt(mean(x[m]^2) + eps) * w, for rows of n values; out may alias x */
static void rmsnorm(const float *x, const float *w, float eps, float *out, int64_t rows,
                    int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        const float inv = 1.0f / sqrtf(dot(xr, xr, n) / (float)n + eps);
        float *o = out + r * n;
        for (int64_t i = 0; i < n; i++) o[i] = w[i] * (xr[i] * inv);
    }
}

/* rotate-half rotary embedding of the first rd values of `heads` heads of one token, in
 * place; cos / sin hold rd values */
static void rope(float *x, int64_t heads, int64_t hd, int64_t rd, const float *cos,
                 const float *sin) {
    const int64_t half = rd / 2;
    for (int64_t h = 0; h < heads; h++) {
        float *v = x + h * hd;
        for (int64_t i = 0; i < half; i++) {
            const float a = v[i], b = v[i + half];
            v[i] = a * cos[i] - b * sin[i];
            v[i + half] = b * cos[i + half] + a * sin[i + half];
        }
    }
}

/* e^x for 8 floats, within 2 ulp of expf over the range used here (softmax exponents <= 0,
 * SiLU's e^-g): 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 in two parts, and a
 * degree-6 polynomial for e^r on |r| <= ln(2) / 2. Inputs are clamped to [-87.3, 88.3], so
 * 2^n stays a normal float: e^x for x below the clamp comes out near 1e-38 instead of a
 * denormal or 0 (a softmax weight that small, or SiLU's g / (1 + 1e38), is 0 in the sums). */
static inline __m256 exp8_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* tanh of 8 floats as 1 - 2 / (e^(2z) + 1) on exp8_ps: the same bits on every build (libm's
 * tanhf may differ between x86 and aarch64 in the last place, and the builds are compared bit
 * for bit); absolute error a few 1e-7, where the result is small too */
static inline __m256 tanh8_ps(__m256 z) {
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    const __m256 e = exp8_ps(_mm256_mul_ps(two, z));
    return _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(e, one)));
}

/* the sums of four vectors, as lanes 0..3 */
static inline __m128 hsum4_ps(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* The KV cache's values as fp32: 8 from element i of an fp32 or (half) fp16 cache, or one.
 * fp16 halves what attention reads per step; its values round as torch's .to(float16) does
 * (nearest even), so the native step and the PyTorch path hold the same cache. */
static inline __attribute__((always_inline)) __m256 kv_load8(const void *c, int64_t i,
                                                            const int half) {
    if (!half) return _mm256_loadu_ps((const float *)c + i);
#if defined(__aarch64__)
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = (float)((const __fp16 *)c)[i + j];
    return _mm256_loadu_ps(t);
#else
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)c + i)));
#endif
}

static inline __attribute__((always_inline)) float kv_at(const void *c, int64_t i,
                                                         const int half) {
    if (!half) return ((const float *)c)[i];
#if defined(__aarch64__)
    return (float)((const __fp16 *)c)[i];
#else
    return _cvtsh_ss(((const uint16_t *)c)[i]);
#endif
}

/* n values from x into the cache at element i, as fp32 or (half) fp16 rounded to nearest even.
 * Eight at a time: one scalar conversion and 16-bit store per value took 2-3 % of a batch-16
 * step while the other thread waited (perf, 2026-12-07). */
static inline void kv_put(void *c, int64_t i, const float *x, int64_t n, const int half) {
    if (!half) {
        memcpy((float *)c + i, x, (size_t)n * sizeof(float));
        return;
    }
    int64_t j = 0;
#if defined(__aarch64__)
    for (; j < n; j++) ((__fp16 *)c)[i + j] = (__fp16)x[j];
#else
    for (; j + 8 <= n; j += 8)
        _mm_storeu_si128((__m128i *)((uint16_t *)c + i + j),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT));
    for (; j < n; j++) ((uint16_t *)c)[i + j] = _cvtss_sh(x[j], _MM_FROUND_TO_NEAREST_INT);
#endif
}

/* Cache rows are asked for PF_ROWS rows ahead of their use: at long context attention streams
 * them from memory, and with the prefetch a batch-8 step of SmolLM2 at 800 positions took
 * 20-30 % less time (docs/benchmarks.md, "Attention at long context"). A prefetch past the
 * cache's end reads nothing and faults nothing. */
#define PF_ROWS 16
static inline __attribute__((always_inline)) void kv_prefetch(const void *c, int64_t i,
                                                              int64_t n, const int half) {
    const char *b = (const char *)c + (half ? 2 : 4) * i;
    for (int64_t o = 0; o < (half ? 2 : 4) * n; o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
}

/* Query heads per pass over their KV head's keys and values (grouped-query attention: every
 * head of a group reads the same cache rows): each key and value vector is loaded once for all
 * of them, where one head per pass loaded it once per head, two loads per multiply-add.
 * Bounded by register room: 16 vector registers, or 32 with AVX-512. */
#if defined(__AVX512F__)
#define ATT_GH 4
#else
#define ATT_GH 2
#endif

/* p[h * ldp + j] = scaling * (q_h . k_j) for gh heads (hd apart in q) and j < len, keys hd
 * apart from element k0 of the cache; four keys per pass share one horizontal sum per head.
 * Each head's sums run in the same order whatever gh is. */
static inline __attribute__((always_inline)) void
scores_kv(const float *q, const void *k, int64_t k0, int64_t len, int64_t hd, float scaling,
          float *p, int64_t ldp, const int gh, const int half) {
    int64_t j = 0;
    if ((hd & 7) == 0) {
        const __m128 sc = _mm_set1_ps(scaling);
        for (; j + 4 <= len; j += 4) {
            const int64_t r = k0 + j * hd;
            kv_prefetch(k, r + PF_ROWS * hd, 4 * hd, half);
            __m256 a[ATT_GH][4];
            for (int h = 0; h < gh; h++)
                for (int c = 0; c < 4; c++) a[h][c] = _mm256_setzero_ps();
            for (int64_t i = 0; i < hd; i += 8) {
                const __m256 k0v = kv_load8(k, r + i, half), k1v = kv_load8(k, r + hd + i, half),
                             k2v = kv_load8(k, r + 2 * hd + i, half),
                             k3v = kv_load8(k, r + 3 * hd + i, half);
                for (int h = 0; h < gh; h++) {
                    const __m256 qv = _mm256_loadu_ps(q + h * hd + i);
                    a[h][0] = _mm256_fmadd_ps(qv, k0v, a[h][0]);
                    a[h][1] = _mm256_fmadd_ps(qv, k1v, a[h][1]);
                    a[h][2] = _mm256_fmadd_ps(qv, k2v, a[h][2]);
                    a[h][3] = _mm256_fmadd_ps(qv, k3v, a[h][3]);
                }
            }
            for (int h = 0; h < gh; h++)
                _mm_storeu_ps(p + h * ldp + j,
                              _mm_mul_ps(hsum4_ps(a[h][0], a[h][1], a[h][2], a[h][3]), sc));
        }
    }
    for (; j < len; j++)
        for (int h = 0; h < gh; h++) {
            const float *qh = q + h * hd;
            if (!half) {
                p[h * ldp + j] = dot(qh, (const float *)k + k0 + j * hd, hd) * scaling;
                continue;
            }
            float s = 0.0f;
            for (int64_t i = 0; i < hd; i++) s += qh[i] * kv_at(k, k0 + j * hd + i, 1);
            p[h * ldp + j] = s * scaling;
        }
}

/* p[j] = e^(p[j] - max p) / (their sum): the attention weights */
static void softmax(float *p, int64_t len) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; j++)
        if (p[j] > mx) mx = p[j];
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 vs = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        const __m256 e = exp8_ps(_mm256_sub_ps(_mm256_loadu_ps(p + j), vm));
        _mm256_storeu_ps(p + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    float sum = hsum_ps(vs);
    for (; j < len; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    /* divided once here, not once per value row and head in weighted_values: the same
     * correctly rounded quotients */
    const __m256 vsum = _mm256_set1_ps(sum);
    for (j = 0; j + 8 <= len; j += 8)
        _mm256_storeu_ps(p + j, _mm256_div_ps(_mm256_loadu_ps(p + j), vsum));
    for (; j < len; j++) p[j] = p[j] / sum;
}

/* o[h * hd + i] = sum_j p[h * ldp + j] v_j[i] for gh heads (their weights from softmax);
 * 64 outputs of every head stay in registers while the value rows stream past once, front to
 * back (two passes over half rows each measured slower: the rows come from memory at long
 * context, and strided halves defeat the prefetcher). With AVX-512 the 64 are four 512-bit
 * registers per head, so ATT_GH heads fit; with AVX2, eight 256-bit ones, so one head a pass.
 * Each output is summed over j in order in every variant: the same floats. */
#if defined(__AVX512F__)
static inline __attribute__((always_inline)) __m512 kv_load16(const void *c, int64_t i,
                                                             const int half) {
    if (!half) return _mm512_loadu_ps((const float *)c + i);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)c + i)));
}
#define WV_GH ATT_GH
#else
#define WV_GH 1
#endif

static inline __attribute__((always_inline)) void
weighted_values_kv(const float *p, int64_t ldp, const void *v, int64_t v0, int64_t len,
                   int64_t hd, float *o, const int gh, const int half) {
    int64_t i0 = 0;
    for (int h1 = 0; h1 < gh; h1 += WV_GH) {
        const int n = gh - h1 < WV_GH ? gh - h1 : WV_GH;
        (void)n; /* one head a pass without AVX-512 */
        const float *ph = p + h1 * ldp;
        float *oh = o + h1 * hd;
        for (i0 = 0; i0 + 64 <= hd; i0 += 64) {
#if defined(__AVX512F__)
            __m512 acc[WV_GH][4];
            for (int h = 0; h < n; h++)
                for (int c = 0; c < 4; c++) acc[h][c] = _mm512_setzero_ps();
            for (int64_t j = 0; j < len; j++) {
                __m512 wv[WV_GH];
                for (int h = 0; h < n; h++) wv[h] = _mm512_set1_ps(ph[h * ldp + j]);
                const int64_t r = v0 + j * hd + i0;
                kv_prefetch(v, r + PF_ROWS * hd, 64, half);
                for (int c = 0; c < 4; c++) {
                    const __m512 vv = kv_load16(v, r + 16 * c, half);
                    for (int h = 0; h < n; h++) acc[h][c] = _mm512_fmadd_ps(wv[h], vv, acc[h][c]);
                }
            }
            for (int h = 0; h < n; h++)
                for (int c = 0; c < 4; c++) _mm512_storeu_ps(oh + h * hd + i0 + 16 * c, acc[h][c]);
#else
            __m256 acc[8];
            for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_ps();
            for (int64_t j = 0; j < len; j++) {
                const __m256 wv = _mm256_set1_ps(ph[j]);
                const int64_t r = v0 + j * hd + i0;
                kv_prefetch(v, r + PF_ROWS * hd, 64, half);
                for (int c = 0; c < 8; c++)
                    acc[c] = _mm256_fmadd_ps(wv, kv_load8(v, r + 8 * c, half), acc[c]);
            }
            for (int c = 0; c < 8; c++) _mm256_storeu_ps(oh + i0 + 8 * c, acc[c]);
#endif
        }
    }
    for (int h = 0; h < gh; h++) {
        float *oh = o + h * hd;
        for (int64_t i = i0; i < hd; i++) oh[i] = 0.0f;
        for (int64_t j = 0; j < len && i0 < hd; j++) {
            const float w = p[h * ldp + j];
            for (int64_t i = i0; i < hd; i++) oh[i] += w * kv_at(v, v0 + j * hd + i, half);
        }
    }
}

#define ATT_CASE(n)                                                                           \
    case n:                                                                                   \
        if (half) {                                                                           \
            if (values) weighted_values_kv(p, ldp, c, c0, len, hd, o, n, 1);                   \
            else scores_kv(q, c, c0, len, hd, scaling, p, ldp, n, 1);                          \
        } else {                                                                              \
            if (values) weighted_values_kv(p, ldp, c, c0, len, hd, o, n, 0);                   \
            else scores_kv(q, c, c0, len, hd, scaling, p, ldp, n, 0);                          \
        }                                                                                     \
        break;

/* scores (values 0: q -> p) or weighted values (values 1: p -> o) of gh <= ATT_GH heads */
static void attend(int values, const float *q, const void *c, int64_t c0, int64_t len,
                   int64_t hd, float scaling, float *p, int64_t ldp, float *o, int gh, int half) {
    switch (gh) {
        ATT_CASE(1)
        ATT_CASE(2)
#if ATT_GH > 2
        ATT_CASE(3)
        ATT_CASE(4)
#endif
    }
}

/* p[j] = tanh(p[j] / cap) * cap over n values; the last partial 8 through a padded copy, so
 * every value takes the vector path */
static void soft_cap(float *p, int64_t n, float cap) {
    const __m256 c = _mm256_set1_ps(cap);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(p + j, _mm256_mul_ps(tanh8_ps(_mm256_div_ps(_mm256_loadu_ps(p + j), c)),
                                              c));
    if (j < n) {
        float t[8] = {0};
        memcpy(t, p + j, (size_t)(n - j) * sizeof(float));
        _mm256_storeu_ps(t, _mm256_mul_ps(tanh8_ps(_mm256_div_ps(_mm256_loadu_ps(t), c)), c));
        memcpy(p + j, t, (size_t)(n - j) * sizeof(float));
    }
}

/* Row m's query heads of KV head g and its new key and value, before attention reads them:
 * the q/k norms (Qwen3, Gemma 3), the rotary turn with the row's cos/sin (rd values), and the
 * key and value written to the cache at the row's slot and position. */
static void new_kv(const npc_model_t *md, const npc_layer_t *L, float *q, float *k,
                   const float *v, const float *cos, const float *sin, const int64_t *slots,
                   const int64_t *pos, int64_t m, int64_t g) {
    const int64_t nh = md->heads, kvh = md->kv_heads, hd = md->head_dim, ml = md->max_len;
    const int64_t group = nh / kvh, rd = md->rot_dim;
    float *qg = q + (m * nh + g * group) * hd, *kg = k + (m * kvh + g) * hd;
    if (L->q_norm) rmsnorm(qg, L->q_norm, md->qk_eps, qg, group, hd);
    if (L->k_norm) rmsnorm(kg, L->k_norm, md->qk_eps, kg, 1, hd);
    rope(qg, group, hd, rd, cos + m * rd, sin + m * rd);
    rope(kg, 1, hd, rd, cos + m * rd, sin + m * rd);
    const int64_t at = ((slots[m] * kvh + g) * ml + pos[m]) * hd;
    kv_put(L->kc, at, kg, hd, md->kv_half);
    kv_put(L->vc, at, v + (m * kvh + g) * hd, hd, md->kv_half);
}

/* single-query attention of every (row, query head) over the layer's window of keys, after
 * new_kv for every (row, KV head), shared out in the same parallel region: done by the calling
 * thread alone it kept the other waiting (docs/benchmarks.md, "q, k, v and gate, up in one
 * region"). p is per-thread scratch of max_len. */
static void attention(const npc_model_t *md, const npc_layer_t *L, float *q, float *k,
                      const float *v, const float *cos, const float *sin, float *out,
                      int64_t M, const int64_t *slots, const int64_t *pos, float *p_all,
                      int nthreads) {
    const int64_t nh = md->heads, kvh = md->kv_heads, hd = md->head_dim, ml = md->max_len;
    const int64_t group = nh / kvh;
    /* a task is a KV head's whole group of query heads when there are enough of them to share
     * the threads evenly, else one query head (a batch-1 step of a model with few KV heads) */
    const int64_t per = M * kvh >= 4 * nthreads ? group : 1, tasks = M * nh / per;
    const float cap = md->softcap;
    if (M == 1) /* one row's few heads: sharing them would only add a barrier */
        for (int64_t g = 0; g < kvh; g++) new_kv(md, L, q, k, v, cos, sin, slots, pos, 0, g);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && tasks > 1)
    {
        float *p = p_all + (int64_t)omp_get_thread_num() * ATT_GH * ml;
        if (M > 1) {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < M * kvh; t++)
                new_kv(md, L, q, k, v, cos, sin, slots, pos, t / kvh, t % kvh);
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t m = t / (nh / per), h0 = t % (nh / per) * per, g = h0 / group;
            const int64_t first = L->window && pos[m] + 1 > L->window ? pos[m] + 1 - L->window : 0;
            const int64_t len = pos[m] + 1 - first;
            const int64_t base = ((slots[m] * kvh + g) * ml + first) * hd;
            for (int64_t h = h0; h < h0 + per; h += ATT_GH) {
                const int gh = (int)(h0 + per - h < ATT_GH ? h0 + per - h : ATT_GH);
                attend(0, q + (m * nh + h) * hd, L->kc, base, len, hd, md->scaling, p, ml, NULL,
                       gh, md->kv_half);
                for (int i = 0; i < gh; i++) {
                    if (cap > 0.0f) soft_cap(p + i * ml, len, cap);
                    softmax(p + i * ml, len);
                }
                attend(1, NULL, L->vc, base, len, hd, 0.0f, p, ml, out + (m * nh + h) * hd, gh,
                       md->kv_half);
            }
        }
    }
}

/* u = SiLU(g) * u over n values */
static void silu_mul(const float *g, float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp8_ps(_mm256_xor_ps(gv, neg));
        _mm256_storeu_ps(u + i, _mm256_mul_ps(_mm256_loadu_ps(u + i),
                                              _mm256_div_ps(gv, _mm256_add_ps(one, e))));
    }
    for (; i < n; i++) u[i] *= g[i] / (1.0f + expf(-g[i]));
}

/* u = GELU(g) * u over 8 values (a lane-wise step of gelu_tanh_mul) */
static inline void gelu_tanh_mul8(const float *g, float *u) {
    const __m256 c = _mm256_set1_ps(0.7978845608028654f), a = _mm256_set1_ps(0.044715f),
                 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    const __m256 gv = _mm256_loadu_ps(g);
    const __m256 z = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(a, gv),
                                                      _mm256_mul_ps(gv, gv), gv));
    const __m256 gl = _mm256_mul_ps(_mm256_mul_ps(half, gv), _mm256_add_ps(one, tanh8_ps(z)));
    _mm256_storeu_ps(u, _mm256_mul_ps(_mm256_loadu_ps(u), gl));
}

/* u = GELU(g) * u over n values, GELU in its tanh form as torch's approximate="tanh":
 * 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))); the last partial 8 through padded copies */
static void gelu_tanh_mul(const float *g, float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) gelu_tanh_mul8(g + i, u + i);
    if (i < n) {
        float gt[8] = {0}, ut[8] = {0};
        memcpy(gt, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ut, u + i, (size_t)(n - i) * sizeof(float));
        gelu_tanh_mul8(gt, ut);
        memcpy(u + i, ut, (size_t)(n - i) * sizeof(float));
    }
}

static void add_into(float *h, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] += y[i];
}

/* Every layer of a decode step: h [M, hidden] is the embedded tokens on entry and the last
 * layer's output (before the final norm) on return. slots/pos: each row's KV slot and
 * position; cos/sin: [tables, M, rot_dim] rotary rows (layer L turns with table L->rope). Returns 0, or -1 when scratch memory could
 * not be allocated (nothing is written then). */
int npc_decode_layers(const npc_model_t *md, const npc_layer_t *layers, float *h, int64_t M,
                      const int64_t *slots, const int64_t *pos, const float *cos,
                      const float *sin, int nthreads) {
    const int64_t H = md->hidden, nh = md->heads, kvh = md->kv_heads, hd = md->head_dim;
    const int64_t I = md->inter, ml = md->max_len;
    const int64_t wide = H > I ? H : I;              /* widest product output */
    const int64_t kmax = wide > nh * hd ? wide : nh * hd; /* widest product input */
    const int64_t ldq = blockfloat_ld(kmax); /* a multiple of W8A8's 16 too */
    const int nt = nthreads < 1 ? 1 : nthreads;
    const size_t floats = (size_t)(M * H             /* normed input */
                                   + M * nh * hd * 2  /* q, attention output */
                                   + M * kvh * hd * 2 /* k, v */
                                   + M * wide * 2     /* products out, up */
                                   + (int64_t)nt * ATT_GH * ml /* attention weights */
                                   + M * (ldq / QB + 1)); /* int8 rows' scales */
    float *buf = (float *)malloc(floats * sizeof(float));
    int16_t *q16 = (int16_t *)malloc((size_t)(M * ldq) * sizeof(int16_t));
    if (!buf || !q16) {
        free(buf);
        free(q16);
        return -1;
    }
    float *x = buf, *q = x + M * H, *att = q + M * nh * hd, *k = att + M * nh * hd,
          *v = k + M * kvh * hd, *y = v + M * kvh * hd, *u = y + M * wide, *p = u + M * wide,
          *sx = p + (int64_t)nt * ATT_GH * ml;
    i8_scratch_t s = {q16, sx, -1, 0, 0, 0.0f};

    /* the last MLP output (and its sandwich norm), added into h by the next layer's first
     * product as it prepares its rows */
    float *pending = NULL;
    const float *pending_norm = NULL;
    for (int li = 0; li < md->n_layers; li++) {
        const npc_layer_t *L = layers + li;
        prep_t in = {.md = md, .h = h, .add = pending, .add_norm = pending_norm,
                     .norm = L->in_norm, .xn = x};
        const npc_linear_t *qkv[3] = {&L->q, &L->k, &L->v};
        float *const qkv_y[3] = {q, k, v};
        linears(qkv, qkv_y, 3, &in, x, M, &s, nt);
        const int64_t rd = md->rot_dim;
        attention(md, L, q, k, v, cos + L->rope * M * rd, sin + L->rope * M * rd, att, M, slots,
                  pos, p, nt);
        linear(&L->o, NULL, att, y, M, &s, 0, nt);
        /* y (o's output) is read by the rows' work before gate's product writes over it */
        prep_t post = {.md = md, .h = h, .add = y, .add_norm = L->attn_out_norm,
                       .norm = L->post_norm, .xn = x};
        const npc_linear_t *gu[2] = {&L->gate, &L->up};
        float *const gu_y[2] = {y, u};
        linears(gu, gu_y, 2, &post, x, M, &s, nt);
        prep_t act = {.md = md, .gate = y, .u = u, .turn = L};
        linear(&L->down, &act, u, y, M, &s, 0, nt);
        pending = y;
        pending_norm = L->mlp_out_norm;
    }
    if (pending) {
        const prep_t last = {.md = md, .h = h, .add = pending, .add_norm = pending_norm};
        for (int64_t m = 0; m < M; m++) prep_row(&last, m);
    }
    free(buf);
    free(q16);
    return 0;
}

/* The final norm of a decode step (the runner's last op before the head), exported so that it
 * runs here instead of as six PyTorch ops (~0.2 ms of a ~8 ms batch-1 step on SmolLM2). */
void npc_rmsnorm(const float *x, const float *w, float eps, float *out, int64_t rows, int64_t n) {
    rmsnorm(x, w, eps, out, rows, n);
}
