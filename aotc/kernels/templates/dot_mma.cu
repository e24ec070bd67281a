// Tensor-core GEMM region (${elt}): ${what}
// C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with B=${batch} M=${m} N=${n} K=${k}.
// 128 threads = 4 warps in a 2x2 grid; block tile 64x64, warp tile 32x32 =
// 2 x 4 mma.m16n8k16 tiles, f32 accumulators. Each 16-deep K slice of A (64x16)
// and B (stored n-major, 64x16) is staged in shared memory as ${elt} by the
// region's prologue loads; fragments are read as packed 32-bit pairs.
extern "C" __global__ void __launch_bounds__(128) ${name}(${params}) {
  __shared__ __align__(16) ${ctype} As[64][16 + 8];
  __shared__ __align__(16) ${ctype} Bs[64][16 + 8];
  ${include mma_setup.part}
  for (${idx_t} k0 = ${k_begin}; k0 < ${k_end}; k0 += 16) {
    ${include mma_stage.part}
    unsigned af[2][4], bf[4][2];
    for (int i = 0; i < 2; ++i) {
      const int r = wm + 16 * i + g;
      af[i][0] = *reinterpret_cast<const unsigned *>(&As[r][2 * t]);
      af[i][1] = *reinterpret_cast<const unsigned *>(&As[r + 8][2 * t]);
      af[i][2] = *reinterpret_cast<const unsigned *>(&As[r][2 * t + 8]);
      af[i][3] = *reinterpret_cast<const unsigned *>(&As[r + 8][2 * t + 8]);
    }
    for (int j = 0; j < 4; ++j) {
      const int c = wn + 8 * j + g;
      bf[j][0] = *reinterpret_cast<const unsigned *>(&Bs[c][2 * t]);
      bf[j][1] = *reinterpret_cast<const unsigned *>(&Bs[c][2 * t + 8]);
    }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) aotc_mma_m16n8k16_${elt}(acc[i][j], af[i], bf[j], acc[i][j]);
    __syncthreads();
  }
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
