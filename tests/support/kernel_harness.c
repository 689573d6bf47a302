/* A stand-alone driver of the native kernels (engine/kernels/cpu_decode.c, compiled in), so the
 * same inputs can run through a build for another CPU under qemu-user and the outputs be
 * compared byte for byte (tests/test_kernels_aarch64.py).
 *
 *   kernel_harness isa                  prints npc_int8_isa()
 *   kernel_harness products IN OUT      runs each case of IN, writes every output to OUT
 *   kernel_harness decode OUT           two decode steps of a small mixed-precision model made
 *                                       from a fixed integer PRNG; writes h and the KV cache
 *
 * IN: cases, each a header of 8 little-endian int64 (op, M, N, K, group, per_token, nthreads,
 * has_bias) and one float64 (W8A8's static scale; rmsnorm's eps), then x (M*K fp32), the
 * weight (N*K int8, or fp32 for op 0), scales (N or N*K/group fp32) and bias (N fp32) as the op
 * takes them. OUT, per case: an int32 return code, then y (M*N fp32; row sums N int32).
 */
#include "cpu_decode.c"

#include <stdio.h>
#include <string.h>

enum { OP_F32 = 0, OP_W8A16 = 1, OP_W8A8 = 2, OP_TOK = 3, OP_RMSNORM = 4, OP_ROWSUMS = 5 };

static void *read_n(FILE *f, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "short input\n");
        exit(3);
    }
    return p;
}

static int products(const char *in_path, const char *out_path) {
    FILE *in = fopen(in_path, "rb"), *out = fopen(out_path, "wb");
    if (!in || !out) return 2;
    int64_t h[8];
    double arg;
    while (fread(h, sizeof h, 1, in) == 1) {
        if (fread(&arg, sizeof arg, 1, in) != 1) return 3;
        const int64_t op = h[0], M = h[1], N = h[2], K = h[3], group = h[4];
        const int per_token = (int)h[5], nt = (int)h[6], has_bias = (int)h[7];
        float *x = read_n(in, (size_t)(M * K) * 4);
        void *w = read_n(in, (size_t)(N * K) * (op == OP_F32 || op == OP_RMSNORM ? 4 : 1));
        const int64_t ns = op == OP_F32 || op == OP_RMSNORM || op == OP_ROWSUMS
                               ? 0 : (group ? N * (K / group) : N);
        float *sw = read_n(in, (size_t)ns * 4);
        float *bias = has_bias ? read_n(in, (size_t)N * 4) : NULL;
        const int64_t ny = op == OP_RMSNORM ? M * K : (op == OP_ROWSUMS ? N : M * N);
        float *y = calloc((size_t)ny + 1, 4);
        int32_t rc = 0;
        switch (op) {
        case OP_F32: npc_f32(x, w, bias, y, M, N, K, nt); break;
        case OP_W8A16: rc = npc_w8a16_grouped(x, w, sw, group, y, M, N, K, nt); break;
        case OP_W8A8:
            rc = npc_w8a8_f32(x, per_token, (float)arg, w, NULL, sw, y, M, N, K, nt);
            break;
        case OP_TOK: rc = npc_w8a16_tok(x, w, sw, y, M, N, K, nt); break;
        case OP_RMSNORM: npc_rmsnorm(x, (const float *)w, (float)arg, y, M, K); break;
        case OP_ROWSUMS: npc_int8_row_sums(w, N, K, (int32_t *)y); break;
        default: return 4;
        }
        fwrite(&rc, 4, 1, out);
        fwrite(y, 4, (size_t)ny, out);
        free(x), free(w), free(sw), free(bias), free(y);
    }
    fclose(in);
    return fclose(out) != 0;
}

/* ---- a fixed pseudo-random model: the same bits on every CPU (integer PRNG, exact scaling) */
static uint32_t rng = 0x2545F491u;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}
/* uniform in [-a, a) on a 2^-23 grid: exactly representable */
static float uni(float a) { return a * ((float)(int32_t)(next_u32() >> 8) / 8388608.0f - 1.0f); }
static float *floats(int64_t n, float a) {
    float *p = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) p[i] = uni(a);
    return p;
}
static int8_t *int8s(int64_t n) {
    int8_t *p = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = (int8_t)((int32_t)(next_u32() % 255) - 127);
    return p;
}

/* kind: NPC_F32 / NPC_W8A16 (group 0 or 32) / NPC_W8A8 (per token or static) */
static npc_linear_t make_linear(int kind, int64_t n, int64_t k, int group, int per_token,
                                int bias) {
    npc_linear_t L = {0};
    L.kind = kind, L.n = n, L.k = k, L.group = group, L.per_token = per_token;
    L.static_scale = 0.02f;
    if (kind == NPC_F32) {
        L.w = floats(n * k, 0.2f);
    } else {
        int8_t *w = int8s(n * k);
        L.w = w;
        L.scale = floats(group ? n * (k / group) : n, 0.002f);
        int32_t *ws = malloc((size_t)n * 4);
        npc_int8_row_sums(w, n, k, ws);
        L.wsum = ws;
    }
    L.bias = bias ? floats(n, 0.1f) : NULL;
    return L;
}

static int decode(const char *out_path) {
    /* rotary on 12 of 16 values per head (partial), soft-capped scores; the second step's MLP
     * gates with GELU (tanh) instead of SiLU */
    npc_model_t md = {.hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16,
                            .inter = 96, .max_len = 24, .eps = 1e-5f, .qk_eps = 1e-6f,
                            .scaling = 0.25f, .n_layers = 2, .rot_dim = 12, .softcap = 3.0f,
                            .act = NPC_SILU};
    const int64_t H = md.hidden, hd = md.head_dim, kvh = md.kv_heads, ml = md.max_len;
    const int64_t M = 3, slots = 3, qd = md.heads * hd, kvd = kvh * hd;
    npc_layer_t layers[2];
    memset(layers, 0, sizeof layers); /* fields a layer does not set are off (NULL, 0) */
    for (int li = 0; li < 2; li++) {
        npc_layer_t *L = layers + li;
        /* every product kind in the mix, per-group and per-channel W8A16, both W8A8 scales */
        L->q = make_linear(li ? NPC_W8A8 : NPC_W8A16, qd, H, 0, 1, 1);
        L->k = make_linear(li ? NPC_W8A8 : NPC_W8A16, kvd, H, li ? 0 : 32, 1, 1);
        L->v = make_linear(li ? NPC_F32 : NPC_W8A8, kvd, H, 0, 0, li);
        L->o = make_linear(li ? NPC_W8A16 : NPC_F32, H, qd, 32, 1, 0);
        L->gate = make_linear(NPC_W8A8, md.inter, H, 0, li, 0);
        L->up = make_linear(NPC_W8A16, md.inter, H, li ? 32 : 0, 1, 0);
        L->down = make_linear(li ? NPC_F32 : NPC_W8A8, H, md.inter, 0, 1, 0);
        L->in_norm = floats(H, 1.5f);
        L->post_norm = floats(H, 1.5f);
        L->q_norm = li ? floats(hd, 1.5f) : NULL;
        L->k_norm = li ? floats(hd, 1.5f) : NULL;
        L->kc = floats(slots * kvh * ml * hd, 1.0f);
        L->vc = floats(slots * kvh * ml * hd, 1.0f);
        /* layer 1 as Gemma's: sandwich norms, a 4-token window, the second rotary table */
        L->attn_out_norm = li ? floats(H, 1.5f) : NULL;
        L->mlp_out_norm = li ? floats(H, 1.5f) : NULL;
        L->window = li ? 4 : 0;
        L->rope = li;
        if (!li) { /* layer 0's down input turned (turn_row): 96 = 32 x 3 */
            L->turn_signs = floats(md.inter, 1.0f);
            L->turn_odd = floats(9, 0.6f);
            L->turn_m = 3;
        }
    }
    float *h = floats(M * H, 3.0f);
    const int64_t slot[3] = {2, 0, 1};
    FILE *out = fopen(out_path, "wb");
    if (!out) return 2;
    for (int step = 0; step < 2; step++) {
        const int64_t pos[3] = {5 + step, 0 + step, 17 + step};
        md.act = step ? NPC_GELU_TANH : NPC_SILU;
        float *cs = floats(2 * M * md.rot_dim, 1.0f), *sn = floats(2 * M * md.rot_dim, 1.0f);
        const int32_t rc = npc_decode_layers(&md, layers, h, M, slot, pos, cs, sn, 2);
        fwrite(&rc, 4, 1, out);
        fwrite(h, 4, (size_t)(M * H), out);
        free(cs), free(sn);
    }
    for (int li = 0; li < 2; li++) {
        fwrite(layers[li].kc, 4, (size_t)(slots * kvh * ml * hd), out);
        fwrite(layers[li].vc, 4, (size_t)(slots * kvh * ml * hd), out);
    }
    return fclose(out) != 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "isa")) return puts(npc_int8_isa()) < 0;
    if (argc == 4 && !strcmp(argv[1], "products")) return products(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "decode")) return decode(argv[2]);
    fprintf(stderr, "usage: %s isa | products IN OUT | decode OUT\n", argv[0]);
    return 2;
}
