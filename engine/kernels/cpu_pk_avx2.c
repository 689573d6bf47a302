/* The packed W8A16 layout's product on AVX2 (no AVX-512): included by cpu_gemm.c on x86 builds
 * without AVX512-VNNI. The layout is cpu_i8_vnni.c's (npc_w8a16_pack: strips of PK_C = 16
 * channels; in a block, 16 input pairs of 16 channels x 2 int8), so a model packs the same way
 * on both builds; here one ymm holds 8 channels' pairs and vpmaddwd + vpaddd do what vpdpwssd
 * does in one. The int32 sums are exact (no saturation: |q| <= 32767 and |w| <= 127, 32
 * products a block, 128 a span), then one fused multiply-add per span of blocks that share an
 * activation scale and a weight group (pk_span: 4 for per-channel W8A16, else 1): the
 * conversion and scaling serve 8 channels, where the row-major grouped loop (bf_tile) converts
 * and scales each channel's block on its own. With spans of 1 (int8 blocks, groups of 32 or
 * 64) the floats are the VNNI build's exactly. */
#define PK_C 16
/* rows per pass: 8 int32 accumulators + 2 weight vectors + 1 broadcast of the 16 ymm; 5 and 6
 * rows measured slower on SmolLM2's and Llama-2-7B's shapes (2026-12-06) */
#define PK_MR 4

static inline __attribute__((always_inline)) void
pk_rows(const void *a, int64_t lda, const float *xs, const int8_t *wp, const uint16_t *sp,
        int64_t gb, const float *bias, float *y, int64_t ldy, int64_t nb, const int mr,
        const int nc, const int64_t span) {
    const int16_t *q = (const int16_t *)a;
    const int64_t xsld = lda / QB;
    /* the fp32 sums live in the output rows (or, for the last strip's padding, a local tile)
     * between blocks, not in registers: held in 8 more ymm they pushed an int32 accumulator
     * out to the stack, a store and a load on its chain every pair (5-13 % slower at 4-16
     * rows, 15-20 % at 1) */
    float tile[PK_MR * PK_C];
    float *o = nc >= PK_C ? y : tile;
    const int64_t ldo = nc >= PK_C ? ldy : PK_C;
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_ps(o + i * ldo, _mm256_setzero_ps());
        _mm256_storeu_ps(o + i * ldo + 8, _mm256_setzero_ps());
    }
    const uint16_t *g = sp;
    int64_t left = gb;
    /* a span of blocks shares one activation scale and one weight group (pk_span): their int32
     * sums add up before the one conversion and multiply-add */
    for (int64_t b0 = 0; b0 < nb; b0 += span) {
        const int64_t b1 = nb - b0 < span ? nb : b0 + span, b = b0;
        __m256i acc[PK_MR][2];
        for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
        for (int64_t bb = b0; bb < b1; bb++) {
            const int8_t *wb = wp + bb * (PK_C * QB);
            for (int l = 0; l < PK_C * QB; l += 64) _mm_prefetch((const char *)(wb + PK_PF * PK_C * QB + l), _MM_HINT_T0);
#pragma GCC unroll 4 /* 8 was 2-3 % faster at 4-16 rows but 15 % slower at one */
            for (int kp = 0; kp < QB / 2; kp++) {
                const __m128i w0 = _mm_loadu_si128((const __m128i *)(wb + kp * 2 * PK_C));
                const __m128i w1 = _mm_loadu_si128((const __m128i *)(wb + kp * 2 * PK_C + 16));
                const __m256i lo = _mm256_cvtepi8_epi16(w0); /* ch 0-7 */
                const __m256i hi = _mm256_cvtepi8_epi16(w1); /* 8-15 */
                for (int i = 0; i < mr; i++) {
                    int32_t pair;
                    memcpy(&pair, q + i * lda + bb * QB + kp * 2, sizeof pair);
                    const __m256i p = _mm256_set1_epi32(pair);
                    acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(p, lo));
                    acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(p, hi));
                }
            }
        }
        const __m256 sw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g)),
                     sw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 8)));
        left -= b1 - b0;
        if (left == 0) {
            g += PK_C;
            left = gb;
        }
        for (int i = 0; i < mr; i++) {
            const __m256 s = _mm256_set1_ps(xs[i * xsld + b]);
            float *oi = o + i * ldo;
            _mm256_storeu_ps(oi, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][0]),
                                                 _mm256_mul_ps(sw0, s), _mm256_loadu_ps(oi)));
            _mm256_storeu_ps(oi + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][1]),
                                                     _mm256_mul_ps(sw1, s),
                                                     _mm256_loadu_ps(oi + 8)));
        }
    }
    for (int i = 0; i < mr; i++) {
        float *yi = y + i * ldy;
        if (nc >= PK_C) {
            if (bias)
                for (int h = 0; h < 2; h++)
                    _mm256_storeu_ps(yi + 8 * h, _mm256_add_ps(_mm256_loadu_ps(yi + 8 * h),
                                                               _mm256_loadu_ps(bias + 8 * h)));
        } else { /* the last strip's padding channels are not the caller's */
            for (int c = 0; c < nc; c++) yi[c] = tile[i * PK_C + c] + (bias ? bias[c] : 0.0f);
        }
    }
}

#define PK_CASE(r, n)                                                                         \
    case r: pk_rows(a, lda, xs, wp, sp, gb, bias, y, ldy, nb, r, nc, n); break;

/* quads: 0 here (vpdpbusd is VNNI's), as cpu_gemm.c's pk_gemm passes it. span is 1 or
 * PK_SPAN (pk_span), each a constant in its own copy of pk_rows: with the span read at run
 * time the loops of span 1 (int8 blocks, groups of 32) ran 5-10 % slower. */
static void pk_rows_any(const void *a, int64_t lda, const float *xs, const int8_t *wp,
                        const uint16_t *sp, int64_t gb, const float *bias, float *y, int64_t ldy,
                        int64_t nb, int mr, int nc, int quads, int64_t span) {
    (void)quads;
    if (span == PK_SPAN)
        switch (mr) { PK_CASE(1, PK_SPAN) PK_CASE(2, PK_SPAN) PK_CASE(3, PK_SPAN)
                      default: PK_CASE(PK_MR, PK_SPAN) }
    else
        switch (mr) { PK_CASE(1, 1) PK_CASE(2, 1) PK_CASE(3, 1) default: PK_CASE(PK_MR, 1) }
}
