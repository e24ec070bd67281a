"""The profiling host build counts what Nsight Compute would, on kernels whose answer is known by hand.

One warp (32 lanes) per kernel unless said otherwise; f32 unless said otherwise.
"""
from __future__ import annotations

import numpy as np
import pytest

from aotc.kernels.host_compile import compile_host, have_host_compiler
from aotc.kernels.host_exec import HostLibrary

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")

SOURCE = r"""
#include "aotc_mma.cuh"

// One mma.sync on register fragments: its host fallback's scratch is not the kernel's shared memory.
extern "C" __global__ void one_mma(const unsigned *a, float *d) {
  unsigned af[4], bf[2];
  for (int r = 0; r < 4; ++r) af[r] = a[threadIdx.x * 4 + r];
  bf[0] = af[0], bf[1] = af[1];
  float c[4] = {0, 0, 0, 0}, out[4];
  aotc_mma_m16n8k16_f16(out, af, bf, c);
  for (int r = 0; r < 4; ++r) d[r * 32 + threadIdx.x] = out[r];
}

// Lane i copies element i: one request per load and store, 4 sectors each.
extern "C" __global__ void coalesced(const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = x[i];
}

// Lane i reads element 32 * i: every lane its own sector.
extern "C" __global__ void stride32(const float *x, float *y) {
  y[threadIdx.x] = x[threadIdx.x * 32];
}

// Every lane reads the same element: one sector, nothing wasted.
extern "C" __global__ void broadcast(const float *x, float *y) {
  y[threadIdx.x] = x[0];
}

// A 32 x 32 tile read by columns: all lanes in bank 0, 32 distinct words.
extern "C" __global__ void column_read(const float *x, float *y) {
  __shared__ float t[32 * 32];
  for (int r = 0; r < 32; ++r) t[r * 32 + threadIdx.x] = x[r * 32 + threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = t[threadIdx.x * 32];
}

// The same tile with the column index XOR-swizzled by the row: conflict free.
extern "C" __global__ void swizzled_column_read(const float *x, float *y) {
  __shared__ float t[32 * 32];
  for (int r = 0; r < 32; ++r) t[r * 32 + (threadIdx.x ^ r)] = x[r * 32 + threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = t[threadIdx.x * 32 + (0 ^ threadIdx.x)];
}

// 16-byte shared loads of consecutive float4s: four quarter-warp phases, no conflict.
extern "C" __global__ void float4_shared(const float4 *x, float4 *y) {
  __shared__ float4 t[32];
  t[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = t[threadIdx.x];
}

// A loop: each iteration of the load is its own request.
extern "C" __global__ void looped(const float *x, float *y, int n) {
  float s = 0.0f;
  for (int k = 0; k < n; ++k) s += x[k * 32 + threadIdx.x];
  y[threadIdx.x] = s;
}

// Lane i stores element i, then lane 0 bumps a counter (split-K's semaphore): the atomic is its own
// class, as Nsight Compute counts it, and leaves the store efficiency at 100%.
extern "C" __global__ void store_then_atomic(float *y, unsigned *counter) {
  y[threadIdx.x] = (float)threadIdx.x;
  if (threadIdx.x == 0) atomicAdd(counter, 1u);
}

// 256 threads: 40 load sites (more than the profiler's first site table holds), a loop that warp w runs
// w + 1 times, a 2-way conflicted shared store and load, and a store by 8 lanes of each warp.
#define LD(i) s += x[(i) * 256 + threadIdx.x];
#define LD8(i) LD(i) LD(i + 1) LD(i + 2) LD(i + 3) LD(i + 4) LD(i + 5) LD(i + 6) LD(i + 7)
extern "C" __global__ void many_sites(const float *x, float *y) {
  __shared__ float t[512];
  float s = 0.0f;
  LD8(0) LD8(8) LD8(16) LD8(24) LD8(32)
  for (int k = 0; k <= (int)threadIdx.x / 32; ++k) s += 0.5f * x[k * 256 + threadIdx.x];
  t[threadIdx.x * 2] = s;
  __syncthreads();
  y[blockIdx.x * 512 + threadIdx.x * 2] = t[threadIdx.x * 2];
  if (threadIdx.x % 32 < 8) y[blockIdx.x * 512 + threadIdx.x * 2 + 1] = s;
}
"""
KERNELS = ["one_mma", "coalesced", "stride32", "broadcast", "column_read", "swizzled_column_read", "float4_shared",
           "looped", "many_sites", "store_then_atomic"]


@pytest.fixture(scope="module")
def lib():
    return HostLibrary(compile_host(SOURCE, KERNELS, profile=True))


@pytest.fixture
def rng():
    return np.random.default_rng()


def run(lib, name, grid, block, args) -> dict:
    lib.take_profile()
    lib.launch(name, grid, block, args)
    (counts,) = lib.take_profile()
    assert counts["kernel"] == name
    return counts


def test_coalesced_copy_is_4_sectors_per_request_at_full_efficiency(lib, rng):
    x = rng.standard_normal(256).astype(np.float32)
    y = np.full_like(x, np.nan)
    c = run(lib, "coalesced", 2, 128, [x, y])
    np.testing.assert_array_equal(y, x)
    assert c["load_requests"] == c["store_requests"] == 8      # 2 blocks x 4 warps
    assert c["load_sectors"] == c["store_sectors"] == 32
    assert c["load_bytes"] == c["store_bytes"] == 1024
    assert c["unique_load_sectors"] == c["unique_store_sectors"] == 32
    assert c["shared_requests"] == 0


def test_stride_32_touches_32_sectors_per_request(lib, rng):
    x = rng.standard_normal(32 * 32).astype(np.float32)
    y = np.full(32, np.nan, np.float32)
    c = run(lib, "stride32", 1, 32, [x, y])
    np.testing.assert_array_equal(y, x[::32])
    assert (c["load_requests"], c["load_sectors"], c["load_bytes"]) == (1, 32, 128)   # 12.5% efficiency
    assert (c["store_requests"], c["store_sectors"]) == (1, 4)


def test_an_atomic_is_counted_apart_from_the_stores(lib, rng):
    y = np.full(64, np.nan, np.float32)
    counter = np.array([rng.integers(1000)], np.uint32)
    before = int(counter[0])
    c = run(lib, "store_then_atomic", 2, 32, [y, counter])
    np.testing.assert_array_equal(y[:32], np.arange(32, dtype=np.float32))
    assert counter[0] == before + 2
    assert (c["store_requests"], c["store_sectors"], c["store_bytes"]) == (2, 8, 256)    # 100% efficient
    assert (c["atomic_requests"], c["atomic_sectors"]) == (2, 2)
    assert c["load_requests"] == 0


def test_a_broadcast_load_is_one_sector_and_not_wasteful(lib, rng):
    x = rng.standard_normal(8).astype(np.float32)
    c = run(lib, "broadcast", 1, 32, [x, np.zeros(32, np.float32)])
    assert (c["load_requests"], c["load_sectors"], c["load_bytes"]) == (1, 1, 32)


def test_a_column_read_is_a_32_way_bank_conflict(lib, rng):
    x = rng.standard_normal(32 * 32).astype(np.float32)
    y = np.full(32, np.nan, np.float32)
    c = run(lib, "column_read", 1, 32, [x, y])
    np.testing.assert_array_equal(y, x.reshape(32, 32)[:, 0])
    # 32 row stores (1 wavefront each) and the column read (32 wavefronts).
    assert c["shared_requests"] == 33
    assert c["shared_phases"] == 33
    assert c["shared_wavefronts"] - c["shared_phases"] == 31


def test_the_xor_swizzle_removes_the_conflict(lib, rng):
    x = rng.standard_normal(32 * 32).astype(np.float32)
    y = np.full(32, np.nan, np.float32)
    c = run(lib, "swizzled_column_read", 1, 32, [x, y])
    np.testing.assert_array_equal(y, x.reshape(32, 32)[:, 0])
    assert c["shared_requests"] == 33
    assert c["shared_wavefronts"] == c["shared_phases"] == 33


def test_16_byte_shared_accesses_run_in_four_phases(lib, rng):
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = np.full_like(x, np.nan)
    c = run(lib, "float4_shared", 1, 32, [x, y])
    np.testing.assert_array_equal(y, x)
    assert c["shared_requests"] == 2
    assert c["shared_phases"] == c["shared_wavefronts"] == 8
    assert (c["load_requests"], c["load_sectors"], c["load_bytes"]) == (1, 16, 512)


def test_each_loop_iteration_is_a_request(lib, rng):
    n = 5
    x = rng.standard_normal(32 * n).astype(np.float32)
    y = np.full(32, np.nan, np.float32)
    c = run(lib, "looped", 1, 32, [x, y, np.int32(n)])
    np.testing.assert_allclose(y, x.reshape(n, 32).sum(0), rtol=1e-5)
    assert (c["load_requests"], c["load_sectors"]) == (n, 4 * n)
    assert c["unique_load_sectors"] == 4 * n


def test_many_sites_and_warps_with_uneven_loops(lib, rng):
    x = rng.standard_normal(40 * 256).astype(np.float32)
    y = np.full(1024, np.nan, np.float32)
    c = run(lib, "many_sites", 2, 256, [x, y])
    t = np.arange(256)
    s = x.reshape(40, 256).sum(0) + 0.5 * np.array([x[:(i // 32 + 1) * 256].reshape(-1, 256)[:, i].sum() for i in t])
    y = y.reshape(2, 512)
    np.testing.assert_allclose(y[:, 0::2], np.tile(s, (2, 1)), rtol=1e-5, atol=1e-5)
    lanes8 = t % 32 < 8
    np.testing.assert_allclose(y[:, 1::2][:, lanes8], np.tile(s[lanes8], (2, 1)), rtol=1e-5, atol=1e-5)
    # per block: 40 sites x 8 warps + 1 + 2 + ... + 8 loop requests, each a coalesced 128 bytes
    assert (c["load_requests"], c["load_sectors"], c["load_bytes"]) == (2 * 356, 2 * 356 * 4, 2 * 356 * 128)
    assert c["unique_load_sectors"] == 40 * 256 * 4 // 32
    # per block and warp: a stride-2 store (8 sectors, 128 bytes) and 8 lanes' (2 sectors, 32 bytes)
    assert (c["store_requests"], c["store_sectors"], c["store_bytes"]) == (32, 16 * 10, 16 * 160)
    assert c["unique_store_sectors"] == 1024 * 4 // 32
    # per block and warp: the shared store and load, each lanes 0-15 and 16-31 on the same banks
    assert (c["shared_requests"], c["shared_phases"], c["shared_wavefronts"]) == (32, 32, 64)


def test_a_plain_library_is_not_a_profiling_one(rng):
    from aotc.errors import AotcError
    plain = HostLibrary(compile_host(SOURCE, ["coalesced"], sanitize=False))
    with pytest.raises(AotcError, match="not a profiling build"):
        plain.take_profile()


def test_the_mma_fallbacks_scratch_is_not_counted(lib, rng):
    a = rng.integers(0x3000, 0x3c00, 128 * 2).astype(np.uint16).view(np.uint32)   # f16 in [0.125, 1)
    c = run(lib, "one_mma", 1, 32, [a, np.full(128, np.nan, np.float32)])
    assert c["shared_requests"] == 0
    assert (c["store_requests"], c["store_sectors"]) == (4, 16)
