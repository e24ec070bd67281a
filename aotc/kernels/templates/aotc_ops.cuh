// aotc_ops.cuh: scalar helpers the expression emitter calls (aotc/kernels/emitter.py).
// Included after aotc_prelude.cuh by every generated module; compiles under NVRTC
// and under the host emulation alike.
#pragma once

#include "aotc_convert.cuh"

// max/min that propagate NaN like numpy (fmaxf/fminf would drop it).
__device__ __forceinline__ float aotc_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float aotc_min(float a, float b) { return (a != a || a < b) ? a : b; }
__device__ __forceinline__ long long aotc_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ long long aotc_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ int aotc_max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ int aotc_min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ signed char aotc_max(signed char a, signed char b) { return a > b ? a : b; }
__device__ __forceinline__ signed char aotc_min(signed char a, signed char b) { return a < b ? a : b; }
__device__ __forceinline__ unsigned char aotc_max(unsigned char a, unsigned char b) { return a > b ? a : b; }
__device__ __forceinline__ unsigned char aotc_min(unsigned char a, unsigned char b) { return a < b ? a : b; }
__device__ __forceinline__ unsigned int aotc_max(unsigned int a, unsigned int b) { return a > b ? a : b; }
__device__ __forceinline__ unsigned int aotc_min(unsigned int a, unsigned int b) { return a < b ? a : b; }
__device__ __forceinline__ double aotc_max(double a, double b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ double aotc_min(double a, double b) { return (a != a || a < b) ? a : b; }
__device__ __forceinline__ short aotc_max(short a, short b) { return a > b ? a : b; }
__device__ __forceinline__ short aotc_min(short a, short b) { return a < b ? a : b; }
__device__ __forceinline__ unsigned short aotc_max(unsigned short a, unsigned short b) { return a > b ? a : b; }
__device__ __forceinline__ unsigned short aotc_min(unsigned short a, unsigned short b) { return a < b ? a : b; }
__device__ __forceinline__ unsigned long long aotc_max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
__device__ __forceinline__ unsigned long long aotc_min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }

// Reduction combiners, named by reduce kind.
#define AOTC_COMBINE_sum(a, b) ((a) + (b))
#define AOTC_COMBINE_prod(a, b) ((a) * (b))
#define AOTC_COMBINE_max(a, b) aotc_max((a), (b))
#define AOTC_COMBINE_min(a, b) aotc_min((a), (b))

// aotc_warp_min, beside the prelude's aotc_warp_sum/aotc_warp_max (every lane gets the result).
__device__ __forceinline__ float aotc_warp_min(float v) {
  for (int o = 16; o > 0; o >>= 1) v = aotc_min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide float reduction for row kernels: every thread passes its partial,
// every thread gets the result. blockDim.x must be a multiple of 32 and every
// thread of the block must call it (it holds barriers). `sh` is 33 floats of
// shared memory, reusable after the call returns.
#define AOTC_DEFINE_BLOCK_REDUCE(kind, identity)                              \
  __device__ __forceinline__ float aotc_block_##kind(float v, float *sh) {    \
    for (int o = 16; o > 0; o >>= 1)                                          \
      v = AOTC_COMBINE_##kind(v, __shfl_xor_sync(0xffffffffu, v, o));         \
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;                    \
    __syncthreads();                                                          \
    if (threadIdx.x < 32) {                                                   \
      v = threadIdx.x < (blockDim.x >> 5) ? sh[threadIdx.x] : (identity);     \
      for (int o = 16; o > 0; o >>= 1)                                        \
        v = AOTC_COMBINE_##kind(v, __shfl_xor_sync(0xffffffffu, v, o));       \
      if (threadIdx.x == 0) sh[32] = v;                                       \
    }                                                                         \
    __syncthreads();                                                          \
    v = sh[32];                                                               \
    __syncthreads();                                                          \
    return v;                                                                 \
  }
AOTC_DEFINE_BLOCK_REDUCE(sum, 0.0f)
AOTC_DEFINE_BLOCK_REDUCE(max, -AOTC_INF)
AOTC_DEFINE_BLOCK_REDUCE(min, AOTC_INF)
#undef AOTC_DEFINE_BLOCK_REDUCE

// A depthwise output element from the staged patch xs and filters ws (templates/depthwise*.cu):
// the KHxKW taps of channel cc at tile pixel (ty, tx), TC channels per staged pixel.
template <int KH, int KW, int SH, int SW, int DH, int DW, int IW, int TC>
__device__ __forceinline__ float aotc_depthwise_taps(const float *xs, const float *ws, int ty, int tx, int cc) {
  float acc = 0.0f;
#pragma unroll
  for (int ky = 0; ky < KH; ++ky)
#pragma unroll
    for (int kx = 0; kx < KW; ++kx)
      acc += xs[((ty * SH + ky * DH) * IW + tx * SW + kx * DW) * TC + cc] * ws[(ky * KW + kx) * TC + cc];
  return acc;
}
