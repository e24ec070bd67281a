// Row region: ${what}
// One block per row (grid-stride over ${rows} rows of ${extent} elements).
// The region's reductions (softmax's max and sum, a norm's mean and variance)
// run as block-wide phases over the row, each phase recomputing its input from
// global memory with the earlier phases' results as per-row scalars; a last
// pass computes and stores the row's outputs. blockDim.x is a multiple of 32.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  __shared__ float aotc_sh[33];
  for (${idx_t} row = blockIdx.x; row < ${rows}; row += gridDim.x) {
${row_index}
${phases}
    for (${idx_t} c = threadIdx.x; c < ${extent}; c += blockDim.x) {
${store}
    }
  }
}
