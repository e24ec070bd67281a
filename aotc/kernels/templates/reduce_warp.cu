// Reduction region, one row per warp: ${what}
// Rows of ${extent} elements are short, so each of the block's ${warps} warps owns a row
// (grid-stride over ${rows} rows): lanes stride over the row, a shuffle butterfly combines
// them and lane 0 runs the epilogue. No shared memory and no barriers; a block packs
// ${warps} rows where one block per row would leave most of its threads idle.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  const int lane = threadIdx.x & 31;
  for (${idx_t} row = (${idx_t})blockIdx.x * ${warps} + (threadIdx.x >> 5); row < ${rows};
       row += (${idx_t})gridDim.x * ${warps}) {
${row_index}
    ${acc_t} acc = ${init};
    for (${idx_t} r = lane; r < ${extent}; r += 32) {
${load}
    }
    for (int off = 16; off > 0; off >>= 1) {
      ${acc_t} other = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = AOTC_COMBINE_${kind}(acc, other);
    }
    if (lane == 0) {
${epilogue}
    }
  }
}
