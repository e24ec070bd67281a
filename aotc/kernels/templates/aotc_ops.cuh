// aotc_ops.cuh: scalar helpers the expression emitter calls (aotc/kernels/emitter.py).
// Included after aotc_prelude.cuh by every generated module; compiles under NVRTC
// and under the host emulation alike.
#pragma once

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

// Reduction combiners, named by reduce kind.
#define AOTC_COMBINE_sum(a, b) ((a) + (b))
#define AOTC_COMBINE_prod(a, b) ((a) * (b))
#define AOTC_COMBINE_max(a, b) aotc_max((a), (b))
#define AOTC_COMBINE_min(a, b) aotc_min((a), (b))
