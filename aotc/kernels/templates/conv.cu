// Convolution region: ${what}
// Direct convolution, one output element per thread (grid-stride over ${total}):
// out[n, o, *s] = sum over c < ${cg} and the kernel window of
// x[n, group(o) * ${cg} + c, s * stride - pad + k * dilation] * w[o, c, *k];
// padded positions are skipped. Epilogue (bias, activation) on the accumulator.
// Layout NHWC reads x[n, *s, c] and w[o, *k, c] and writes out[n, *s, o]; ${oc} is
// the output-channel coordinate either way.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  for (${idx_t} i = (${idx_t})blockIdx.x * blockDim.x + threadIdx.x; i < ${total};
       i += (${idx_t})gridDim.x * blockDim.x) {
${out_index}
    const ${idx_t} grp = ${oc} / ${og};
    ${acc_t} acc = 0.0f;
    for (${idx_t} c = 0; c < ${cg}; ++c) {
      const ${idx_t} ci = grp * ${cg} + c;
${window}
    }
${epilogue}
  }
}
