// GEMM region: ${what}
// C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with B=${batch} M=${m} N=${n} K=${k}.
// Block tile ${bm}x${bn} (split_k.choose_tiling: 64x64, 64x32, 32x64, 32x32 or 16x32), K tile 16, ${threads}
// threads each owning a 4x4 micro-tile (rows ty + ${rows}*i, cols tx + ${cols}*j). Shared memory is
// double-buffered: the next K tile is fetched into registers while the current one is multiplied, so
// there is one barrier per K tile. Operand loads run the region's prologue (transposes, broadcasts,
// reshapes) as index math; the epilogue (bias, activation, residual) runs on the accumulators before
// the single store. Split-K launches (aotc/kernels/split_k.py) sum one K range per block; the tile's
// last block adds the partials in a fixed order and runs the epilogue.
extern "C" __global__ void __launch_bounds__(${threads}${min_blocks}) ${name}(${params}) {
  // rows of bm + 2 (bn + 2): a warp's stores of 16 k x 2 rows hit 32 distinct banks (2k + row); a
  // split-K launch's handoff reuses the memory for its tile (split_k_simt.part)
  __shared__ __align__(16) ${acc_t} aotc_smem[${smem_elems}];
  ${acc_t} (*As)[16][${bm} + 2] = reinterpret_cast<${acc_t} (*)[16][${bm} + 2]>(aotc_smem);   // As[buf][k][m]
  ${acc_t} (*Bs)[16][${bn} + 2] =
      reinterpret_cast<${acc_t} (*)[16][${bn} + 2]>(aotc_smem + 2 * 16 * (${bm} + 2));     // Bs[buf][k][n]
  const int tx = threadIdx.x & ${cols_mask}, ty = threadIdx.x >> ${cols_shift};
  const ${idx_t} b = ${b_index};
  const ${idx_t} m0 = (${idx_t})blockIdx.y * ${bm}, n0 = (${idx_t})blockIdx.x * ${bn};
${row_stats}
  ${acc_t} acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  ${acc_t} ra[${a_loads}], rb[${b_loads}];
  // A tile: ${bm} (m) x 16 (k); thread t loads k = t & 15, m = (t >> 4) + ${a_step}*l.
  // B tile: 16 (k) x ${bn} (n); thread t loads (k, n) = (${b_kk}, ${b_nn}): along n where B's
  // n is contiguous in memory, along k (as A) where its k is.
  // Software pipeline with one fetch site (half the code to compile): step kt fetches tile kt
  // into registers, multiplies tile kt-1 from shared memory while those loads are in flight,
  // then stores tile kt into the other buffer. One barrier per step.
  const ${idx_t} kbeg = ${k_begin};
  const ${idx_t} tiles = (${k_end} - kbeg + 15) / 16;
  int cur = 0;
  for (${idx_t} kt = 0; kt <= tiles; ++kt) {
    if (kt < tiles) {
      const ${idx_t} k0 = kbeg + kt * 16;
    for (int l = 0; l < ${a_loads}; ++l) {
      const ${idx_t} am = m0 + (threadIdx.x >> 4) + ${a_step} * l;
      const ${idx_t} ak = k0 + (threadIdx.x & 15);
      ${acc_t} a = 0.0f;
      if (am < ${m} && ak < ${k}) {
${load_a}
      }
      ra[l] = a;
    }
    for (int l = 0; l < ${b_loads}; ++l) {
      const ${idx_t} bk = k0 + ${b_kk};
      const ${idx_t} bn = n0 + ${b_nn};
      ${acc_t} bv = 0.0f;
      if (bk < ${k} && bn < ${n}) {
${load_b}
      }
      rb[l] = bv;
    }
    }
    if (kt > 0) {
      const int prev = cur ^ 1;
#pragma unroll
      for (int kk = 0; kk < 16; ++kk) {
        ${acc_t} av[4], bw[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = As[prev][kk][ty + ${rows} * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bw[j] = Bs[prev][kk][tx + ${cols} * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) ${mad}
      }
    }
    if (kt < tiles) {
#pragma unroll
      for (int l = 0; l < ${a_loads}; ++l) As[cur][threadIdx.x & 15][(threadIdx.x >> 4) + ${a_step} * l] = ra[l];
#pragma unroll
      for (int l = 0; l < ${b_loads}; ++l) Bs[cur][${b_kk}][${b_nn}] = rb[l];
    }
    __syncthreads();
    cur ^= 1;
  }
${split_fixup}
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const ${idx_t} m = m0 + ty + ${rows} * i, n = n0 + tx + ${cols} * j;
      if (m < ${m} && n < ${n}) {
        const ${acc_t} accv = acc[i][j];
${epilogue}
      }
    }
  }
}
