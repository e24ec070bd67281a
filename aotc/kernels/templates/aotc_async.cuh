// aotc_async.cuh: aotc's wrappers around Ampere's asynchronous copy and ldmatrix, each with a host fallback.
//
// aotc_cp_async_16/8/4(dst, src, src_bytes): one thread starts a copy of 16/8/4 bytes from global `src`
//   to shared `dst` (both aligned to the size); only the first `src_bytes` (0..size) are read, the rest
//   of `dst` is zero-filled (PTX cp.async's src-size form: predicated-off and out-of-bounds tails).
// aotc_cp_async_16_at(base, off, src, src_bytes): the same into shared memory `off` bytes past `base`.
// aotc_cp_async_commit(): closes this thread's copies issued since the last commit into one group.
// aotc_cp_async_wait<N>(): waits until at most N of this thread's committed groups are still in flight
//   (cp.async.wait_group N); aotc_cp_async_wait_all() commits and waits for everything. Copies land in
//   shared memory only then: other threads see them after a __syncthreads that follows the wait.
// aotc_ldmatrix_x1/x2/x4[_trans](r, row): one warp loads 1/2/4 8x8 matrices of 16-bit elements from shared
//   memory (ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16). Lane 8*i + j gives the address of row j of
//   matrix i (16 bytes, 16-byte aligned; lanes past 8*N give none); lane l receives in r[i] the elements
//   (l/4, 2*(l%4)) and (l/4, 2*(l%4)+1) of matrix i, low half first; with _trans the elements
//   (2*(l%4), l/4) and (2*(l%4)+1, l/4), i.e. the same fragment of the transposed matrix.
// aotc_ldmatrix_x4[_trans]_at(r, base, off): the same with this lane's row `off` bytes past `base`, so that
//   a kernel keeps its per-lane offsets in registers and the constant parts fold into the instruction.
// On the GPU each is one PTX instruction (sm_80+). On the host a copy reads its source when it is issued
// and writes its destination when the wait retires its group, from a queue per CUDA thread: a kernel that
// reads before it waits reads the old contents, as it may on the GPU (and the sanitizer sees the store at
// the wait). ldmatrix's rows are read as the hardware reads them, one 16-byte load per addressing lane, and
// handed to the receiving lanes through a per-warp scratch, so the profile counts the real traffic.
#pragma once

#if defined(AOTC_HOST_EMU)
#include <vector>

namespace aotc_async_ {

struct Copy {
  unsigned char *dst;
  uint4 data;
  unsigned size, group;
};
// One CUDA thread's copies in flight, in issue order; `open` is the group the next copy joins.
struct Queue {
  const void *worker = nullptr;
  uint64_t block = ~0ull;
  unsigned open = 0;
  std::vector<Copy> copies;
};
// Per OS worker (a worker runs one block at a time), indexed by the CUDA thread.
inline thread_local std::vector<Queue> queues;

AOTC_EMU_NOSAN inline Queue &queue() {
  AOTC_SAN_SCOPE;
  aotc_emu::Worker *w = aotc_emu::tl_worker;
  if (queues.size() < w->launch->nthreads) queues.resize(w->launch->nthreads);
  Queue &q = queues[w->cur_tid];
  const uint64_t block = blockIdx.x + (uint64_t)gridDim.x * (blockIdx.y + (uint64_t)gridDim.y * blockIdx.z);
  if (q.worker != w || q.block != block) {     // first use by this block's thread: nothing in flight
    q.worker = w;
    q.block = block;
    q.open = 0;
    q.copies.clear();
  }
  return q;
}

AOTC_EMU_NOSAN inline void push(void *dst, const uint4 &data, unsigned size) {
  AOTC_SAN_SCOPE;
  Queue &q = queue();
  q.copies.push_back(Copy{static_cast<unsigned char *>(dst), data, size, q.open});
}

AOTC_EMU_NOSAN inline void commit() {
  AOTC_SAN_SCOPE;
  Queue &q = queue();
  q.open++;
}

// The oldest copy whose group is older than the newest `pending` committed groups, removed from the
// queue; false when none is left to retire.
AOTC_EMU_NOSAN inline bool retire_one(unsigned pending, unsigned char **dst, uint4 *data, unsigned *size) {
  AOTC_SAN_SCOPE;
  Queue &q = queue();
  if (q.copies.empty() || q.copies.front().group + pending >= q.open) return false;
  const Copy c = q.copies.front();
  q.copies.erase(q.copies.begin());
  *dst = c.dst;
  *data = c.data;
  *size = c.size;
  return true;
}

// The source read is kernel code (the sanitizer checks its bounds and alignment, the profile counts it).
template <unsigned kSize>
__device__ __forceinline__ void issue(void *dst, const void *src, unsigned src_bytes) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (src_bytes >= kSize) {
    if (kSize == 16) v = *static_cast<const uint4 *>(src);
    if (kSize == 8) {
      const uint2 h = *static_cast<const uint2 *>(src);
      v.x = h.x;
      v.y = h.y;
    }
    if (kSize == 4) v.x = *static_cast<const unsigned *>(src);
  } else {
    unsigned char bytes[16] = {0};
    for (unsigned i = 0; i < src_bytes; ++i) bytes[i] = static_cast<const unsigned char *>(src)[i];
    memcpy(&v, bytes, 16);
  }
  push(dst, v, kSize);
}

}  // namespace aotc_async_

__device__ __forceinline__ void aotc_cp_async_16(void *dst, const void *src, unsigned src_bytes) {
  aotc_async_::issue<16>(dst, src, src_bytes);
}
__device__ __forceinline__ void aotc_cp_async_8(void *dst, const void *src, unsigned src_bytes) {
  aotc_async_::issue<8>(dst, src, src_bytes);
}
__device__ __forceinline__ void aotc_cp_async_4(void *dst, const void *src, unsigned src_bytes) {
  aotc_async_::issue<4>(dst, src, src_bytes);
}
__device__ __forceinline__ void aotc_cp_async_16_at(void *base, unsigned off, const void *src, unsigned src_bytes) {
  aotc_async_::issue<16>(static_cast<unsigned char *>(base) + off, src, src_bytes);
}
__device__ __forceinline__ void aotc_cp_async_commit() { aotc_async_::commit(); }

// The shared stores are kernel code, made where the wait retires them.
template <int N>
__device__ __forceinline__ void aotc_cp_async_wait() {
  unsigned char *dst;
  uint4 v;
  unsigned size;
  while (aotc_async_::retire_one(N, &dst, &v, &size)) {
    if (size == 16) *reinterpret_cast<uint4 *>(dst) = v;
    if (size == 8) *reinterpret_cast<uint2 *>(dst) = make_uint2(v.x, v.y);
    if (size == 4) *reinterpret_cast<unsigned *>(dst) = v.x;
  }
}

namespace aotc_async_ {
// Lane l's registers from the rows the addressing lanes read (`row` is this lane's).
template <int N, bool kTrans>
AOTC_EMU_NOSAN inline void ldmatrix_exchange(unsigned *r, const uint4 &row) {
  AOTC_SAN_SCOPE;  // the scratch is the emulator's, not the kernel's traffic (sanitizer, profile)
  __shared__ unsigned scratch[32][32][4];     // [warp][lane][word]
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned warp = tid >> 5, lane = tid & 31;
  scratch[warp][lane][0] = row.x;
  scratch[warp][lane][1] = row.y;
  scratch[warp][lane][2] = row.z;
  scratch[warp][lane][3] = row.w;
  __syncwarp();
  const unsigned g = lane >> 2, t = lane & 3;
  for (int i = 0; i < N; ++i) {
    if (!kTrans) {
      r[i] = scratch[warp][8 * i + g][t];
    } else {
      // element (row, col) is half col % 2 of word col / 2 of that row
      const unsigned lo = scratch[warp][8 * i + 2 * t][g >> 1] >> (16 * (g & 1)) & 0xffffu;
      const unsigned hi = scratch[warp][8 * i + 2 * t + 1][g >> 1] >> (16 * (g & 1)) & 0xffffu;
      r[i] = lo | hi << 16;
    }
  }
  __syncwarp();                                  // the scratch is reused by the next call
}

template <int N, bool kTrans>
__device__ __forceinline__ void ldmatrix(unsigned *r, const void *row_addr) {
  const unsigned lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
  uint4 row = make_uint4(0u, 0u, 0u, 0u);
  if (lane < 8u * N) row = *static_cast<const uint4 *>(row_addr);
  ldmatrix_exchange<N, kTrans>(r, row);
}
}  // namespace aotc_async_

__device__ __forceinline__ void aotc_ldmatrix_x1(unsigned r[1], const void *row) { aotc_async_::ldmatrix<1, false>(r, row); }
__device__ __forceinline__ void aotc_ldmatrix_x2(unsigned r[2], const void *row) { aotc_async_::ldmatrix<2, false>(r, row); }
__device__ __forceinline__ void aotc_ldmatrix_x4(unsigned r[4], const void *row) { aotc_async_::ldmatrix<4, false>(r, row); }
__device__ __forceinline__ void aotc_ldmatrix_x1_trans(unsigned r[1], const void *row) {
  aotc_async_::ldmatrix<1, true>(r, row);
}
__device__ __forceinline__ void aotc_ldmatrix_x2_trans(unsigned r[2], const void *row) {
  aotc_async_::ldmatrix<2, true>(r, row);
}
__device__ __forceinline__ void aotc_ldmatrix_x4_trans(unsigned r[4], const void *row) {
  aotc_async_::ldmatrix<4, true>(r, row);
}

__device__ __forceinline__ void aotc_ldmatrix_x4_at(unsigned r[4], const void *base, unsigned off) {
  aotc_async_::ldmatrix<4, false>(r, static_cast<const unsigned char *>(base) + off);
}
__device__ __forceinline__ void aotc_ldmatrix_x4_trans_at(unsigned r[4], const void *base, unsigned off) {
  aotc_async_::ldmatrix<4, true>(r, static_cast<const unsigned char *>(base) + off);
}

#else

__device__ __forceinline__ unsigned aotc_smem_addr_(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void aotc_cp_async_16(void *dst, const void *src, unsigned src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(aotc_smem_addr_(dst)), "l"(src),
               "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void aotc_cp_async_16_at(void *base, unsigned off, const void *src, unsigned src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(aotc_smem_addr_(base) + off), "l"(src),
               "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void aotc_cp_async_8(void *dst, const void *src, unsigned src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(aotc_smem_addr_(dst)), "l"(src),
               "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void aotc_cp_async_4(void *dst, const void *src, unsigned src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(aotc_smem_addr_(dst)), "l"(src),
               "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void aotc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void aotc_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#define AOTC_LDMATRIX_(name, shape, n, ...)                                                    \
  __device__ __forceinline__ void name(unsigned r[n], const void *row) {                       \
    asm volatile("ldmatrix.sync.aligned.m8n8." shape ".shared.b16 " __VA_ARGS__                \
                 : "r"(aotc_smem_addr_(row)));                                                 \
  }
AOTC_LDMATRIX_(aotc_ldmatrix_x1, "x1", 1, "{%0}, [%1];\n" : "=r"(r[0]))
AOTC_LDMATRIX_(aotc_ldmatrix_x2, "x2", 2, "{%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]))
AOTC_LDMATRIX_(aotc_ldmatrix_x4, "x4", 4, "{%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))
AOTC_LDMATRIX_(aotc_ldmatrix_x1_trans, "x1.trans", 1, "{%0}, [%1];\n" : "=r"(r[0]))
AOTC_LDMATRIX_(aotc_ldmatrix_x2_trans, "x2.trans", 2, "{%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]))
AOTC_LDMATRIX_(aotc_ldmatrix_x4_trans, "x4.trans", 4,
               "{%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))
#undef AOTC_LDMATRIX_
__device__ __forceinline__ void aotc_ldmatrix_x4_at(unsigned r[4], const void *base, unsigned off) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(aotc_smem_addr_(base) + off));
}
__device__ __forceinline__ void aotc_ldmatrix_x4_trans_at(unsigned r[4], const void *base, unsigned off) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(aotc_smem_addr_(base) + off));
}

#endif

// XOR-swizzled b16 tiles of 16-byte chunks (element offsets), conflict-free both for the 16-byte stores of a
// quarter-warp along a row and for the 8 rows of one ldmatrix phase at one logical chunk:
//   aotc_swz_k16(row, chunk)   rows of 16 elements (2 chunks); rows 4..7 of each 8 swap their two chunks
//   aotc_swz_mn64(row, chunk)  rows of 64 elements (8 chunks); row r permutes its chunks by XOR (r % 8)
__device__ __forceinline__ int aotc_swz_k16(int row, int chunk) { return row * 16 + ((chunk ^ ((row >> 2) & 1)) << 3); }
__device__ __forceinline__ int aotc_swz_mn64(int row, int chunk) { return row * 64 + ((chunk ^ (row & 7)) << 3); }

// aotc_fresh(x): x, recomputed where it stands: the compiler may not hoist what depends on it out of a loop
// (dot_mma's per-element staging: 32 rows' index math hoisted out of the K loop took 250 registers).
#if defined(AOTC_HOST_EMU)
__device__ __forceinline__ int aotc_fresh(int x) { return x; }
#else
__device__ __forceinline__ int aotc_fresh(int x) {
  int y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
#endif

__device__ __forceinline__ void aotc_cp_async_wait_all() {
  aotc_cp_async_commit();
  aotc_cp_async_wait<0>();
}
