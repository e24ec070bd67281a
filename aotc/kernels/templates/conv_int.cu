// Quantized direct convolution region: ${what}
// out[n, o, *s] = sum over c < ${cg} and the kernel window of x[n, group(o) * ${cg} + c, *q] * w[o, c, *k]
// in 32-bit integers (exact, wrapping mod 2**32 as mma's s32 accumulator does), one output element per
// thread (grid-stride over ${total}); a tap in the padding reads the padding's value (the activation's
// zero point), not 0. The convs the 8-bit GEMM does not take run here: NCHW, grouped, depthwise.
// Layout NHWC reads x[n, *s, c] and w[o, *k, c] and writes out[n, *s, o]; ${oc} is the output channel.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  for (${idx_t} i = (${idx_t})blockIdx.x * blockDim.x + threadIdx.x; i < ${total};
       i += (${idx_t})gridDim.x * blockDim.x) {
${out_index}
    const ${idx_t} grp = ${oc} / ${og};
    unsigned acc = 0u;
    for (${idx_t} c = 0; c < ${cg}; ++c) {
      const ${idx_t} ci = grp * ${cg} + c;
${window}
    }
    const int accv = (int)acc;
${epilogue}
  }
}
