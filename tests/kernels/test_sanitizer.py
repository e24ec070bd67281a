"""The sanitizing host build catches each kind of bug the GPU would punish.

Every kernel below seeds one bug (or none); a sanitized launch must name the
kind, the block and the thread, and a clean kernel must report nothing.
"""
from __future__ import annotations

import numpy as np
import pytest

from aotc.kernels.host_compile import compile_host, have_host_compiler
from aotc.kernels.host_exec import HostLibrary, SanitizerError

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")

SOURCE = r"""
#include "aotc_prelude.cuh"

// Clean: float4 loads, a shared tree reduction with barriers, an atomic total.
extern "C" __global__ void clean(const float *x, float *block_sum, float *total, int n4) {
  __shared__ float part[64];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float4 v = i < n4 ? reinterpret_cast<const float4 *>(x)[i] : make_float4(0, 0, 0, 0);
  part[threadIdx.x] = v.x + v.y + v.z + v.w;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    block_sum[blockIdx.x] = part[0];
    atomicAdd(total, part[0]);
  }
}

// Each thread reads its neighbour's slot without a barrier in between.
extern "C" __global__ void shared_race(float *y) {
  __shared__ float s[64];
  s[threadIdx.x] = (float)threadIdx.x;
  y[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// Thread 0 of every block writes the same word.
extern "C" __global__ void block_race(int *out) {
  if (threadIdx.x == 0) out[0] = blockIdx.x;
}

// Threads 0..15 wait at one barrier, the others at another.
extern "C" __global__ void divergent_barrier(float *y) {
  if (threadIdx.x < 16) {
    __syncthreads();
    y[threadIdx.x] = 1.0f;
  } else {
    __syncthreads();
    y[threadIdx.x] = 2.0f;
  }
}

// Thread 5 leaves before the barrier the others wait at.
extern "C" __global__ void exit_before_barrier(float *y) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  y[threadIdx.x] = 1.0f;
}

// `i <= n`: the last thread reads x[n] and writes y[n].
extern "C" __global__ void off_by_one(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i] = x[i] * 2.0f;
}

// float4 loads from x + 1: 4-byte aligned, not 16.
extern "C" __global__ void misaligned_float4(const float *x, float *y) {
  float4 v = reinterpret_cast<const float4 *>(x + 1)[threadIdx.x];
  y[threadIdx.x] = v.x + v.w;
}

// Only the first half of the shared array is written before all of it is read.
extern "C" __global__ void uninit_shared(float *y) {
  __shared__ float s[32];
  if (threadIdx.x < 16) s[threadIdx.x] = 1.0f;
  __syncthreads();
  y[threadIdx.x] = s[threadIdx.x];
}

// One float per block into one total: the rounding depends on the order.
extern "C" __global__ void order_sum(const float *x, float *total) {
  if (threadIdx.x == 0) atomicAdd(total, x[blockIdx.x]);
}

// Which block and thread ran when.
extern "C" __global__ void run_order(unsigned *counter, unsigned *block_rank, unsigned *thread_rank) {
  unsigned r = atomicAdd(&counter[1], 1u);
  if (blockIdx.x == 0) thread_rank[threadIdx.x] = r;
  __syncthreads();
  if (threadIdx.x == 0) block_rank[blockIdx.x] = atomicAdd(&counter[0], 1u);
}

// Split-K's handoff: partials, then aotc_split_last; the last block sums them.
extern "C" __global__ void split_sum(const float *x, float *ws, unsigned *counter, float *out) {
  ws[blockIdx.x * blockDim.x + threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x] * 2.0f;
  if (!aotc_split_last(counter, gridDim.x)) return;
  float s = 0.0f;
  for (unsigned b = 0; b < gridDim.x; ++b) s += aotc_ld_cg(ws + b * blockDim.x + threadIdx.x);
  out[threadIdx.x] = s;
}

// The same without the fence: the last block reads partials nothing ordered.
extern "C" __global__ void split_sum_unfenced(const float *x, float *ws, unsigned *counter, float *out) {
  __shared__ unsigned last;
  ws[blockIdx.x * blockDim.x + threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x] * 2.0f;
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  float s = 0.0f;
  for (unsigned b = 0; b < gridDim.x; ++b) s += ws[b * blockDim.x + threadIdx.x];
  out[threadIdx.x] = s;
}
"""
KERNELS = ["clean", "shared_race", "block_race", "divergent_barrier", "exit_before_barrier", "off_by_one",
           "misaligned_float4", "uninit_shared", "order_sum", "run_order", "split_sum", "split_sum_unfenced"]


@pytest.fixture(scope="module")
def lib():
    return HostLibrary(compile_host(SOURCE, KERNELS, sanitize=True))


@pytest.fixture
def rng():
    return np.random.default_rng()


def violations(lib, name, grid, block, args) -> list[dict]:
    with pytest.raises(SanitizerError) as e:
        lib.launch(name, grid, block, args)
    return e.value.violations


def kinds(found) -> set[str]:
    return {v["kind"] for v in found}


def test_the_build_is_a_sanitizing_one(lib):
    assert lib.sanitizing
    assert not HostLibrary(compile_host(SOURCE, ["clean"], sanitize=False)).sanitizing


def test_environment_switch_makes_sanitizing_builds(monkeypatch):
    monkeypatch.setenv("AOTC_SANITIZE", "1")
    assert HostLibrary(compile_host(SOURCE, ["clean"])).sanitizing
    monkeypatch.setenv("AOTC_SANITIZE", "0")
    assert not HostLibrary(compile_host(SOURCE, ["clean"])).sanitizing


def test_clean_kernel_reports_nothing(lib, rng):
    x = rng.standard_normal(4 * 256).astype(np.float32)
    sums, total = np.full(4, np.nan, np.float32), np.zeros(1, np.float32)
    lib.launch("clean", 4, 64, [x, sums, total, np.int32(256)])
    np.testing.assert_allclose(sums, x.reshape(4, -1).sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(total[0], x.sum(), rtol=1e-4, atol=1e-3)


def test_shared_race(lib):
    found = violations(lib, "shared_race", 1, 64, [np.zeros(64, np.float32)])
    race = [v for v in found if v["kind"] == "shared-race"]
    assert race and race[0]["block"] == [0, 0, 0] and race[0]["kernel"] == "shared_race"
    # thread 0 read slot 1 first; thread 1's write to it races with that read
    assert race[0]["thread"] == [1, 0, 0] and "thread 0" in race[0]["detail"]


def test_race_between_blocks(lib):
    found = violations(lib, "block_race", 3, 32, [np.zeros(1, np.int32)])
    assert kinds(found) == {"cross-block-race"}
    assert found[0]["block"] == [1, 0, 0] and found[0]["thread"] == [0, 0, 0]
    assert "block 0" in found[0]["detail"]


def test_barriers_at_different_calls(lib):
    found = violations(lib, "divergent_barrier", 1, 32, [np.zeros(32, np.float32)])
    assert kinds(found) == {"divergent-barrier"}
    assert "different __syncthreads" in found[0]["detail"]


def test_exit_while_others_wait_at_a_barrier(lib):
    found = violations(lib, "exit_before_barrier", 1, 32, [np.zeros(32, np.float32)])
    assert kinds(found) == {"divergent-barrier"}
    assert "thread 5" in found[0]["detail"]


def test_out_of_bounds_read_and_write(lib, rng):
    # the arrays are views into larger ones, so the stray accesses land in memory we own
    x_all, y_all = rng.standard_normal(200).astype(np.float32), np.zeros(200, np.float32)
    found = violations(lib, "off_by_one", 4, 32, [x_all[:100], y_all[:100], np.int32(100)])
    assert kinds(found) == {"out-of-bounds"}
    assert len(found) == 2 and all(v["block"] == [3, 0, 0] and v["thread"] == [4, 0, 0] for v in found)
    assert "param 0" in found[0]["detail"] and "param 1" in found[1]["detail"]
    assert int(found[1]["address"], 16) == y_all.ctypes.data + 400


def test_misaligned_float4(lib, rng):
    found = violations(lib, "misaligned_float4", 1, 4, [rng.standard_normal(32).astype(np.float32),
                                                         np.zeros(4, np.float32)])
    assert kinds(found) == {"misaligned"}
    assert {v["size"] for v in found} == {16} and len(found) == 4


def test_uninitialized_shared_read(lib):
    found = violations(lib, "uninit_shared", 1, 32, [np.zeros(32, np.float32)])
    assert kinds(found) == {"uninitialized-shared-read"}
    assert sorted(v["thread"][0] for v in found) == list(range(16, 32))


def _order_sum(lib, monkeypatch, order, x):
    monkeypatch.setenv("AOTC_SANITIZE_ORDER", order)
    total = np.zeros(1, np.float32)
    lib.launch("order_sum", len(x), 32, [x, total])
    return total[0]


def test_order_dependent_result_shows_under_permutation(lib, monkeypatch):
    # 1e8 absorbs the ones that come after it, not the ones that come before
    x = np.array([1e8] + [1.0] * 63, np.float32)
    forward = _order_sum(lib, monkeypatch, "forward", x)
    reverse = _order_sum(lib, monkeypatch, "reverse", x)
    assert forward == np.float32(1e8) and reverse == np.float32(1e8 + 64)


@pytest.mark.parametrize("order", ["forward", "reverse", "random:7"])
def test_blocks_and_threads_run_in_the_order_asked(lib, monkeypatch, order):
    monkeypatch.setenv("AOTC_SANITIZE_ORDER", order)
    counter, blocks, threads = np.zeros(2, np.uint32), np.zeros(8, np.uint32), np.zeros(64, np.uint32)
    lib.launch("run_order", 8, 64, [counter, blocks, threads])
    assert sorted(blocks) == list(range(8))
    block_order, thread_order = list(np.argsort(blocks)), list(np.argsort(threads))
    if order == "forward":
        assert block_order == list(range(8)) and thread_order == list(range(64))
    elif order == "reverse":
        assert block_order == list(range(7, -1, -1)) and thread_order == list(range(63, -1, -1))
    else:
        assert block_order != list(range(8)) and thread_order != list(range(64))


@pytest.mark.parametrize("order", ["forward", "reverse", "random:3"])
def test_split_k_handoff_is_clean(lib, rng, monkeypatch, order):
    monkeypatch.setenv("AOTC_SANITIZE_ORDER", order)
    x = rng.standard_normal((5, 32)).astype(np.float32)
    ws, counter, out = np.zeros((5, 32), np.float32), np.zeros(1, np.uint32), np.full(32, np.nan, np.float32)
    lib.launch("split_sum", 5, 32, [x, ws, counter, out])
    np.testing.assert_allclose(out, 2 * x.sum(0), rtol=1e-5, atol=1e-5)
    assert counter[0] == 0


def test_split_k_handoff_without_fence_races(lib, rng):
    x = rng.standard_normal((5, 32)).astype(np.float32)
    found = violations(lib, "split_sum_unfenced", 5, 32, [x, np.zeros((5, 32), np.float32),
                                                          np.zeros(1, np.uint32), np.zeros(32, np.float32)])
    assert kinds(found) == {"cross-block-race"}
    assert all(v["block"] == [4, 0, 0] for v in found if "block" in v)
