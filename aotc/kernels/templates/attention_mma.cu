// Tensor-core attention region (${elt}): ${what}
// O[b, i, :] = softmax_j(f(Q[b, i, :] . K[b, :, j])) . V[b, j, :] for ${nbatch} batch entries (heads),
// ${sq} queries, ${sk} keys, head dims ${dh} (QK) and ${dv} (V).
// FlashAttention-2 forward on mma.m16n8k16 (f32 accumulate; aotc_mma.cuh, whose host fallback computes
// the same fragments): a block of ${threads} / 32 warps owns ${rows} query rows, 16 a row group, and splits each
// staged tile of ${kstage} keys in ${splits} (codegen_attention_mma.block_form: warp w takes rows 16 (w % groups)
// and keys ${bn} (w / groups) of each staged tile; with keys split, each warp keeps its own online softmax and the
// block merges the partial (m, l, O) at the end, flash-decoding inside a block); Q (${rows} x ${dh}) and each tile of
// ${kstage} keys of K and V are copied by cp.async where a plain aligned view (attention_views.py), else staged
// per element by the region's loads (its prologue), into XOR-swizzled
// shared memory (16-byte chunk c of row r at c ^ (r % 8): conflict-free for the 8 rows an ldmatrix phase
// reads), and the fragments come by ldmatrix (V's transposed; Q's once a k step, not held in
// registers). Lane (g = lane / 4, t = lane % 4) holds S rows g and g + 8, keys 8n + 2t and 8n + 2t + 1
// of each 8-key n-tile n: the score chain f (scale, mask) runs on each accumulator element with its (i, j), keys past the end score -inf, and the softmax
// is online in f32 (row max and sum over the 4 lanes of a quad), exactly as the SIMT kernel's
// (attention.cu): p = 0 where s = -inf, the running sum rescaled by exp(m_old - m_new). P is rounded to
// ${elt} in the registers it was computed in (m16n8k16's C fragment of two n-tiles is the A fragment of
// one k step), O accumulates in f32 and is rescaled per tile. O / l (keys split: each share's O weighted by
// exp(m_w - m) / sum_w exp(m_w - m) l_w, summed by the epilogue) goes through shared memory (rows of
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
  ${ctype} *Ks = Qs + ${rows} * ${dh};                                      // ${kstage} x ${dh}
  ${ctype} *Vs = Ks + ${kstage} * ${dh};                                   // ${kstage} x ${dv}
  float *Os = reinterpret_cast<float *>(aotc_smem);                   // ${splits} x ${rows} x (${dv} + 8), after the loop
${merge_smem}
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int r0 = ${r0};                            // this warp's first row of the block's ${rows}
  const int kb = ${kb};                            // this warp's first key of each staged tile
  const ${idx_t} qtiles = (${sq} + ${rows} - 1) / ${rows};
${tiles}
}
