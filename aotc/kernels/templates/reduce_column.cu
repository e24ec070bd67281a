// Reduction region, one output per thread: ${what}
// The innermost axis is kept and the reduced extent (${extent}) is short (NHWC pooling over
// the spatial axes), so consecutive threads take consecutive outputs and each walks its
// inputs in turn: a warp's loads are coalesced along the kept axis, as are its stores.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  for (${idx_t} row = (${idx_t})blockIdx.x * blockDim.x + threadIdx.x; row < ${rows};
       row += (${idx_t})gridDim.x * blockDim.x) {
${row_index}
    ${acc_t} acc = ${init};
    for (${idx_t} r = 0; r < ${extent}; ++r) {
${load}
    }
${epilogue}
  }
}
