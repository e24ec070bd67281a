// Attention region: ${what}
// O[b, i, :] = softmax_j(f(Q[b, i, :] . K[b, :, j])) . V[b, j, :] for ${nbatch} batch
// entries (heads), ${sq} queries, ${sk} keys, head dims ${dh} (QK) and ${dv} (V).
// Flash-attention forward: each warp owns one query row, a block owns 8 rows;
// 32-key tiles of K and V are staged in shared memory; the softmax is computed
// online (running max m, running sum l, rescaled accumulator), so the S x S
// score matrix never exists. f is the region's score chain (scale, mask). The
// staging, Q.K and P.V loops are unrolled, so the key-tile loop is the main loop.
extern "C" __global__ void __launch_bounds__(256) ${name}(${params}) {
  __shared__ float Ks[32][${dh} + 1];
  __shared__ float Vs[32][${dv} + 1];
  __shared__ float Qs[8][${dh}];
  __shared__ float Ps[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const ${idx_t} qtiles = (${sq} + 7) / 8;
  for (${idx_t} tile = blockIdx.x; tile < (${idx_t})${nbatch} * qtiles; tile += gridDim.x) {
    const ${idx_t} bh = tile / qtiles;
    const ${idx_t} i = (tile % qtiles) * 8 + warp;
${batch_index}
    for (${idx_t} d = lane; d < ${dh}; d += 32) {
      float q = 0.0f;
      if (i < ${sq}) {
${load_q}
      }
      Qs[warp][d] = q;
    }
    __syncwarp();
    float m = -AOTC_INF, l = 0.0f;
    float o[${dv_per_lane}];
#pragma unroll
    for (int t = 0; t < ${dv_per_lane}; ++t) o[t] = 0.0f;
    for (${idx_t} j0 = 0; j0 < ${sk}; j0 += 32) {
      __syncthreads();                       // the previous tile is consumed
#pragma unroll
      for (int r = 0; r < (32 * ${dh} + 255) / 256; ++r) {   // constant trips: unrolled, not a loop of its own
        const int e = threadIdx.x + 256 * r;
        if (32 * ${dh} % 256 != 0 && e >= 32 * ${dh}) break;
        const int jj = e / ${dh};
        const ${idx_t} d = e % ${dh}, j = j0 + jj;
        float kv = 0.0f;
        if (j < ${sk}) {
${load_k}
        }
        Ks[jj][d] = kv;
      }
#pragma unroll
      for (int r = 0; r < (32 * ${dv} + 255) / 256; ++r) {
        const int e = threadIdx.x + 256 * r;
        if (32 * ${dv} % 256 != 0 && e >= 32 * ${dv}) break;
        const int jj = e / ${dv};
        const ${idx_t} d = e % ${dv}, j = j0 + jj;
        float vv = 0.0f;
        if (j < ${sk}) {
${load_v}
        }
        Vs[jj][d] = vv;
      }
      __syncthreads();
      const ${idx_t} j = j0 + lane;
      float s = -AOTC_INF;
      if (i < ${sq} && j < ${sk}) {
        float qk = 0.0f;
#pragma unroll
        for (int d = 0; d < ${dh}; ++d) qk += Qs[warp][d] * Ks[lane][d];
${score}
      }
      float mt = s;
      for (int off = 16; off > 0; off >>= 1) mt = aotc_max(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float m_new = aotc_max(m, mt);
      const float p = (s == -AOTC_INF) ? 0.0f : expf(s - m_new);
      const float rescale = (m == -AOTC_INF) ? 0.0f : expf(m - m_new);
      float ps = p;
      for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
      l = l * rescale + ps;
#pragma unroll
      for (int t = 0; t < ${dv_per_lane}; ++t) o[t] *= rescale;
      Ps[warp][lane] = p;                    // broadcast the tile's probabilities
      __syncwarp();
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        const float pj = Ps[warp][jj];
#pragma unroll
        for (int t = 0; t < ${dv_per_lane}; ++t) {
          const int d = lane + 32 * t;
          if (d < ${dv}) o[t] += pj * Vs[jj][d];
        }
      }
      m = m_new;
      __syncwarp();                          // Ps[warp] is rewritten by the next tile
    }
    if (i < ${sq}) {
#pragma unroll
      for (int t = 0; t < ${dv_per_lane}; ++t) {
        const ${idx_t} d = lane + 32 * t;
        if (d < ${dv}) {
          const float accv = o[t] / l;
${epilogue}
        }
      }
    }
    __syncwarp();                            // Qs[warp] is rewritten by the next tile
  }
}
