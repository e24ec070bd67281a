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

// Split-K (aotc/kernels/split_k.py): each of a tile's `splits` blocks stores its partial
// sums, then counts itself in at the tile's counter; the block that arrives last gets
// true, resets the counter to 0 for the next launch (the runtime zeroes the counters
// once, when it creates the context) and reads the others' partials with aotc_ld_cg.
__device__ __forceinline__ bool aotc_split_last(unsigned int *counter, unsigned int splits) {
  __shared__ unsigned int aotc_is_last;
  __threadfence();                       // this thread's partials are visible device-wide
  __syncthreads();
  if (threadIdx.x == 0) {
    aotc_is_last = atomicAdd(counter, 1u) == splits - 1;
    if (aotc_is_last) atomicExch(counter, 0u);
  }
  __syncthreads();
  const bool last = aotc_is_last != 0;
  if (last) __threadfence();
  return last;
}

// A load of data other blocks wrote during this launch: through L2, past the (incoherent) L1.
__device__ __forceinline__ float aotc_ld_cg(const float *p) {
#if defined(AOTC_HOST_EMU)
  return *p;
#else
  return __ldcg(p);
#endif
}

// The split-K handoff of one thread's accumulators (aotc/kernels/split_k.py), not inlined:
// one copy per module serves every split kernel, which keeps NVRTC's time down.
// acc[e] (e = i * nj + j) is the tile element (m_at(i), n_at(j)) where m_at(i) = m_base +
// m_step * i, except that `mma` layouts (mma.sync fragments: e = (i*4 + j/2)*4 + r) put
// rows i and i+8 and cols j and j+1 in one fragment. `part` offsets the batch entry into
// a slice, `mine` is this split's slice. Returns false in every block but the tile's last,
// whose acc then holds the partials' sum in split order. Loads bypass L1: other blocks
// wrote the partials during this launch.
__device__ __noinline__ bool aotc_split_handoff(float *acc, bool mma, int m_base, int n_base, float *ws,
                                                long long slice, long long mine, long long part, int splits,
                                                unsigned int *counter, int M, int N) {
  const int count = mma ? 32 : 16;
  for (int e = 0; e < count; ++e) {
    int m, n;
    if (mma) {      // acc[i][j][r]: i < 2, j < 4, r < 4
      const int i = e >> 4, j = (e >> 2) & 3, r = e & 3;
      m = m_base + 16 * i + (r >= 2 ? 8 : 0);
      n = n_base + 8 * j + (r & 1);
    } else {        // acc[i][j]: i, j < 4
      m = m_base + 16 * (e >> 2);
      n = n_base + 16 * (e & 3);
    }
    if (m < M && n < N) ws[mine + part + (long long)m * N + n] = acc[e];
  }
  if (!aotc_split_last(counter, (unsigned int)splits)) return false;
  for (int e = 0; e < count; ++e) {
    int m, n;
    if (mma) {
      const int i = e >> 4, j = (e >> 2) & 3, r = e & 3;
      m = m_base + 16 * i + (r >= 2 ? 8 : 0);
      n = n_base + 8 * j + (r & 1);
    } else {
      m = m_base + 16 * (e >> 2);
      n = n_base + 16 * (e & 3);
    }
    if (m >= M || n >= N) continue;
    const float *p = ws + part + (long long)m * N + n;
    float s = 0.0f;
    for (int q = 0; q < splits; ++q) s += aotc_ld_cg(p + q * slice);
    acc[e] = s;
  }
  return true;
}

// 16 bytes of T, as one vector load/store (loop kernels, see codegen_vector.py).
template <class T>
struct __align__(16) aotc_vec16 {
  T v[16 / sizeof(T)];
};

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
