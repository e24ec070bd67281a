// Tensor-core GEMM region (${elt}): ${what}
// C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with B=${batch} M=${m} N=${n} K=${k}.
// 128 threads = 4 warps in a 2x2 grid; block tile 64x64, warp tile 32x32 =
// 2 x 4 mma.m16n8k16 tiles, f32 accumulators. Each 16-deep K slice of A (64x16)
// and B (64x16) goes into one of ${stages} pipeline stages in XOR-swizzled shared
// memory (mma_staging.py: by 16-byte cp.async where the operand is a plain aligned
// load, else per element by the region's prologue loads); fragments by ldmatrix.
// Iteration `it` waits for slice it - ${stages} + 1, issues slice `it` into the
// stage the barrier just freed, then multiplies the waited slice.
extern "C" __global__ void __launch_bounds__(128) ${name}(${params}) {
  __shared__ __align__(128) ${ctype} As[${stages}][1024];
  __shared__ __align__(128) ${ctype} Bs[${stages}][1024];
  ${include mma_setup.part}
  const ${idx_t} kbeg = ${k_begin}, kend = ${k_end};
  const int nk = (int)((kend - kbeg + 15) / 16);
  for (int it = 0; it < nk + ${stages} - 1; ++it) {
    aotc_cp_async_wait<${stages} - 2>();
    __syncthreads();
    if (it < nk) {
      const int st = it % ${stages};
      const ${idx_t} k0 = kbeg + 16 * it;
${stage_a}
${stage_b}
    }
    aotc_cp_async_commit();
    if (it < ${stages} - 1) continue;
    const int cur = (it - ${stages} + 1) % ${stages};
    unsigned af[2][4], bf[4][2];
${frag_a}
${frag_b}
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) aotc_mma_m16n8k16_${elt}(acc[i][j], af[i], bf[j], acc[i][j]);
  }
  aotc_cp_async_wait<0>();
${split_fixup}
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int r = 0; r < 4; ++r) {
        const ${idx_t} m = m0 + wm + 16 * i + g + (r >= 2 ? 8 : 0);
        const ${idx_t} n = n0 + wn + 8 * j + 2 * t + (r & 1);
        if (m < ${m} && n < ${n}) {
          const float accv = acc[i][j][r];
${epilogue}
        }
      }
    }
  }
}
