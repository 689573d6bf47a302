/* The AVX2 / SSE intrinsics that cpu_gemm.c and cpu_decode.c use, for aarch64, on NEON.
 *
 * Why a translation and not a second set of kernels: the products' fp32 results depend on the
 * order of every float operation (which lanes hold which partial sums, the FMA chains, the
 * horizontal sums). Each function here computes what its x86 namesake computes, lane for lane,
 * with the same rounding: a 256-bit register is two 128-bit NEON registers (lo = lanes 0-3,
 * hi = 4-7), FMA stays fused (vfmaq / vfmsq), max / min keep x86's rule of returning the
 * second operand when either is NaN (NEON's own vmaxq would return the NaN), conversions round
 * to nearest even. So the aarch64 build gives the AVX2 build's floats bit for bit
 * (tests/test_kernels_aarch64.py runs both on the same inputs), and one source of kernels is
 * kept. Only the intrinsics those files use are here, with only the immediates they pass.
 * W8A8's int8 x int8 products do not come through here on CPUs with the dot-product extension:
 * they run on sdot (cpu_gemm.c, NPC_SDOT), whose exact int32 sums give the same floats.
 */
#ifndef NPC_SIMD_NEON_H
#define NPC_SIMD_NEON_H

#include <arm_neon.h>
#include <stdint.h>

typedef float32x4_t __m128;
typedef int32x4_t __m128i; /* reinterpreted as int8 / int16 lanes where an op reads them so */
typedef struct { float32x4_t lo, hi; } __m256;
typedef struct { int32x4_t lo, hi; } __m256i;

#define _MM_HINT_T0 0
#define _MM_FROUND_TO_NEAREST_INT 0x00
#define _MM_FROUND_NO_EXC 0x08
#define _CMP_UNORD_Q 3
#define _MM_SHUFFLE(z, y, x, w) (((z) << 6) | ((y) << 4) | ((x) << 2) | (w))

#define NPC_INL static inline __attribute__((always_inline))

/* ---- helpers: x86's max / min (a > b ? a : b, so NaN in either gives b) */
NPC_INL float32x4_t npc_max4(float32x4_t a, float32x4_t b) {
    return vbslq_f32(vcgtq_f32(a, b), a, b);
}
NPC_INL float32x4_t npc_min4(float32x4_t a, float32x4_t b) {
    return vbslq_f32(vcltq_f32(a, b), a, b);
}

/* ---- 128-bit */
#define _mm_prefetch(p, hint) __builtin_prefetch((const void *)(p), 0, 3)
NPC_INL __m128 _mm_add_ps(__m128 a, __m128 b) { return vaddq_f32(a, b); }
NPC_INL __m128 _mm_mul_ps(__m128 a, __m128 b) { return vmulq_f32(a, b); }
NPC_INL __m128 _mm_max_ps(__m128 a, __m128 b) { return npc_max4(a, b); }
NPC_INL __m128 _mm_set1_ps(float v) { return vdupq_n_f32(v); }
NPC_INL void _mm_storeu_ps(float *p, __m128 v) { vst1q_f32(p, v); }
NPC_INL float _mm_cvtss_f32(__m128 a) { return vgetq_lane_f32(a, 0); }
/* [b2, b3, a2, a3] */
NPC_INL __m128 _mm_movehl_ps(__m128 a, __m128 b) {
    return vcombine_f32(vget_high_f32(b), vget_high_f32(a));
}
/* [a1, a1, a3, a3] */
NPC_INL __m128 _mm_movehdup_ps(__m128 a) { return vtrn2q_f32(a, a); }
/* lane 0: a0 + b0; lanes 1-3: a's */
NPC_INL __m128 _mm_add_ss(__m128 a, __m128 b) {
    return vsetq_lane_f32(vgetq_lane_f32(a, 0) + vgetq_lane_f32(b, 0), a, 0);
}
NPC_INL __m128 _mm_max_ss(__m128 a, __m128 b) {
    const float x = vgetq_lane_f32(a, 0), y = vgetq_lane_f32(b, 0);
    return vsetq_lane_f32(x > y ? x : y, a, 0);
}
NPC_INL __m128i _mm_loadu_si128(const __m128i *p) {
    return vreinterpretq_s32_u8(vld1q_u8((const uint8_t *)p));
}
NPC_INL void _mm_storeu_si128(__m128i *p, __m128i v) {
    vst1q_u8((uint8_t *)p, vreinterpretq_u8_s32(v));
}
NPC_INL __m128i _mm_add_epi32(__m128i a, __m128i b) { return vaddq_s32(a, b); }
NPC_INL int _mm_cvtsi128_si32(__m128i a) { return vgetq_lane_s32(a, 0); }
NPC_INL __m128i _mm_shuffle_epi32(__m128i a, const int imm) {
    int32_t in[4], out[4];
    vst1q_s32(in, a);
    for (int i = 0; i < 4; i++) out[i] = in[(imm >> (2 * i)) & 3];
    return vld1q_s32(out);
}
/* int32 lanes of a then b, saturated to int16 */
NPC_INL __m128i _mm_packs_epi32(__m128i a, __m128i b) {
    return vreinterpretq_s32_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b)));
}

/* ---- 256-bit float */
#define NPC_F2(expr_lo, expr_hi) ((__m256){expr_lo, expr_hi})
NPC_INL __m256 _mm256_setzero_ps(void) { return NPC_F2(vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)); }
NPC_INL __m256 _mm256_set1_ps(float v) { return NPC_F2(vdupq_n_f32(v), vdupq_n_f32(v)); }
NPC_INL __m256 _mm256_broadcast_ss(const float *p) { return _mm256_set1_ps(*p); }
NPC_INL __m256 _mm256_loadu_ps(const float *p) { return NPC_F2(vld1q_f32(p), vld1q_f32(p + 4)); }
NPC_INL void _mm256_storeu_ps(float *p, __m256 v) {
    vst1q_f32(p, v.lo);
    vst1q_f32(p + 4, v.hi);
}
NPC_INL __m256 _mm256_add_ps(__m256 a, __m256 b) {
    return NPC_F2(vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi));
}
NPC_INL __m256 _mm256_sub_ps(__m256 a, __m256 b) {
    return NPC_F2(vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi));
}
NPC_INL __m256 _mm256_mul_ps(__m256 a, __m256 b) {
    return NPC_F2(vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi));
}
NPC_INL __m256 _mm256_div_ps(__m256 a, __m256 b) {
    return NPC_F2(vdivq_f32(a.lo, b.lo), vdivq_f32(a.hi, b.hi));
}
/* a * b + c, one rounding */
NPC_INL __m256 _mm256_fmadd_ps(__m256 a, __m256 b, __m256 c) {
    return NPC_F2(vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi));
}
/* c - a * b, one rounding */
NPC_INL __m256 _mm256_fnmadd_ps(__m256 a, __m256 b, __m256 c) {
    return NPC_F2(vfmsq_f32(c.lo, a.lo, b.lo), vfmsq_f32(c.hi, a.hi, b.hi));
}
NPC_INL __m256 _mm256_max_ps(__m256 a, __m256 b) {
    return NPC_F2(npc_max4(a.lo, b.lo), npc_max4(a.hi, b.hi));
}
NPC_INL __m256 _mm256_min_ps(__m256 a, __m256 b) {
    return NPC_F2(npc_min4(a.lo, b.lo), npc_min4(a.hi, b.hi));
}
/* only round-to-nearest-even is used */
NPC_INL __m256 _mm256_round_ps(__m256 a, const int mode) {
    (void)mode;
    return NPC_F2(vrndnq_f32(a.lo), vrndnq_f32(a.hi));
}
#define NPC_U(v) vreinterpretq_u32_f32(v)
#define NPC_BITS(op, a, b)                                                                     \
    NPC_F2(vreinterpretq_f32_u32(op(NPC_U((a).lo), NPC_U((b).lo))),                           \
           vreinterpretq_f32_u32(op(NPC_U((a).hi), NPC_U((b).hi))))
NPC_INL __m256 _mm256_or_ps(__m256 a, __m256 b) { return NPC_BITS(vorrq_u32, a, b); }
NPC_INL __m256 _mm256_xor_ps(__m256 a, __m256 b) { return NPC_BITS(veorq_u32, a, b); }
/* ~a & b (vbicq takes its operands the other way round) */
NPC_INL __m256 _mm256_andnot_ps(__m256 a, __m256 b) {
    return NPC_F2(vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(b.lo),
                                                  vreinterpretq_u32_f32(a.lo))),
                  vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(b.hi),
                                                  vreinterpretq_u32_f32(a.hi))));
}
/* only the unordered test is used: all ones where a or b is NaN */
NPC_INL __m256 _mm256_cmp_ps(__m256 a, __m256 b, const int pred) {
    (void)pred;
    return NPC_F2(vreinterpretq_f32_u32(vmvnq_u32(vandq_u32(vceqq_f32(a.lo, a.lo),
                                                            vceqq_f32(b.lo, b.lo)))),
                  vreinterpretq_f32_u32(vmvnq_u32(vandq_u32(vceqq_f32(a.hi, a.hi),
                                                            vceqq_f32(b.hi, b.hi)))));
}
NPC_INL int _mm256_movemask_ps(__m256 a) {
    uint32_t s[8];
    vst1q_u32(s, vshrq_n_u32(vreinterpretq_u32_f32(a.lo), 31));
    vst1q_u32(s + 4, vshrq_n_u32(vreinterpretq_u32_f32(a.hi), 31));
    int m = 0;
    for (int i = 0; i < 8; i++) m |= (int)s[i] << i;
    return m;
}
/* [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7] */
NPC_INL __m256 _mm256_hadd_ps(__m256 a, __m256 b) {
    return NPC_F2(vpaddq_f32(a.lo, b.lo), vpaddq_f32(a.hi, b.hi));
}
NPC_INL __m128 _mm256_castps256_ps128(__m256 a) { return a.lo; }
NPC_INL __m128 _mm256_extractf128_ps(__m256 a, const int i) { return i ? a.hi : a.lo; }

/* ---- 256-bit integer */
#define NPC_I2(expr_lo, expr_hi) ((__m256i){expr_lo, expr_hi})
NPC_INL __m256i _mm256_setzero_si256(void) { return NPC_I2(vdupq_n_s32(0), vdupq_n_s32(0)); }
NPC_INL __m256i _mm256_set1_epi32(int v) { return NPC_I2(vdupq_n_s32(v), vdupq_n_s32(v)); }
NPC_INL __m256i _mm256_loadu_si256(const __m256i *p) {
    const uint8_t *b = (const uint8_t *)p;
    return NPC_I2(vreinterpretq_s32_u8(vld1q_u8(b)), vreinterpretq_s32_u8(vld1q_u8(b + 16)));
}
NPC_INL __m256i _mm256_add_epi32(__m256i a, __m256i b) {
    return NPC_I2(vaddq_s32(a.lo, b.lo), vaddq_s32(a.hi, b.hi));
}
NPC_INL __m256i _mm256_slli_epi32(__m256i a, const int n) {
    const int32x4_t s = vdupq_n_s32(n);
    return NPC_I2(vshlq_s32(a.lo, s), vshlq_s32(a.hi, s));
}
/* 16 int8 -> 16 int16 */
NPC_INL __m256i _mm256_cvtepi8_epi16(__m128i a) {
    const int8x16_t b = vreinterpretq_s8_s32(a);
    return NPC_I2(vreinterpretq_s32_s16(vmovl_s8(vget_low_s8(b))),
                  vreinterpretq_s32_s16(vmovl_high_s8(b)));
}
/* int16 pairs multiplied and summed into int32: lane i = a[2i] b[2i] + a[2i+1] b[2i+1] */
NPC_INL int32x4_t npc_madd4(int32x4_t a, int32x4_t b) {
    const int16x8_t x = vreinterpretq_s16_s32(a), y = vreinterpretq_s16_s32(b);
    return vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(y)), vmull_high_s16(x, y));
}
NPC_INL __m256i _mm256_madd_epi16(__m256i a, __m256i b) {
    return NPC_I2(npc_madd4(a.lo, b.lo), npc_madd4(a.hi, b.hi));
}
/* round to nearest even (the MXCSR default) */
NPC_INL __m256i _mm256_cvtps_epi32(__m256 a) {
    return NPC_I2(vcvtnq_s32_f32(a.lo), vcvtnq_s32_f32(a.hi));
}
NPC_INL __m256 _mm256_cvtepi32_ps(__m256i a) {
    return NPC_F2(vcvtq_f32_s32(a.lo), vcvtq_f32_s32(a.hi));
}
NPC_INL __m256 _mm256_castsi256_ps(__m256i a) {
    return NPC_F2(vreinterpretq_f32_s32(a.lo), vreinterpretq_f32_s32(a.hi));
}
NPC_INL __m128i _mm256_castsi256_si128(__m256i a) { return a.lo; }
NPC_INL __m128i _mm256_extracti128_si256(__m256i a, const int i) { return i ? a.hi : a.lo; }

#endif
