// Tensor-core attention region (${elt}): ${what}
// O[b, i, :] = softmax_j(f(Q[b, i, :] . K[b, :, j])) . V[b, j, :] for ${nbatch} batch entries (heads),
// ${sq} queries, ${sk} keys, head dims ${dh} (QK) and ${dv} (V).
// FlashAttention-2 forward on mma.m16n8k16 (f32 accumulate; aotc_mma.cuh, whose host fallback computes
// the same fragments): a block of ${threads} / 32 warps owns ${rows} query rows, 16 a warp (fewer rows a block where
// the grid would leave SMs idle: codegen_attention_mma.rows_per_block); Q (${rows} x ${dh}) and each tile of
// ${bn} keys of K and V are staged per element by the region's loads (its prologue) into XOR-swizzled
// shared memory (16-byte chunk c of row r at c ^ (r % 8): conflict-free for the 8 rows an ldmatrix phase
// reads), and the fragments come by ldmatrix (V's transposed; Q's once a k step, not held in
// registers). Lane (g = lane / 4, t = lane % 4) holds S rows g and g + 8, keys 8n + 2t and 8n + 2t + 1
// of each 8-key n-tile n: the score chain f (scale, mask) runs on each accumulator element with its (i, j), keys past the end score -inf, and the softmax
// is online in f32 (row max and sum over the 4 lanes of a quad), exactly as the SIMT kernel's
// (attention.cu): p = 0 where s = -inf, the running sum rescaled by exp(m_old - m_new). P is rounded to
// ${elt} in the registers it was computed in (m16n8k16's C fragment of two n-tiles is the A fragment of
// one k step), O accumulates in f32 and is rescaled per tile. O / l goes through shared memory (rows of
// ${dv} + 8 floats) so that the epilogue (the region's root store) runs along d, coalesced. Bounds on
// rows and keys are tested only where a static count is no whole number of tiles (`true` otherwise).
#ifndef AOTC_ATTENTION_MMA_PACK_
#define AOTC_ATTENTION_MMA_PACK_
// Two f32 values rounded to one f16x2 / bf16x2 register (the low half first): an A fragment's pair.
__device__ __forceinline__ unsigned aotc_pack_f16_(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  unsigned u;
  memcpy(&u, &h, 4);
  return u;
}
__device__ __forceinline__ unsigned aotc_pack_bf16_(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  unsigned u;
  memcpy(&u, &h, 4);
  return u;
}
#endif
extern "C" __global__ void __launch_bounds__(${threads}, ${min_blocks}) ${name}(${params}) {
  __shared__ __align__(128) unsigned char aotc_smem[${smem_bytes}];
  ${ctype} *Qs = reinterpret_cast<${ctype} *>(aotc_smem);            // ${rows} x ${dh}
  ${ctype} *Ks = Qs + ${rows} * ${dh};                                      // ${bn} x ${dh}
  ${ctype} *Vs = Ks + ${bn} * ${dh};                                   // ${bn} x ${dv}
  float *Os = reinterpret_cast<float *>(aotc_smem);                   // ${rows} x (${dv} + 8), after the loop
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp;                            // this warp's first row of the block's ${rows}
  const ${idx_t} qtiles = (${sq} + ${rows} - 1) / ${rows};
  for (${idx_t} tile = blockIdx.x; tile < (${idx_t})${nbatch} * qtiles; tile += gridDim.x) {
    const ${idx_t} bh = tile / qtiles, i0 = (tile % qtiles) * ${rows};
${batch_index}
    __syncthreads();                                   // the previous tile's Os is consumed
#pragma unroll
    for (int r = 0; r < ${rows} * ${dh} / ${threads}; ++r) {
      const int row = ${q_row};                        // a warp along d: coalesced where d is
      const ${idx_t} i = i0 + row, d = ${q_col};
      float q = 0.0f;
      if (${row_in}) {
${load_q}
      }
      Qs[row * ${dh} + ((((int)d >> 3) ^ (row & 7)) << 3) + ((int)d & 7)] = ${to_elt}(q);
    }
    __syncthreads();
    float o[${dv} / 8][4];
#pragma unroll
    for (int n = 0; n < ${dv} / 8; ++n)
      for (int r = 0; r < 4; ++r) o[n][r] = 0.0f;
    float mrow[2] = {-AOTC_INF, -AOTC_INF}, lrow[2] = {0.0f, 0.0f};
#pragma unroll 1
    for (${idx_t} j0 = 0; j0 < ${sk}; j0 += ${bn}) {    // the main loop (kept rolled for a short sk too)
      __syncthreads();                                 // the previous key tile is consumed
#pragma unroll
      for (int r = 0; r < ${bn} * ${dh} / ${threads}; ++r) {
        const int jj = ${q_row};
        const ${idx_t} j = j0 + jj, d = ${q_col};
        float kv = 0.0f;
        if (${key_in}) {
${load_k}
        }
        Ks[jj * ${dh} + ((((int)d >> 3) ^ (jj & 7)) << 3) + ((int)d & 7)] = ${to_elt}(kv);
      }
#pragma unroll
      for (int r = 0; r < ${bn} * ${dv} / ${threads}; ++r) {
        const int jj = ${v_row};
        const ${idx_t} j = j0 + jj, d = ${v_col};
        float vv = 0.0f;
        if (${key_in}) {
${load_v}
        }
        Vs[jj * ${dv} + ((((int)d >> 3) ^ (jj & 7)) << 3) + ((int)d & 7)] = ${to_elt}(vv);
      }
      __syncthreads();
      float sacc[${bn} / 8][4];                        // S = Q . K^T of the warp's 16 rows x ${bn} keys
#pragma unroll
      for (int n = 0; n < ${bn} / 8; ++n)
        for (int r = 0; r < 4; ++r) sacc[n][r] = 0.0f;
#pragma unroll
      for (int c = 0; c < ${dh} / 16; ++c) {
        unsigned qf[4];
${q_frag}
#pragma unroll
        for (int np = 0; np < ${bn} / 16; ++np) {      // keys 16np + (lane & 7) + 8 (lane >> 4), d chunk 2c + bit 3
          unsigned kf[4];
          const int row = 16 * np + (lane & 7) + 8 * (lane >> 4);
          aotc_ldmatrix_x4(kf, Ks + row * ${dh} + (((2 * c + ((lane >> 3) & 1)) ^ (lane & 7)) << 3));
          const unsigned b0[2] = {kf[0], kf[1]}, b1[2] = {kf[2], kf[3]};
          aotc_mma_m16n8k16_${elt}(sacc[2 * np], qf, b0, sacc[2 * np]);
          aotc_mma_m16n8k16_${elt}(sacc[2 * np + 1], qf, b1, sacc[2 * np + 1]);
        }
      }
#pragma unroll
      for (int n = 0; n < ${bn} / 8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const ${idx_t} i = i0 + r0 + g + 8 * (r >> 1), j = j0 + 8 * n + 2 * t + (r & 1);
          float s = -AOTC_INF;
          if (${row_in} && ${key_in}) {
            const float qk = sacc[n][r];
${score}
          }
          sacc[n][r] = s;
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {                    // rows g + 8h: online max and sum over the quad
        float mt = -AOTC_INF;
#pragma unroll
        for (int n = 0; n < ${bn} / 8; ++n) mt = aotc_max(mt, aotc_max(sacc[n][2 * h], sacc[n][2 * h + 1]));
        for (int off = 1; off < 4; off <<= 1) mt = aotc_max(mt, __shfl_xor_sync(0xffffffffu, mt, off));
        const float m_new = aotc_max(mrow[h], mt);
        // p = 0 where s = -inf and rescale = 0 where the old max is -inf, without branches: exp(-inf) = 0
        // against any finite reference (a row with no finite score yet takes 0)
        const float m_ref = (m_new == -AOTC_INF) ? 0.0f : m_new;
        const float rescale = expf(mrow[h] - m_ref);
        float ps = 0.0f;
#pragma unroll
        for (int n = 0; n < ${bn} / 8; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p = expf(sacc[n][2 * h + c] - m_ref);
            sacc[n][2 * h + c] = p;
            ps += p;
          }
        for (int off = 1; off < 4; off <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
        lrow[h] = lrow[h] * rescale + ps;
        mrow[h] = m_new;
#pragma unroll
        for (int n = 0; n < ${dv} / 8; ++n) {
          o[n][2 * h] *= rescale;
          o[n][2 * h + 1] *= rescale;
        }
      }
#pragma unroll
      for (int kk = 0; kk < ${bn} / 16; ++kk) {        // O += P . V, keys 16kk .. 16kk + 15
        const unsigned pa[4] = {aotc_pack_${elt}_(sacc[2 * kk][0], sacc[2 * kk][1]),
                                aotc_pack_${elt}_(sacc[2 * kk][2], sacc[2 * kk][3]),
                                aotc_pack_${elt}_(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]),
                                aotc_pack_${elt}_(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3])};
#pragma unroll
        for (int np = 0; np < ${dv} / 16; ++np) {      // keys 16kk + (lane & 7) + 8 bit 3, d chunk 2np + (lane >> 4)
          unsigned vf[4];
          const int row = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1);
          aotc_ldmatrix_x4_trans(vf, Vs + row * ${dv} + (((2 * np + (lane >> 4)) ^ (lane & 7)) << 3));
          const unsigned b0[2] = {vf[0], vf[1]}, b1[2] = {vf[2], vf[3]};
          aotc_mma_m16n8k16_${elt}(o[2 * np], pa, b0, o[2 * np]);
          aotc_mma_m16n8k16_${elt}(o[2 * np + 1], pa, b1, o[2 * np + 1]);
        }
      }
    }
    __syncthreads();                                   // every warp is done with the K/V tiles
#pragma unroll
    for (int n = 0; n < ${dv} / 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2 *>(&Os[(r0 + g + 8 * h) * (${dv} + 8) + 8 * n + 2 * t]) =
            make_float2(o[n][2 * h] / lrow[h], o[n][2 * h + 1] / lrow[h]);
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < ${rows} * ${dv} / ${threads}; ++r) {
      const int row = ${v_row};
      const ${idx_t} i = i0 + row, d = ${v_col};
      if (${row_in}) {
        const float accv = Os[row * (${dv} + 8) + (int)d];
${epilogue}
      }
    }
  }
}
