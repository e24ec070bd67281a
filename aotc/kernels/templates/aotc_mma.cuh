// aotc_mma.cuh: aotc's own tensor-core wrappers, each with a host fallback.
//
// aotc_mma_m16n8k16_<t>(d, a, b, c): one warp computes D(16x8, f32) =
// A(16x16, row) * B(16x8, col) + C with t = f16 or bf16 inputs, fragments laid
// out as PTX's mma.m16n8k16 defines them (g = lane / 4, t = lane % 4):
//   a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//   a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
//   b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
//   c/d[0..1] = C[g][2t..2t+1]   c/d[2..3] = C[g+8][2t..2t+1]
// aotc_mma_m16n8k8_tf32(d, a, b, c): D(16x8) = A(16x8, row) * B(8x8, col) + C with
// tf32 inputs (f32 bit patterns already rounded by aotc_tf32), one element per register:
//   a[0] = A[g][t]   a[1] = A[g+8][t]   a[2] = A[g][t+4]   a[3] = A[g+8][t+4]
//   b[0] = B[t][g]   b[1] = B[t+4][g]   c/d as above.
// On the GPU each is one mma.sync instruction (sm_80+). On the host the 32 lanes
// publish their fragments in a per-warp scratch, synchronize, and each lane
// computes its four outputs in f32: the same arithmetic contract.
#pragma once

#if defined(AOTC_HOST_EMU)
#include <cstring>

enum { AOTC_MMA_F16 = 0, AOTC_MMA_BF16 = 1, AOTC_MMA_TF32 = 2 };

// Element `elem` of a fragment register as f32: one of two 16-bit halves, or a tf32
// (of which the hardware reads the top 19 bits).
__device__ __forceinline__ float aotc_mma_operand_(unsigned word, int elem, int kind) {
  if (kind == AOTC_MMA_TF32) return __uint_as_float(word & 0xffffe000u);
  const unsigned short bits = (unsigned short)(elem ? (word >> 16) : (word & 0xffffu));
  if (kind == AOTC_MMA_BF16) {
    __nv_bfloat16 h;
    std::memcpy(&h, &bits, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(&h, &bits, 2);
  return __half2float(h);
}

// All three shapes share one layout rule: along k, the first half of the depth lives in
// a[0..1]/b[0] and the second in a[2..3]/b[1]; within a half, lane t holds `per` consecutive
// k values (2 for 16-bit types, 1 for tf32); rows g and g+8 are a[even] and a[odd].
__device__ __forceinline__ void aotc_mma_host_(float d[4], const unsigned a[4], const unsigned b[2],
                                               const float c[4], int kind) {
  AOTC_SAN_SCOPE;  // the scratch is the emulator's, not the kernel's traffic (sanitizer, profile)
  __shared__ unsigned scratch[32][32][6];      // [warp][lane][a0..a3, b0, b1]
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned warp = tid >> 5, lane = tid & 31;
  for (int r = 0; r < 4; ++r) scratch[warp][lane][r] = a[r];
  scratch[warp][lane][4] = b[0];
  scratch[warp][lane][5] = b[1];
  __syncwarp();
  const int depth = kind == AOTC_MMA_TF32 ? 8 : 16, per = kind == AOTC_MMA_TF32 ? 1 : 2, half = depth / 2;
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float sum = 0.0f;
    for (int k = 0; k < depth; ++k) {
      const int kk = k % half, hi = k >= half ? 1 : 0;
      const unsigned aw = scratch[warp][(row & 7) * 4 + kk / per][(row >= 8 ? 1 : 0) + 2 * hi];
      const unsigned bw = scratch[warp][col * 4 + kk / per][4 + hi];
      sum += aotc_mma_operand_(aw, kk % per, kind) * aotc_mma_operand_(bw, kk % per, kind);
    }
    d[i] = c[i] + sum;
  }
  __syncwarp();                                  // the scratch is reused by the next call
}

__device__ __forceinline__ void aotc_mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2],
                                                      const float c[4]) {
  aotc_mma_host_(d, a, b, c, AOTC_MMA_F16);
}
__device__ __forceinline__ void aotc_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                                       const float c[4]) {
  aotc_mma_host_(d, a, b, c, AOTC_MMA_BF16);
}
__device__ __forceinline__ void aotc_mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2],
                                                      const float c[4]) {
  aotc_mma_host_(d, a, b, c, AOTC_MMA_TF32);
}

#else

__device__ __forceinline__ void aotc_mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2],
                                                      const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ void aotc_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                                       const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ void aotc_mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2],
                                                      const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

#endif
