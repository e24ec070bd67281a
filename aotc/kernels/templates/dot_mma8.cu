// 8-bit tensor-core GEMM region (${elt}): ${what}
// C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with B=${batch} M=${m} N=${n} K=${k}, ${acc_t} accumulators
// (int8: exact, wrapping mod 2**32; fp8: exact products summed in f32). 128 threads = 4 warps in a
// 2x2 grid; block tile 64x64, warp tile 32x32 = 2 x 4 mma.m16n8k32 tiles (aotc_mma8.cuh). Each
// 32-deep K slice of A (64x32) and B (stored n-major, 64x32) is staged in shared memory as bytes
// by the region's prologue loads (mma8_stage.part; mma8_stage4.part four bytes at a time where the
// operand is stored K-contiguous), zero past M, N and K; a fragment register is four consecutive
// k bytes read as one word. Rows are 32 bytes, word w of row r stored at w ^ AOTC_SW8(r) (aotc_mma8.cuh: the upper
// half of the row's words for rows 4..7 of every 8): a warp's fragment reads (8 rows x 4 words)
// and its staging stores (4 rows x 8 words) both hit 32 different banks.
extern "C" __global__ void __launch_bounds__(128) ${name}(${params}) {
  __shared__ __align__(16) unsigned char As[64][32];
  __shared__ __align__(16) unsigned char Bs[64][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  const ${idx_t} b = blockIdx.z;
  const ${idx_t} m0 = (${idx_t})blockIdx.y * 64, n0 = (${idx_t})blockIdx.x * 64;
${row_stats}
  ${acc_t} acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0;
  for (${idx_t} k0 = 0; k0 < ${k}; k0 += 32) {
${stage_a}
${stage_b}
    __syncthreads();
    unsigned af[2][4], bf[4][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = wm + 16 * i + g;
      const int sw = AOTC_SW8(r);                // rows r and r + 8 share it
      af[i][0] = *reinterpret_cast<const unsigned *>(&As[r][4 * (t ^ sw)]);
      af[i][1] = *reinterpret_cast<const unsigned *>(&As[r + 8][4 * (t ^ sw)]);
      af[i][2] = *reinterpret_cast<const unsigned *>(&As[r][4 * ((t + 4) ^ sw)]);
      af[i][3] = *reinterpret_cast<const unsigned *>(&As[r + 8][4 * ((t + 4) ^ sw)]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = wn + 8 * j + g;
      bf[j][0] = *reinterpret_cast<const unsigned *>(&Bs[c][4 * (t ^ AOTC_SW8(c))]);
      bf[j][1] = *reinterpret_cast<const unsigned *>(&Bs[c][4 * ((t + 4) ^ AOTC_SW8(c))]);
    }
    aotc_mma8_tile_${elt}(acc, af, bf);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const ${idx_t} m = m0 + wm + 16 * i + g + (r >= 2 ? 8 : 0);
        const ${idx_t} n = n0 + wn + 8 * j + 2 * t + (r & 1);
        if (m < ${m} && n < ${n}) {
          const ${acc_t} accv = acc[i][j][r];
${epilogue}
        }
      }
    }
  }
}
