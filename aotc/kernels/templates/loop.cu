// Loop region: ${what}
// Grid-stride over ${total} elements; every shape is baked in. Parameters: the
// region's inputs, then its output. A vector loop (codegen_vector.py) may first
// compute runs of 16 bytes per thread; the scalar loop does the rest.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
${vector}
  for (${idx_t} i = ${scalar_start} + (${idx_t})blockIdx.x * blockDim.x + threadIdx.x; i < ${total};
       i += (${idx_t})gridDim.x * blockDim.x) {
${body}
  }
}
