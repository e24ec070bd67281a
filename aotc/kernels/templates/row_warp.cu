// Row region, one row per warp: ${what}
// Rows of ${extent} elements are short, so each of the block's ${warps} warps owns a row
// (grid-stride over ${rows} rows). The region's reductions run as warp-wide phases (a
// shuffle butterfly gives every lane the result), each recomputing its input with the
// earlier phases' results as per-row scalars; a last pass stores the row's outputs.
// No shared memory and no barriers.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  const int lane = threadIdx.x & 31;
  for (${idx_t} row = (${idx_t})blockIdx.x * ${warps} + (threadIdx.x >> 5); row < ${rows};
       row += (${idx_t})gridDim.x * ${warps}) {
${row_index}
${phases}
    for (${idx_t} c = lane; c < ${extent}; c += 32) {
${store}
    }
  }
}
