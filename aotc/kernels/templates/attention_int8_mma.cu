// Int8 attention region: ${what}
// O[b, i, :] = epi(sum_j q(softmax_j(f(Q[b, i, :] . K[b, :, j]))) * V[b, j, :]) for ${nbatch} batch
// entries (heads), ${sq} queries, ${sk} keys, head dims ${dh} (QK) and ${dv} (V); Q, K, V and q(P) are
// i8/u8 and both products run on mma.m16n8k32 with exact i32 sums (${qk_mma} for Q.K, ${pv_mma} for
// q(P).V; aotc_mma8.cuh, whose host fallback computes the same fragments). The score chain f (i32 ->
// f32: dequantize, requantize, scale, mask) runs in f32 as the graph says, and q is the graph's
// QuantizeLinear of the normalized probabilities, so the softmax takes two passes over the key
// tiles: pass 1 finds each row's max m and sum l (online), pass 2 recomputes the scores,
// P = exp(s - m) / l, quantizes it and accumulates q(P) . V. No score tensor exists in memory.
// A warp owns 16 query rows (a block of ${warps} warps); a key tile is 32 keys: S = 4 mma n-tiles x ${kc}
// k-chunks (head dim ${dh} padded to ${dk} with zeros). Lane (g = lane / 4, t = lane % 4) holds rows g
// and g + 8, keys 8n + 2t and 8n + 2t + 1 of each n-tile n: element e = 4n + r is row g + 8 (r >> 1),
// key 8n + 2t + (r & 1); a row's statistics reduce over the 4 lanes of a quad. q(P) goes through
// shared memory into A fragments; V is staged transposed (B fragments: 4 keys of one column a word).
// Zero-point sums (sum_d Q per row, sum_d K per key, sum_j V per column, sum_j q(P) per row) are
// taken from the staged tiles where the region reads them; epi is the region's epilogue
// (dequantize, zero-point terms, requantize) on the i32 sum.
extern "C" __global__ void __launch_bounds__(32 * ${warps}) ${name}(${params}) {
  __shared__ unsigned Qw[16 * ${warps}][${dk} / 4 + 1];        // Q rows, 4 bytes a word (d = 4w .. 4w + 3)
  __shared__ unsigned Kw[32][${dk} / 4 + 1];        // K tile rows, likewise
  __shared__ unsigned Vw[${dv8}][9];                // V tile transposed: word w of column d = keys 4w .. 4w + 3
  __shared__ unsigned char Pb[${warps}][16][36];           // each warp's q(P) tile, bytes
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const ${idx_t} qtiles = (${sq} + 16 * ${warps} - 1) / (16 * ${warps});
  for (${idx_t} tile = blockIdx.x; tile < (${idx_t})${nbatch} * qtiles; tile += gridDim.x) {
    const ${idx_t} bh = tile / qtiles, i0 = (tile % qtiles) * (16 * ${warps});
${batch_index}
    __syncthreads();                                 // Qw of the previous tile is consumed
    for (int w = threadIdx.x; w < 16 * ${warps} * (${dk} / 4); w += 32 * ${warps}) {
      const int ii = w / (${dk} / 4), dw = w % (${dk} / 4);
      const ${idx_t} i = i0 + ii;
      unsigned word = 0;
      for (int by = 0; by < 4; ++by) {
        const ${idx_t} d = 4 * dw + by;
        ${q_t} q = 0;
        if (i < ${sq} && d < ${dh}) {
${load_q}
        }
        word |= (unsigned)(unsigned char)q << (8 * by);
      }
      Qw[ii][dw] = word;
    }
    __syncthreads();
    const int r0 = 16 * warp;                        // this warp's first row in the block's tile
    unsigned qa[${kc}][4];
    int qsums[2] = {0, 0};                           // sum_d Q of rows g and g + 8
#pragma unroll
    for (int c = 0; c < ${kc}; ++c) {
      qa[c][0] = Qw[r0 + g][8 * c + t];
      qa[c][1] = Qw[r0 + g + 8][8 * c + t];
      qa[c][2] = Qw[r0 + g][8 * c + t + 4];
      qa[c][3] = Qw[r0 + g + 8][8 * c + t + 4];
    }
    for (int dw = 0; dw < ${dk} / 4; ++dw)
      for (int by = 0; by < 4; ++by) {
        qsums[0] += (${q_t})(Qw[r0 + g][dw] >> (8 * by));
        qsums[1] += (${q_t})(Qw[r0 + g + 8][dw] >> (8 * by));
      }
    float mrow[2] = {-AOTC_INF, -AOTC_INF}, lrow[2] = {0.0f, 0.0f};
    for (int pass = 0; pass < 2; ++pass) {
      int acc[${nt}][4], psums[2] = {0, 0}, vsums[${nt}][2];
#pragma unroll
      for (int n = 0; n < ${nt}; ++n)
        for (int r = 0; r < 4; ++r) acc[n][r] = vsums[n][r & 1] = 0;
      for (${idx_t} j0 = 0; j0 < ${sk}; j0 += 32) {
        __syncthreads();                             // the previous key tile is consumed
        for (int w = threadIdx.x; w < 32 * (${dk} / 4); w += 32 * ${warps}) {
          const int jj = w / (${dk} / 4), dw = w % (${dk} / 4);
          const ${idx_t} j = j0 + jj;
          unsigned word = 0;
          for (int by = 0; by < 4; ++by) {
            const ${idx_t} d = 4 * dw + by;
            ${k_t} kv = 0;
            if (j < ${sk} && d < ${dh}) {
${load_k}
            }
            word |= (unsigned)(unsigned char)kv << (8 * by);
          }
          Kw[jj][dw] = word;
        }
        if (pass == 1) {
          for (int w = threadIdx.x; w < ${dv8} * 8; w += 32 * ${warps}) {
            const int dd = w / 8, jw = w % 8;
            unsigned word = 0;
            for (int by = 0; by < 4; ++by) {
              const ${idx_t} d = dd, j = j0 + 4 * jw + by;
              ${v_t} vv = 0;
              if (j < ${sk} && d < ${dv}) {
${load_v}
              }
              word |= (unsigned)(unsigned char)vv << (8 * by);
            }
            Vw[dd][jw] = word;
          }
        }
        __syncthreads();
        int st[4][4];                                // S fragments of the 4 n-tiles
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          for (int r = 0; r < 4; ++r) st[n][r] = 0;
#pragma unroll
          for (int c = 0; c < ${kc}; ++c) {
            const unsigned kb[2] = {Kw[8 * n + g][8 * c + t], Kw[8 * n + g][8 * c + t + 4]};
            aotc_mma_m16n8k32_${qk_mma}(st[n], qa[c], kb, st[n]);
          }
        }
        float sv[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          const int n = e >> 2, r = e & 3, jj = 8 * n + 2 * t + (r & 1);
          const ${idx_t} i = i0 + r0 + g + 8 * (r >> 1), j = j0 + jj;
          float s = -AOTC_INF;
          if (i < ${sq} && j < ${sk}) {
            const int qk = st[n][r], qsum = qsums[r >> 1];
            int ksum = 0;
            for (int dw = 0; dw < ${dk} / 4; ++dw)
              for (int by = 0; by < 4; ++by) ksum += (${k_t})(Kw[jj][dw] >> (8 * by));
${score}
          }
          sv[e] = s;
        }
        if (pass == 0) {                             // online row max and sum, rows g and g + 8
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float mt = -AOTC_INF;
            for (int e = 0; e < 16; ++e)
              if ((e & 3) >> 1 == h) mt = aotc_max(mt, sv[e]);
            for (int off = 1; off < 4; off <<= 1) mt = aotc_max(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            const float m_new = aotc_max(mrow[h], mt);
            float ps = 0.0f;
            for (int e = 0; e < 16; ++e)
              if ((e & 3) >> 1 == h && sv[e] != -AOTC_INF) ps += expf(sv[e] - m_new);
            for (int off = 1; off < 4; off <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
            const float rescale = (mrow[h] == -AOTC_INF) ? 0.0f : expf(mrow[h] - m_new);
            lrow[h] = lrow[h] * rescale + ps;
            mrow[h] = m_new;
          }
          continue;
        }
#pragma unroll
        for (int e = 0; e < 16; ++e) {               // q(P) of this lane's elements into the warp's tile
          const int n = e >> 2, r = e & 3, jj = 8 * n + 2 * t + (r & 1), row = g + 8 * (r >> 1);
          const ${idx_t} i = i0 + r0 + row, j = j0 + jj;
          int pq = 0;                                // keys past the end contribute nothing
          if (i < ${sq} && j < ${sk}) {
            const float s = sv[e], m = mrow[r >> 1], l = lrow[r >> 1];
${probability}
            psums[r >> 1] += pq;
          }
          Pb[warp][row][jj] = (unsigned char)pq;
        }
        __syncwarp();
        unsigned pa[4];
        for (int h = 0; h < 4; ++h) {                // A fragment: rows g / g + 8, keys 4t .. 4t + 3 (+ 16)
          const int row = g + 8 * (h & 1), k = 4 * t + 16 * (h >> 1);
          pa[h] = (unsigned)Pb[warp][row][k] | (unsigned)Pb[warp][row][k + 1] << 8 |
                  (unsigned)Pb[warp][row][k + 2] << 16 | (unsigned)Pb[warp][row][k + 3] << 24;
        }
#pragma unroll
        for (int n = 0; n < ${nt}; ++n) {
          const unsigned vb[2] = {Vw[8 * n + g][t], Vw[8 * n + g][t + 4]};
          aotc_mma_m16n8k32_${pv_mma}(acc[n], pa, vb, acc[n]);
          for (int c = 0; c < 2; ++c)                // sum_j V of columns 8n + 2t + c (staged 0 past the end)
            for (int jw = 0; jw < 8; ++jw)
              for (int by = 0; by < 4; ++by) vsums[n][c] += (${v_t})(Vw[8 * n + 2 * t + c][jw] >> (8 * by));
        }
        __syncwarp();                                // Pb[warp] is rewritten by the next tile
      }
      for (int h = 0; h < 2; ++h)
        for (int off = 1; off < 4; off <<= 1) psums[h] += __shfl_xor_sync(0xffffffffu, psums[h], off);
      if (pass == 1) {
#pragma unroll
        for (int n = 0; n < ${nt}; ++n)
          for (int r = 0; r < 4; ++r) {
            const ${idx_t} i = i0 + r0 + g + 8 * (r >> 1), d = 8 * n + 2 * t + (r & 1);
            if (i < ${sq} && d < ${dv}) {
              const int accv = acc[n][r], psum = psums[r >> 1], qsum = qsums[r >> 1], vsum = vsums[n][r & 1];
${epilogue}
            }
          }
      }
    }
  }
}
