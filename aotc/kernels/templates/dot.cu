// GEMM region: ${what}
// C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with B=${batch} M=${m} N=${n} K=${k}.
// A 16x16 output tile per block of 16x16 threads; 16-deep K tiles of A and B are
// staged in shared memory (padded to dodge bank conflicts). Operand loads run
// the region's prologue (transposes, broadcasts, elementwise) as index math;
// the epilogue (bias, activation, residual) runs on the accumulator.
extern "C" __global__ void __launch_bounds__(256) ${name}(${params}) {
  __shared__ float As[16][17];
  __shared__ float Bs[16][17];
  const ${idx_t} b = blockIdx.z;
  const ${idx_t} m = (${idx_t})blockIdx.y * 16 + threadIdx.y;
  const ${idx_t} n = (${idx_t})blockIdx.x * 16 + threadIdx.x;
  float acc = 0.0f;
  for (${idx_t} k0 = 0; k0 < ${k}; k0 += 16) {
    {
      const ${idx_t} am = m, ak = k0 + threadIdx.x;
      float a = 0.0f;
      if (am < ${m} && ak < ${k}) {
${load_a}
      }
      As[threadIdx.y][threadIdx.x] = a;
    }
    {
      const ${idx_t} bk = k0 + threadIdx.y, bn = n;
      float bv = 0.0f;
      if (bk < ${k} && bn < ${n}) {
${load_b}
      }
      Bs[threadIdx.y][threadIdx.x] = bv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
    __syncthreads();
  }
  if (m < ${m} && n < ${n}) {
${epilogue}
  }
}
