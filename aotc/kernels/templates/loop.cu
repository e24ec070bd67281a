// Loop region: ${what}
// One output element per thread, grid-stride over ${total} elements; every
// shape is baked in. Parameters: the region's inputs, then its output.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  for (${idx_t} i = (${idx_t})blockIdx.x * blockDim.x + threadIdx.x; i < ${total};
       i += (${idx_t})gridDim.x * blockDim.x) {
${body}
  }
}
