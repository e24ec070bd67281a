// Tensor-core GEMM region (${elt}): ${what}
// C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with B=${batch} M=${m} N=${n} K=${k}.
// 128 threads = 4 warps in a 2x2 grid; block tile ${bm}x${bn} (split_k.choose_tiling), warp tile
// ${warp_m}x${warp_n} = ${mi} x ${nj} mma.m16n8k16 tiles, f32 accumulators. Each 64-deep K stage of A
// (${bm}x64) and B (${bn}x64) goes into one of two stage buffers of XOR-swizzled shared memory
// (mma_staging.py: by 16-byte cp.async where the operand is a plain aligned load,
// its addresses hoisted out of the loop, else per element by the region's prologue
// loads); fragments by ldmatrix, one k16 step ahead (mma_mainloop.part). An
// unaligned bound input takes a second copy of the loop that stages per element.
// The accumulators then go to a ${bm}x${bn} f32 tile in the same shared memory, where
// split-K meets (split_k_tile.part) and the epilogue runs along n
// (mma_store_smem.part), or from the registers for a gated epilogue
// (mma_store_regs.part).
// __launch_bounds__(128, 1): no occupancy for ptxas to chase. Without the minimum it squeezed BERT's
// batch-1 GEMMs into 40-86 registers by recomputing the swizzled ldmatrix addresses from %tid inside the
// K loop (a 64x64 tile: 242 instructions a two-stage iteration, 170 with it, 112 registers; 32x32: 136
// and 81); every tile of the e2e models stays within 128 registers, 4 blocks an SM (the profile checks).
// The 32x128 tile takes a minimum of 4, which holds it to those 128 (mma_staging.min_blocks).
extern "C" __global__ void __launch_bounds__(128, ${min_blocks}) ${name}(${params}) {
  // the stage buffers, reused by the epilogue (mma_store_smem.part)
  __shared__ __align__(128) unsigned char aotc_smem[${smem_bytes}];
  ${ctype} (*As)[${a_stage}] = reinterpret_cast<${ctype} (*)[${a_stage}]>(aotc_smem);
  ${ctype} (*Bs)[${b_stage}] = reinterpret_cast<${ctype} (*)[${b_stage}]>(aotc_smem + ${b_base});
  ${include mma_setup.part}
  const ${idx_t} kbeg = ${k_begin}, kend = ${k_end};
  const int nk = (int)((kend - kbeg + 63) / 64);
${mainloop}
  // the accumulators to a ${bm}x${bn} f32 tile over the stages (rows of ${c_stride}: the float2 stores of a
  // half-warp hit 16 distinct bank pairs), for the split-K handoff and the epilogue
  __syncthreads();                               // every warp is done with the stages
  float *Cs = reinterpret_cast<float *>(aotc_smem);
#pragma unroll
  for (int i = 0; i < ${mi}; ++i)
#pragma unroll
    for (int j = 0; j < ${nj}; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2 *>(&Cs[(wm + 16 * i + g + 8 * h) * ${c_stride} + wn + 8 * j + 2 * t]) =
            make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
  __syncthreads();
${split_fixup}
${store}
}
