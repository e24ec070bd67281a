// aotc_prelude.cuh: the first include of every kernel source aotc generates.
//
// The same source is compiled by NVRTC for the GPU and by g++ for the host
// emulation (cuda_host_emu.h, force-included first, defines AOTC_HOST_EMU), so
// everything here must mean the same thing under both.
//
//   AOTC_INF                       +infinity (NVRTC has no <math.h> INFINITY)
//   AOTC_DYN_SMEM(type, name)      `type *name` = the block's dynamic shared memory
//   AOTC_USE_FP16 (define first)   pulls in __half and __nv_bfloat16
//   aotc_warp_sum / aotc_warp_max  full-warp butterfly reductions; every lane
//                                  gets the result, all 32 lanes must call
//   aotc_tf32(x)                   x rounded to tf32 (cvt.rna: nearest, ties away)
#pragma once

#define AOTC_INF __int_as_float(0x7f800000)

#if defined(AOTC_HOST_EMU)
// Host: `extern __shared__` cannot be spelled with __shared__ = static
// thread_local (pitfall 6), so the emulator hands out the worker's buffer.
#define AOTC_DYN_SMEM(type, name) \
  type *name = reinterpret_cast<type *>(::aotc_emu::dyn_smem())
#else
// One raw byte array for every use, so kernels of one source may view the
// dynamic shared memory with different element types without a conflict.
#define AOTC_DYN_SMEM(type, name)                                        \
  extern __shared__ __align__(16) unsigned char aotc_dyn_smem_raw_[];    \
  type *name = reinterpret_cast<type *>(aotc_dyn_smem_raw_)
#endif

#if defined(AOTC_USE_FP16) && !defined(AOTC_HOST_EMU)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif

__device__ __forceinline__ float aotc_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float aotc_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// f32 -> tf32 (10 mantissa bits) as the tensor cores see it; the value stays a float
// with the low 13 bits clear. Ops with precision='tf32' round their operands with it.
__device__ __forceinline__ float aotc_tf32(float x) {
#if defined(AOTC_HOST_EMU)
  unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  return __uint_as_float(u);
#else
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
#endif
}
