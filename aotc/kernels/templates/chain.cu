// Chain region: ${what}
// One block per image (grid-stride over ${batch}): the phases run in turn, each writing its
// ${sizes} values per image to shared memory for the next (a pool, then GEMVs over it); the
// last phase stores the result. Barriers separate the phases.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  __shared__ float aotc_chain[${smem_floats}];   // the phases' results, one after another
  for (${idx_t} n = blockIdx.x; n < ${batch}; n += gridDim.x) {
${phases}
  }
}
