// Depthwise + pointwise convolution region: ${what}
// NHWC. d = the depthwise conv (${kh}x${kw}, stride ${sh}x${sw}) with its epilogue, over ${chans} channels;
// out[n, oh, ow, o] = sum over c of d[n, oh, ow, c] * wp[o, c] (${oc} outputs), then the epilogue.
// A block owns a ${th}x${tw} tile of output pixels and ${per_split} channels (split ${splits} ways
// over the grid's y). It walks them ${tc} at a time: it stages the input patch and the filters in
// shared memory as the depthwise kernel does, keeps the chunk's depthwise result in shared memory
// (ds, never in global memory) and multiplies it into per-thread partial sums of its tile's
// ${oc} outputs; thread t owns outputs e = t + ${block} * r (pixel e / ${oc}, channel e % ${oc}).
// With several splits the partials meet as split-K partials: the tile's last block adds them in
// split order and runs the epilogue.
extern "C" __global__ void __launch_bounds__(${block}) ${name}(${params}) {
  __shared__ float smem[${smem_floats}];
  float *xs = smem, *ws = smem + ${ih} * ${iw} * ${tc}, *ds = smem + ${stage_floats};
  const ${idx_t} oh0 = (${idx_t})(blockIdx.x / ${tiles_w}) * ${th};
  const ${idx_t} ow0 = (${idx_t})(blockIdx.x % ${tiles_w}) * ${tw};
  const ${idx_t} n = blockIdx.z;
  float pacc[${reps}];
#pragma unroll
  for (int r = 0; r < ${reps}; ++r) pacc[r] = 0.0f;
  for (int chunk = 0; chunk < ${chunks}; ++chunk) {
    const ${idx_t} c0 = ((${idx_t})blockIdx.y * ${chunks} + chunk) * ${tc};
    if (c0 >= ${chans}) break;            // the same for every thread of the block
    ${include depthwise_stage.part}
    __syncthreads();
    {
      const int cc = threadIdx.x % ${tc};
      const ${idx_t} c = c0 + cc;
      for (int p = threadIdx.x / ${tc}; p < ${th} * ${tw}; p += ${lanes}) {
        const int ty = p / ${tw}, tx = p % ${tw};
        const ${idx_t} oh = oh0 + ty, ow = ow0 + tx;
        float d = 0.0f;
        if (c < ${chans} && oh < ${out_h} && ow < ${out_w}) {
          const float acc = aotc_depthwise_taps<${kh}, ${kw}, ${sh}, ${sw}, ${dh}, ${dw}, ${iw}, ${tc}>(xs, ws, ty, tx, cc);
${dw_value}
        }
        ds[p * (${tc} + 1) + cc] = d;
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ${reps}; ++r) {
      const int e = threadIdx.x + ${block} * r;
      if (e < ${th} * ${tw} * ${oc}) {
        const int p = e / ${oc};
        const ${idx_t} o = e % ${oc};
        float s = pacc[r];
        for (int cc = 0; cc < ${tc} && c0 + cc < ${chans}; ++cc) {
          const ${idx_t} c = c0 + cc;
${load_wp}
          s += ds[p * (${tc} + 1) + cc] * wv;
        }
        pacc[r] = s;
      }
    }
    __syncthreads();                      // ds and the staging buffers are refilled next chunk
  }
${split_fixup}
#pragma unroll
  for (int r = 0; r < ${reps}; ++r) {
    const int e = threadIdx.x + ${block} * r;
    if (e >= ${th} * ${tw} * ${oc}) continue;
    const int p = e / ${oc};
    const ${idx_t} oh = oh0 + p / ${tw}, ow = ow0 + p % ${tw};
    if (oh >= ${out_h} || ow >= ${out_w}) continue;
    const ${idx_t} m = (n * ${out_h} + oh) * ${out_w} + ow;
    {
      const ${idx_t} b = 0, n = e % ${oc};
      const float accv = pacc[r];
      (void)b;
${epilogue}
    }
  }
}
