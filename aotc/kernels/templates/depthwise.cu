// Depthwise convolution region: ${what}
// NHWC, one ${kh}x${kw} filter per channel:
// out[n, oh, ow, c] = sum over (ky, kx) of x[n, oh*${sh} - ${ph} + ky*${dh}, ow*${sw} - ${pw} + kx*${dw}, c] * w[c, ky, kx, 0].
// A block computes a ${th}x${tw} tile of output pixels for ${tc} channels. The input patch the tile
// needs (${ih}x${iw} pixels, zero where it falls in the padding) and the ${tc} filters are staged in
// shared memory once, so each input element comes from global memory once per tile rather than once
// per tap. Threads are channel-fastest: global loads and stores of NHWC rows are coalesced and the
// shared-memory reads of a warp hit consecutive banks. Epilogue (bias, activation) on the accumulator.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  __shared__ float xs[${ih} * ${iw} * ${tc}];
  __shared__ float ws[${kh} * ${kw} * ${tc}];
  const ${idx_t} oh0 = (${idx_t})(blockIdx.x / ${tiles_w}) * ${th};
  const ${idx_t} ow0 = (${idx_t})(blockIdx.x % ${tiles_w}) * ${tw};
  const ${idx_t} c0 = (${idx_t})blockIdx.y * ${tc};
  const ${idx_t} n = blockIdx.z;
  ${include depthwise_stage.part}
  __syncthreads();
  const int cc = threadIdx.x % ${tc};
  const ${idx_t} c = c0 + cc;
  for (int p = threadIdx.x / ${tc}; p < ${th} * ${tw}; p += ${lanes}) {
    const int ty = p / ${tw}, tx = p % ${tw};
    const ${idx_t} oh = oh0 + ty, ow = ow0 + tx;
    if (c >= ${chans} || oh >= ${out_h} || ow >= ${out_w}) continue;
    const float acc = aotc_depthwise_taps<${kh}, ${kw}, ${sh}, ${sw}, ${dh}, ${dw}, ${iw}, ${tc}>(xs, ws, ty, tx, cc);
${epilogue}
  }
}
