// Window region (pooling): ${what}
// One output element per thread (grid-stride over ${total}); the window is
// walked in full, positions in the padding are skipped (they hold the
// reduction's identity). Epilogue (e.g. the average's divisor) on the result.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  for (${idx_t} i = (${idx_t})blockIdx.x * blockDim.x + threadIdx.x; i < ${total};
       i += (${idx_t})gridDim.x * blockDim.x) {
${out_index}
    ${acc_t} acc = ${init};
${window}
${epilogue}
  }
}
