// Tensor-core GEMM region (f32 operands as tf32): ${what}
// C[b, m, n] = sum_k tf32(A[b, m, k]) * tf32(B[b, k, n]) with B=${batch} M=${m} N=${n} K=${k},
// accumulated in f32 (the op's precision='tf32'). 128 threads = 4 warps in a 2x2 grid; block tile
// 64x64, warp tile 32x32 = 2 x 4 mma.m16n8k8 tiles. Each 16-deep K slice of A (64x16) and B
// (stored n-major, 64x16) is staged in shared memory already rounded to tf32 by the region's
// prologue loads; a row pitch of 20 floats keeps the fragment reads conflict-free.
extern "C" __global__ void __launch_bounds__(128) ${name}(${params}) {
  __shared__ float As[64][16 + 4];
  __shared__ float Bs[64][16 + 4];
  ${include mma_setup.part}
  for (${idx_t} k0 = ${k_begin}; k0 < ${k_end}; k0 += 16) {
    ${include mma_stage.part}
    for (int s = 0; s < 16; s += 8) {
      unsigned af[2][4], bf[4][2];
      for (int i = 0; i < 2; ++i) {
        const int r = wm + 16 * i + g;
        af[i][0] = __float_as_uint(As[r][s + t]);
        af[i][1] = __float_as_uint(As[r + 8][s + t]);
        af[i][2] = __float_as_uint(As[r][s + t + 4]);
        af[i][3] = __float_as_uint(As[r + 8][s + t + 4]);
      }
      for (int j = 0; j < 4; ++j) {
        const int c = wn + 8 * j + g;
        bf[j][0] = __float_as_uint(Bs[c][s + t]);
        bf[j][1] = __float_as_uint(Bs[c][s + t + 4]);
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) aotc_mma_m16n8k8_tf32(acc[i][j], af[i], bf[j], acc[i][j]);
    }
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
