// aotc_mma8.cuh: aotc's 8-bit tensor-core wrappers (int8 and fp8 e4m3), each with a host fallback.
//
// aotc_mma_m16n8k32_<a><b>(d, a, b, c), <a>, <b> in {s8, u8}: one warp computes
// D(16x8, s32) = A(16x32, row) * B(32x8, col) + C, products exact and sums wrapping mod 2**32
// (mma.sync.aligned.m16n8k32.row.col.s32.<a>.<b>.s32, sm_80+, no .satfinite).
// aotc_mma_m16n8k32_e4m3(d, a, b, c): the same shape with float8 e4m3 operands and f32 C/D
// (mma...f32.e4m3.e4m3.f32, sm_89+ and PTX ISA 8.4: only the sm_90 cubin and PTX use it).
// Fragments as PTX's mma.m16n8k32 defines them for 8-bit types (g = lane / 4, t = lane % 4;
// each register holds four consecutive k values, the lowest in the low byte):
//   a[0] = A[g][4t..4t+3]      a[1] = A[g+8][4t..4t+3]
//   a[2] = A[g][4t+16..4t+19]  a[3] = A[g+8][4t+16..4t+19]
//   b[0] = B[4t..4t+3][g]      b[1] = B[4t+16..4t+19][g]
//   c/d[0..1] = C[g][2t..2t+1]   c/d[2..3] = C[g+8][2t..2t+1]
// Where the e4m3 instruction does not exist (__CUDA_ARCH__ < 890, the sm_80 cubin) the fp8
// wrapper widens each operand byte to f16 (exact: every e4m3 value is an f16) and runs two
// mma.m16n8k16.f16 on the same registers: k = 4t..4t+3 of a register become the f16 k pairs
// (2t, 2t+1) and (2t+8, 2t+9), the same permutation for A and B, so each product meets its
// partner; f16 x f16 products are exact in f32 as e4m3 x e4m3 ones are. On the host the 32
// lanes publish their fragments in a per-warp scratch, synchronize, and each lane computes its
// four outputs: integers in unsigned (wrapping) arithmetic, fp8 as exact products summed in f32.
// aotc_mma8_tile_<kind>(acc, af, bf) is dot_mma8.cu's 32x32 warp tile (2 x 4 of these); the sm_80
// fp8 tile widens its fragments once per tile. The fragment layouts were checked against the PTX
// ISA's m16n8k32 figures; tests/kernels/test_mma8_wrappers.py packs fragments from them.
#pragma once
#include "aotc_mma.cuh"

// The XOR swizzle of dot_mma8.cu's shared tiles (32-byte rows): word w of row r lives at
// w ^ AOTC_SW8(r), the other half of the row's eight words for rows 4..7 of every 8.
#define AOTC_SW8(row) ((((row) >> 2) & 1) << 2)

// The value of an e4m3 (OCP "e4m3fn": bias 7, no infinities, S.1111.111 = NaN) bit pattern.
__device__ __forceinline__ float aotc_e4m3_to_float(unsigned bits) {
  const unsigned e = (bits >> 3) & 15u, m = bits & 7u;
  float v;
  if (e == 15u && m == 7u) v = __uint_as_float(0x7fc00000u);
  else if (e == 0u) v = (float)m * 0.001953125f;                       // m * 2^-9
  else v = __uint_as_float(((e + 120u) << 23) | (m << 20));           // 2^(e-7) * (1 + m/8)
  return (bits & 0x80u) ? -v : v;
}

// The e4m3 bit pattern of `x`, rounded to nearest even and saturated to +-448 (ONNX's saturate
// cast); NaN gives NaN. Values that came from e4m3 round-trip exactly.
__device__ __forceinline__ unsigned char aotc_float_to_e4m3(float x) {
  const unsigned u = __float_as_uint(x), sign = (u >> 24) & 0x80u;
  const unsigned mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return (unsigned char)(sign | 0x7fu);
  if (mag >= 0x43e00000u) return (unsigned char)(sign | 0x7eu);     // >= 448 (and inf): saturate
  const int exp = (int)(mag >> 23) - 127;
  if (exp < -6) {                                 // subnormal in e4m3: a multiple of 2^-9
    const float q = __uint_as_float(mag) * 512.0f;      // exact scaling
    const float r = rintf(q);                     // round half even
    return (unsigned char)(sign | (unsigned)r);   // r == 8 is the smallest normal's pattern
  }
  const unsigned mant = mag & 0x7fffffu, keep = mant >> 20, rest = mant & 0xfffffu;
  unsigned out = ((unsigned)(exp + 7) << 3) | keep;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++out;    // carries into the exponent
  if (out > 0x7eu) out = 0x7eu;
  return (unsigned char)(sign | out);
}

// The f16 bit pattern of an e4m3 one (exact: f16 has more exponent and significand bits); integer
// arithmetic only, so the sm_80 build needs no cuda_fp16.h.
__device__ __forceinline__ unsigned aotc_e4m3_to_f16_bits(unsigned bits) {
  const unsigned sign = (bits & 0x80u) << 8, e = (bits >> 3) & 15u, m = bits & 7u;
  if (e == 15u && m == 7u) return sign | 0x7e00u;                     // NaN
  if (e != 0u) return sign | ((e + 8u) << 10) | (m << 7);               // rebias 7 -> 15
  if (m == 0u) return sign;
  const unsigned p = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);                // m * 2^-9 = 2^(p-9) * (m / 2^p)
  return sign | ((p + 6u) << 10) | ((m - (1u << p)) << (10u - p));
}

// Two e4m3 bytes (bits 16*h .. 16*h+15 of `w`) as an f16x2 register, low element first.
__device__ __forceinline__ unsigned aotc_e4m3x2_to_f16x2_(unsigned w, int h) {
  return aotc_e4m3_to_f16_bits((w >> (16 * h)) & 0xffu) | (aotc_e4m3_to_f16_bits((w >> (16 * h + 8)) & 0xffu) << 16);
}

// Half `s` of the k range (k 0..15 from a[0], a[1], b[0]; k 16..31 from a[2], a[3], b[1]) as one f16 mma.
__device__ __forceinline__ void aotc_e4m3_half_on_f16_(float d[4], const unsigned a[4], const unsigned b[2],
                                                       const float c[4], int s) {
  const unsigned ah[4] = {aotc_e4m3x2_to_f16x2_(a[2 * s], 0), aotc_e4m3x2_to_f16x2_(a[2 * s + 1], 0),
                          aotc_e4m3x2_to_f16x2_(a[2 * s], 1), aotc_e4m3x2_to_f16x2_(a[2 * s + 1], 1)};
  const unsigned bh[2] = {aotc_e4m3x2_to_f16x2_(b[s], 0), aotc_e4m3x2_to_f16x2_(b[s], 1)};
  aotc_mma_m16n8k16_f16(d, ah, bh, c);
}

// The e4m3 mma on f16 tensor cores (the sm_80 cubin's path; also built on the host, where the tests
// check it): two m16n8k16 f16 mma, the second accumulating onto the first.
__device__ __forceinline__ void aotc_mma_m16n8k32_e4m3_on_f16(float d[4], const unsigned a[4], const unsigned b[2],
                                                              const float c[4]) {
  float mid[4];
  aotc_e4m3_half_on_f16_(mid, a, b, c, 0);
  aotc_e4m3_half_on_f16_(d, a, b, mid, 1);
}

#if defined(AOTC_HOST_EMU)

enum { AOTC_MMA8_U8 = 0, AOTC_MMA8_S8 = 1, AOTC_MMA8_E4M3 = 2 };

// Element k (0..31) of row `row` of A, or of column `col` of B, from the warp's published fragments.
__device__ __forceinline__ unsigned aotc_mma8_a_(const unsigned (*s)[6], int row, int k) {
  const unsigned w = s[(row & 7) * 4 + (k & 15) / 4][(row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0)];
  return (w >> (8 * (k & 3))) & 0xffu;
}
__device__ __forceinline__ unsigned aotc_mma8_b_(const unsigned (*s)[6], int col, int k) {
  const unsigned w = s[col * 4 + (k & 15) / 4][4 + (k >= 16 ? 1 : 0)];
  return (w >> (8 * (k & 3))) & 0xffu;
}
__device__ __forceinline__ unsigned aotc_mma8_int_(unsigned byte, int kind) {
  return kind == AOTC_MMA8_S8 ? (unsigned)(int)(signed char)byte : byte;   // sign-extend, mod 2**32
}

// The four outputs of this lane; `di`/`ci` for integer kinds, `df`/`cf` for e4m3.
__device__ __forceinline__ void aotc_mma8_host_(int di[4], float df[4], const unsigned a[4], const unsigned b[2],
                                                const int ci[4], const float cf[4], int akind, int bkind) {
  AOTC_SAN_SCOPE;  // the scratch is the emulator's, not the kernel's traffic (sanitizer, profile)
  __shared__ unsigned scratch8[32][32][6];     // [warp][lane][a0..a3, b0, b1]
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned warp = tid >> 5, lane = tid & 31;
  for (int r = 0; r < 4; ++r) scratch8[warp][lane][r] = a[r];
  scratch8[warp][lane][4] = b[0];
  scratch8[warp][lane][5] = b[1];
  __syncwarp();
  const unsigned (*s)[6] = scratch8[warp];
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    if (akind == AOTC_MMA8_E4M3) {
      float sum = 0.0f;
      for (int k = 0; k < 32; ++k)
        sum += aotc_e4m3_to_float(aotc_mma8_a_(s, row, k)) * aotc_e4m3_to_float(aotc_mma8_b_(s, col, k));
      df[i] = cf[i] + sum;
    } else {
      unsigned sum = (unsigned)ci[i];
      for (int k = 0; k < 32; ++k)
        sum += aotc_mma8_int_(aotc_mma8_a_(s, row, k), akind) * aotc_mma8_int_(aotc_mma8_b_(s, col, k), bkind);
      di[i] = (int)sum;
    }
  }
  __syncwarp();                                  // the scratch is reused by the next call
}

#define AOTC_MMA8_INT(AT, BT, AK, BK)                                                                   \
  __device__ __forceinline__ void aotc_mma_m16n8k32_##AT##BT(int d[4], const unsigned a[4],           \
                                                               const unsigned b[2], const int c[4]) {  \
    aotc_mma8_host_(d, nullptr, a, b, c, nullptr, AK, BK);                                            \
  }
AOTC_MMA8_INT(s8, s8, AOTC_MMA8_S8, AOTC_MMA8_S8)
AOTC_MMA8_INT(s8, u8, AOTC_MMA8_S8, AOTC_MMA8_U8)
AOTC_MMA8_INT(u8, s8, AOTC_MMA8_U8, AOTC_MMA8_S8)
AOTC_MMA8_INT(u8, u8, AOTC_MMA8_U8, AOTC_MMA8_U8)
#undef AOTC_MMA8_INT

__device__ __forceinline__ void aotc_mma_m16n8k32_e4m3(float d[4], const unsigned a[4], const unsigned b[2],
                                                       const float c[4]) {
  aotc_mma8_host_(nullptr, d, a, b, nullptr, c, AOTC_MMA8_E4M3, AOTC_MMA8_E4M3);
}

#else

#define AOTC_MMA8_INT(AT, BT)                                                                          \
  __device__ __forceinline__ void aotc_mma_m16n8k32_##AT##BT(int d[4], const unsigned a[4],          \
                                                               const unsigned b[2], const int c[4]) { \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." #AT "." #BT ".s32 {%0,%1,%2,%3}, "          \
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"                                      \
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),                  \
                   "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));                                       \
  }
AOTC_MMA8_INT(s8, s8)
AOTC_MMA8_INT(s8, u8)
AOTC_MMA8_INT(u8, s8)
AOTC_MMA8_INT(u8, u8)
#undef AOTC_MMA8_INT

__device__ __forceinline__ void aotc_mma_m16n8k32_e4m3(float d[4], const unsigned a[4], const unsigned b[2],
                                                       const float c[4]) {
#if __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  aotc_mma_m16n8k32_e4m3_on_f16(d, a, b, c);
#endif
}

#endif

// A warp's 32x32 tile of dot_mma8.cu: acc[i][j] += A fragment i (rows 16i..16i+15) x B fragment j
// (columns 8j..8j+7), 2 x 4 mma.m16n8k32. On sm_80 the fp8 tile widens each fragment to f16 once
// (6 conversions, not 16) and runs its 16 f16 mma (k 0..15, then 16..31, as the per-mma path does).
#define AOTC_MMA8_TILE_INT(AT, BT)                                                                   \
  __device__ __forceinline__ void aotc_mma8_tile_##AT##BT(int acc[2][4][4], const unsigned af[2][4],  \
                                                           const unsigned bf[4][2]) {                 \
    _Pragma("unroll") for (int i = 0; i < 2; ++i)                                                   \
      _Pragma("unroll") for (int j = 0; j < 4; ++j)                                                 \
        aotc_mma_m16n8k32_##AT##BT(acc[i][j], af[i], bf[j], acc[i][j]);                             \
  }
AOTC_MMA8_TILE_INT(s8, s8)
AOTC_MMA8_TILE_INT(s8, u8)
AOTC_MMA8_TILE_INT(u8, s8)
AOTC_MMA8_TILE_INT(u8, u8)
#undef AOTC_MMA8_TILE_INT

// The fp8 tile on f16 tensor cores (the sm_80 cubin's; built on the host too, where the tests check it).
__device__ __forceinline__ void aotc_mma8_tile_e4m3_on_f16(float acc[2][4][4], const unsigned af[2][4],
                                                           const unsigned bf[4][2]) {
  unsigned ah[2][2][4], bh[4][2][2];              // [fragment][k half][f16x2 registers]
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      ah[i][s][0] = aotc_e4m3x2_to_f16x2_(af[i][2 * s], 0);
      ah[i][s][1] = aotc_e4m3x2_to_f16x2_(af[i][2 * s + 1], 0);
      ah[i][s][2] = aotc_e4m3x2_to_f16x2_(af[i][2 * s], 1);
      ah[i][s][3] = aotc_e4m3x2_to_f16x2_(af[i][2 * s + 1], 1);
    }
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      bh[j][s][0] = aotc_e4m3x2_to_f16x2_(bf[j][s], 0);
      bh[j][s][1] = aotc_e4m3x2_to_f16x2_(bf[j][s], 1);
    }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float mid[4];
      aotc_mma_m16n8k16_f16(mid, ah[i][0], bh[j][0], acc[i][j]);
      aotc_mma_m16n8k16_f16(acc[i][j], ah[i][1], bh[j][1], mid);
    }
}

__device__ __forceinline__ void aotc_mma8_tile_e4m3(float acc[2][4][4], const unsigned af[2][4],
                                                    const unsigned bf[4][2]) {
#if defined(AOTC_HOST_EMU) || __CUDA_ARCH__ >= 890
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) aotc_mma_m16n8k32_e4m3(acc[i][j], af[i], bf[j], acc[i][j]);
#else
  aotc_mma8_tile_e4m3_on_f16(acc, af, bf);
#endif
}
