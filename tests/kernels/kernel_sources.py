"""CUDA C kernels shared by the host-emulation and NVRTC tests.

Written the way aotc's code generator writes kernels (prelude first, dynamic
shared memory through AOTC_DYN_SMEM, full-warp collectives), so the very same
text is compiled by NVRTC for sm_80/sm_90 and by g++ for the host.
"""

SOURCE = r"""
#define AOTC_USE_FP16
#include "aotc_prelude.cuh"

// y = gelu(x) with a grid-stride loop; (n,) f32.
extern "C" __global__ void ew_gelu_f32(const float *__restrict__ x, float *__restrict__ y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
}

// Per block: block_sum[b] = sum of x over the block's elements (0 past n).
// Per lane: warp_sum[i] = the butterfly sum of its warp (every lane checked),
// scan[i] = inclusive warp prefix sum, bcast[i] = lane 3's value of its
// 16-lane half, vote[i] = ballot/any/all/__syncthreads_count checks packed.
extern "C" __global__ void __launch_bounds__(1024)
block_reduce(const float *x, float *block_sum, float *warp_sum, float *scan, float *bcast,
             int *vote, int n) {
  __shared__ float partial[32];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float v = i < n ? x[i] : 0.0f;
  float w = aotc_warp_sum(v);
  warp_sum[i] = w;
  float s = v;
  for (int o = 1; o < 32; o <<= 1) {
    float t = __shfl_up_sync(0xffffffffu, s, o);
    if (lane >= o) s += t;
  }
  scan[i] = s;
  bcast[i] = __shfl_sync(0xffffffffu, v, 3, 16);
  unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
  int any_big = __any_sync(0xffffffffu, v > 2.0f);
  int all_small = __all_sync(0xffffffffu, v < 10.0f);
  int count = __syncthreads_count(v > 0.0f);
  vote[i] = (int)(__popc(b) + 33 * any_big + 33 * 2 * all_small) + 1000 * count;
  if (lane == 0) partial[warp] = w;
  __syncthreads();
  if (warp == 0) {
    float p = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) p += __shfl_down_sync(0xffffffffu, p, o);
    if (lane == 0) block_sum[blockIdx.x] = p;
  }
}

// One block per row: y[r, :] = softmax(x[r, :]); (rows, cols) f32. The row
// is staged in dynamic shared memory: cols floats + 32 floats of scratch.
extern "C" __global__ void softmax_rows(const float *x, float *y, int cols) {
  AOTC_DYN_SMEM(float, row);
  float *scratch = row + cols;
  const float *xr = x + (size_t)blockIdx.x * cols;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  float m = -AOTC_INF;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    row[c] = xr[c];
    m = fmaxf(m, row[c]);
  }
  m = aotc_warp_max(m);
  if (lane == 0) scratch[warp] = m;
  __syncthreads();
  m = aotc_warp_max(lane < nwarps ? scratch[lane] : -AOTC_INF);
  __syncthreads();
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    row[c] = __expf(row[c] - m);
    s += row[c];
  }
  s = aotc_warp_sum(s);
  if (lane == 0) scratch[warp] = s;
  __syncthreads();
  s = aotc_warp_sum(lane < nwarps ? scratch[lane] : 0.0f);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[(size_t)blockIdx.x * cols + c] = __fdividef(row[c], s);
}

// total[0] += sum(x) with float atomics; hist[k] counts x in [k, k+1).
extern "C" __global__ void atomics(const float *x, float *total, int *hist, unsigned *maxbits,
                                   int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(total, x[i]);
    atomicAdd(&hist[min(max((int)floorf(x[i]), 0), 7)], 1);
    atomicMax(maxbits, __float_as_uint(x[i]));  // x >= 0, so bits order like floats
  }
}

// out = a * b + a in half precision (__hfma), bf = bf16(a * 2) widened to f32,
// swapped[i] = a[i ^ 1] through a __half shuffle (n even).
extern "C" __global__ void ew_half(const __half *a, const __half *b, __half *out,
                                   float *bf, __half *swapped, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  __half s = __shfl_xor_sync(0xffffffffu, a[min(i, n - 1)], 1);
  if (i >= n) return;
  swapped[i] = s;
  out[i] = __hfma(a[i], b[i], a[i]);
  __nv_bfloat16 t = __float2bfloat16(__half2float(a[i]) * 2.0f);
  bf[i] = __bfloat162float(t);
}

// y = x^T; x is (rows, cols) f32. 32x32 tiles, 32x8 blocks, padded smem.
extern "C" __global__ void transpose(const float *x, float *y, int rows, int cols) {
  __shared__ float tile[32][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    int r = blockIdx.y * 32 + k;
    if (r < rows && c < cols) tile[k][threadIdx.x] = x[(size_t)r * cols + c];
  }
  __syncthreads();
  int r = blockIdx.y * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    int cc = blockIdx.x * 32 + k;
    if (cc < cols && r < rows) y[(size_t)cc * rows + r] = tile[threadIdx.x][k];
  }
}
"""

KERNELS = ["ew_gelu_f32", "block_reduce", "softmax_rows", "atomics", "ew_half", "transpose"]

# Lane 0 waits at the barrier while lanes 1..31 wait for lane 0 in a shuffle.
DEADLOCK_SOURCE = r"""
#include "aotc_prelude.cuh"
extern "C" __global__ void stuck(float *y) {
  float v = threadIdx.x;
  if (threadIdx.x == 0) __syncthreads();
  else v = __shfl_xor_sync(0xffffffffu, v, 1);
  y[threadIdx.x] = v;
}
"""
