// Reduction region: ${what}
// One block per output row (grid-stride over ${rows} rows); threads stride over
// the ${extent} reduced elements, then warp shuffles and shared memory combine
// the partials and thread 0 runs the epilogue. blockDim.x is a multiple of 32.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  __shared__ ${acc_t} partial[32];
  for (${idx_t} row = blockIdx.x; row < ${rows}; row += gridDim.x) {
${row_index}
    ${acc_t} acc = ${init};
    for (${idx_t} r = threadIdx.x; r < ${extent}; r += blockDim.x) {
${load}
    }
    for (int off = 16; off > 0; off >>= 1) {
      ${acc_t} other = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = AOTC_COMBINE_${kind}(acc, other);
    }
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
      acc = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : ${init};
      for (int off = 16; off > 0; off >>= 1) {
        ${acc_t} other = __shfl_xor_sync(0xffffffffu, acc, off);
        acc = AOTC_COMBINE_${kind}(acc, other);
      }
      if (threadIdx.x == 0) {
${epilogue}
      }
    }
    __syncthreads();  // partial[] is reused by the next row
  }
}
