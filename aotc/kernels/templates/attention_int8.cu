// Int8 attention region: ${what}
// O[b, i, :] = epi(sum_j q(softmax_j(f(Q[b, i, :] . K[b, :, j]))) * V[b, j, :]) for ${nbatch} batch
// entries (heads), ${sq} queries, ${sk} keys, head dims ${dh} (QK) and ${dv} (V); Q, K, V, P are
// i8/u8, both sums exact in int (SIMT, no tensor cores: a head's dot products are short).
// The score chain f (i32 -> f32: dequantize, requantize, scale, mask) runs in f32 as the graph
// says, and q is the graph's QuantizeLinear of the normalized probabilities, so the softmax takes
// two passes over the key tiles: pass 1 finds each row's max m and sum l (online), pass 2
// recomputes the scores, P = exp(s - m) / l, quantizes it and accumulates q(P) . V (and the row
// sum of q(P), which a zero point on P subtracts times colsum(V) in the epilogue). No score
// tensor exists in memory. Each warp owns one query row, a block owns 8 rows; 32-key tiles of K
// (and V in pass 2) are staged in shared memory; epi is the region's epilogue (dequantize,
// requantize) on the i32 sum.
extern "C" __global__ void __launch_bounds__(256) ${name}(${params}) {
  __shared__ int Ks[32][${dh} + 1];
  __shared__ int Vs[32][${dv} + 1];
  __shared__ int Qs[8][${dh}];
  __shared__ int Ps[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const ${idx_t} qtiles = (${sq} + 7) / 8;
  for (${idx_t} tile = blockIdx.x; tile < (${idx_t})${nbatch} * qtiles; tile += gridDim.x) {
    const ${idx_t} bh = tile / qtiles;
    const ${idx_t} i = (tile % qtiles) * 8 + warp;
${batch_index}
    int qsum = 0;                            // zero-point terms: sum_d Q[i, d] (qsum), sum_d K[j, d]
    for (${idx_t} d = lane; d < ${dh}; d += 32) {   // (ksum) and sum_j V[j, d] (vsum), if the graph asks
      int q = 0;
      if (i < ${sq}) {
${load_q}
      }
      Qs[warp][d] = q;
      qsum += q;
    }
    for (int off = 16; off > 0; off >>= 1) qsum += __shfl_xor_sync(0xffffffffu, qsum, off);
    __syncwarp();
    float m = -AOTC_INF, l = 0.0f;
    for (int pass = 0; pass < 2; ++pass) {
      int acc[${dv_per_lane}], vsum[${dv_per_lane}], psum = 0;   // psum: the row's sum of q(P)
#pragma unroll
      for (int t = 0; t < ${dv_per_lane}; ++t) acc[t] = vsum[t] = 0;
      for (${idx_t} j0 = 0; j0 < ${sk}; j0 += 32) {
        __syncthreads();                     // the previous tile is consumed
#pragma unroll
        for (int r = 0; r < (32 * ${dh} + 255) / 256; ++r) {
          const int e = threadIdx.x + 256 * r;
          if (32 * ${dh} % 256 != 0 && e >= 32 * ${dh}) break;
          const int jj = e / ${dh};
          const ${idx_t} d = e % ${dh}, j = j0 + jj;
          int kv = 0;
          if (j < ${sk}) {
${load_k}
          }
          Ks[jj][d] = kv;
        }
        if (pass == 1) {
#pragma unroll
          for (int r = 0; r < (32 * ${dv} + 255) / 256; ++r) {
            const int e = threadIdx.x + 256 * r;
            if (32 * ${dv} % 256 != 0 && e >= 32 * ${dv}) break;
            const int jj = e / ${dv};
            const ${idx_t} d = e % ${dv}, j = j0 + jj;
            int vv = 0;
            if (j < ${sk}) {
${load_v}
            }
            Vs[jj][d] = vv;
          }
        }
        __syncthreads();
        const ${idx_t} j = j0 + lane;
        float s = -AOTC_INF;
        const bool live = i < ${sq} && j < ${sk};
        if (live) {
          int qk = 0, ksum = 0;
#pragma unroll
          for (int d = 0; d < ${dh}; ++d) {
            qk += Qs[warp][d] * Ks[lane][d];
            ksum += Ks[lane][d];
          }
${score}
        }
        if (pass == 0) {                     // online row max and sum
          float mt = s;
          for (int off = 16; off > 0; off >>= 1) mt = aotc_max(mt, __shfl_xor_sync(0xffffffffu, mt, off));
          const float m_new = aotc_max(m, mt);
          const float p = (s == -AOTC_INF) ? 0.0f : expf(s - m_new);
          const float rescale = (m == -AOTC_INF) ? 0.0f : expf(m - m_new);
          float ps = p;
          for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
          l = l * rescale + ps;
          m = m_new;
          continue;
        }
        int pq = 0;                          // keys past the end contribute nothing
        if (live) {
${probability}
          psum += pq;
        }
        Ps[warp][lane] = pq;                 // broadcast the tile's quantized probabilities
        __syncwarp();
#pragma unroll
        for (int jj = 0; jj < 32; ++jj) {
          const int pj = Ps[warp][jj];
#pragma unroll
          for (int t = 0; t < ${dv_per_lane}; ++t) {
            const int d = lane + 32 * t;
            if (d < ${dv}) {
              acc[t] += pj * Vs[jj][d];
              vsum[t] += Vs[jj][d];              // rows past the end were staged as 0
            }
          }
        }
        __syncwarp();                        // Ps[warp] is rewritten by the next tile
      }
      for (int off = 16; off > 0; off >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, off);
      if (pass == 1 && i < ${sq}) {
#pragma unroll
        for (int t = 0; t < ${dv_per_lane}; ++t) {
          const ${idx_t} d = lane + 32 * t;
          if (d < ${dv}) {
            const int accv = acc[t];
${epilogue}
          }
        }
      }
    }
    __syncwarp();                            // Qs[warp] is rewritten by the next tile
  }
}
