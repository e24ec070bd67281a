// Tensor-core GEMM region (f32 operands as tf32): ${what}
// C[b, m, n] = sum_k tf32(A[b, m, k]) * tf32(B[b, k, n]) with B=${batch} M=${m} N=${n} K=${k},
// accumulated in f32 (the op's precision='tf32'). 128 threads = 4 warps in a 2x2 grid; block tile
// 64x64, warp tile 32x32 = 2 x 4 mma.m16n8k8 tiles. Each 16-deep K slice of A (64x16) and B
// (stored n-major, 64x16) is staged in shared memory already rounded to tf32 by the region's
// prologue loads; a row pitch of 20 floats keeps the fragment reads conflict-free.
extern "C" __global__ void __launch_bounds__(128) ${name}(${params}) {
  __shared__ float As[64][16 + 4];
  __shared__ float Bs[64][16 + 4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  const ${idx_t} b = ${b_index};
  const ${idx_t} m0 = (${idx_t})blockIdx.y * 64, n0 = (${idx_t})blockIdx.x * 64;
${row_stats}
  float acc[2][4][4];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
  for (${idx_t} k0 = ${k_begin}; k0 < ${k_end}; k0 += 16) {
    for (int l = 0; l < 8; ++l) {
      const int e = threadIdx.x + 128 * l;        // 0..1023: (row, kk) = (e / 16, e % 16)
      const ${idx_t} am = m0 + (e >> 4), ak = k0 + (e & 15);
      float a = 0.0f;
      if (am < ${m} && ak < ${k}) {
${load_a}
      }
      As[e >> 4][e & 15] = aotc_tf32(a);
      const ${idx_t} bn = n0 + (e >> 4), bk = k0 + (e & 15);
      float bv = 0.0f;
      if (bk < ${k} && bn < ${n}) {
${load_b}
      }
      Bs[e >> 4][e & 15] = aotc_tf32(bv);
    }
    __syncthreads();
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
