"""aotc_async.cuh's host fallbacks compute what cp.async and ldmatrix do on the GPU.

cp.async: the zero-fill tail, commit/wait-group order (a read before the wait sees the old contents),
4/8/16-byte sizes. ldmatrix: the per-lane layout of x1/x2/x4 and .trans against the PTX ISA's rule, the
sanitizer's view of a read before the wait, the profile's view of the traffic. NVRTC compiles them all.
"""
from __future__ import annotations

import numpy as np
import pytest

from aotc.kernels.host_compile import compile_host, have_host_compiler
from aotc.kernels.host_exec import HostLibrary, SanitizerError

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")

SOURCE = r"""
#include "aotc_prelude.cuh"
#include "aotc_async.cuh"

// n floats through shared memory, 4 per thread by 16-byte copies; the tail past n is zero-filled.
extern "C" __global__ void copy16(const float *x, float *y, int n) {
  __shared__ __align__(16) float s[512];
  const int i = 4 * threadIdx.x, left = n - i;
  const unsigned bytes = left >= 4 ? 16u : left > 0 ? 4u * left : 0u;
  aotc_cp_async_16(&s[i], x + (left > 0 ? i : 0), bytes);
  aotc_cp_async_wait_all();
  __syncthreads();
  const int j = (threadIdx.x + 37) % blockDim.x;          // another thread's copy
  for (int e = 0; e < 4; ++e) y[4 * j + e] = s[4 * j + e];
}

// 8- and 4-byte copies, one group each.
extern "C" __global__ void copy8_4(const float *x, float *y) {
  __shared__ __align__(16) float s[96];
  aotc_cp_async_8(&s[2 * threadIdx.x], x + 2 * threadIdx.x, 8);
  aotc_cp_async_commit();
  aotc_cp_async_4(&s[64 + threadIdx.x], x + 64 + threadIdx.x, 4);
  aotc_cp_async_commit();
  aotc_cp_async_wait<0>();
  __syncthreads();
  for (int e = threadIdx.x; e < 96; e += blockDim.x) y[e] = s[e];
}

// Two groups; what this thread's slots hold before any wait, after wait_group 1, after wait_group 0.
extern "C" __global__ void groups(const float *a, const float *b, float *seen) {
  __shared__ __align__(16) float s[2][128];
  const int i = 4 * threadIdx.x;
  for (int e = 0; e < 4; ++e) s[0][i + e] = s[1][i + e] = -1.0f;
  aotc_cp_async_16(&s[0][i], a + i, 16);
  aotc_cp_async_commit();
  aotc_cp_async_16(&s[1][i], b + i, 16);
  aotc_cp_async_commit();
  for (int e = 0; e < 4; ++e) seen[0 * 256 + i + e] = s[0][i + e], seen[1 * 256 + i + e] = s[1][i + e];
  aotc_cp_async_wait<1>();
  for (int e = 0; e < 4; ++e) seen[2 * 256 + i + e] = s[0][i + e], seen[3 * 256 + i + e] = s[1][i + e];
  aotc_cp_async_wait<0>();
  for (int e = 0; e < 4; ++e) seen[4 * 256 + i + e] = s[0][i + e], seen[5 * 256 + i + e] = s[1][i + e];
}

// Reads another thread's slot after the barrier but before its own wait: stale on the GPU, a sanitizer report.
extern "C" __global__ void read_before_wait(const float *x, float *y) {
  __shared__ __align__(16) float s[128];
  aotc_cp_async_16(&s[4 * threadIdx.x], x + 4 * threadIdx.x, 16);
  aotc_cp_async_commit();
  __syncthreads();
  y[threadIdx.x] = s[(4 * threadIdx.x + 5) % 128];
  aotc_cp_async_wait<0>();
}

// 4 8x8 b16 matrices, row r of matrix m at rows[(8 * m + r) * stride .. +8) (stride in u16, a multiple of 8);
// lane l addresses row l % 8 of matrix l / 8. out[l][0..3] = the registers of lane l (x1/x2 fill fewer).
#define LDM_KERNEL(name, fn, n)                                                         \
  extern "C" __global__ void name(const unsigned short *src, unsigned *out, int stride) { \
    __shared__ __align__(16) unsigned short s[32 * 64];                                 \
    for (int e = threadIdx.x; e < 32 * stride; e += 32) s[e] = src[e];                  \
    __syncthreads();                                                                    \
    unsigned r[4] = {0u, 0u, 0u, 0u};                                                   \
    fn(r, &s[threadIdx.x * stride]);                                                    \
    for (int i = 0; i < 4; ++i) out[4 * threadIdx.x + i] = i < n ? r[i] : 0xdeadbeefu;  \
  }
LDM_KERNEL(ldm_x1, aotc_ldmatrix_x1, 1)
LDM_KERNEL(ldm_x2, aotc_ldmatrix_x2, 2)
LDM_KERNEL(ldm_x4, aotc_ldmatrix_x4, 4)
LDM_KERNEL(ldm_x1_trans, aotc_ldmatrix_x1_trans, 1)
LDM_KERNEL(ldm_x2_trans, aotc_ldmatrix_x2_trans, 2)
LDM_KERNEL(ldm_x4_trans, aotc_ldmatrix_x4_trans, 4)

// The base + byte offset forms (dot_mma's): the same rows and copies addressed from the array's start.
#define LDM_AT_KERNEL(name, fn)                                                            \
  extern "C" __global__ void name(const unsigned short *src, unsigned *out, int stride) { \
    __shared__ __align__(16) unsigned short s[32 * 64];                                 \
    for (int e = threadIdx.x; e < 32 * stride; e += 32) s[e] = src[e];                  \
    __syncthreads();                                                                    \
    unsigned r[4] = {0u, 0u, 0u, 0u};                                                   \
    fn(r, s, 2u * threadIdx.x * stride);                                                \
    for (int i = 0; i < 4; ++i) out[4 * threadIdx.x + i] = r[i];                        \
  }
LDM_AT_KERNEL(ldm_x4_at, aotc_ldmatrix_x4_at)
LDM_AT_KERNEL(ldm_x4_trans_at, aotc_ldmatrix_x4_trans_at)

extern "C" __global__ void copy16_at(const float *x, float *y, int n) {
  __shared__ __align__(16) float s[512];
  const int i = 4 * threadIdx.x, left = n - i;
  const unsigned bytes = left >= 4 ? 16u : left > 0 ? 4u * left : 0u;
  aotc_cp_async_16_at(s, 16u * threadIdx.x, x + (left > 0 ? i : 0), bytes);
  aotc_cp_async_wait_all();
  __syncthreads();
  const int j = (threadIdx.x + 37) % blockDim.x;
  for (int e = 0; e < 4; ++e) y[4 * j + e] = s[4 * j + e];
}
"""
LDM = ["ldm_x1", "ldm_x2", "ldm_x4", "ldm_x1_trans", "ldm_x2_trans", "ldm_x4_trans", "ldm_x4_at", "ldm_x4_trans_at"]
KERNELS = ["copy16", "copy16_at", "copy8_4", "groups", "read_before_wait"] + LDM


@pytest.fixture(scope="module")
def lib():
    return HostLibrary(compile_host(SOURCE, KERNELS, sanitize=False))


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("kernel", ["copy16", "copy16_at"])
@pytest.mark.parametrize("n", [512, 509, 130, 3])
def test_16_byte_copies_zero_fill_the_tail(lib, rng, n, kernel):
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(512, np.nan, np.float32)
    lib.launch(kernel, 1, 128, [x, y, np.int32(n)])
    np.testing.assert_array_equal(y[:n], x)
    np.testing.assert_array_equal(y[n:], 0.0)


def test_8_and_4_byte_copies(lib, rng):
    x = rng.standard_normal(96).astype(np.float32)
    y = np.full(96, np.nan, np.float32)
    lib.launch("copy8_4", 1, 32, [x, y])
    np.testing.assert_array_equal(y, x)


def test_copies_land_only_when_their_group_is_waited_for(lib, rng):
    a, b = (rng.standard_normal(128).astype(np.float32) for _ in range(2))
    seen = np.full((6, 256), np.nan, np.float32)
    lib.launch("groups", 1, 32, [a, b, seen])
    old = np.full(128, -1.0, np.float32)
    for row, want in enumerate([old, old, a, old, a, b]):
        np.testing.assert_array_equal(seen[row, :128], want, err_msg=f"row {row}")


def test_the_sanitizer_flags_a_read_before_the_wait(rng):
    x = rng.standard_normal(128).astype(np.float32)
    san = HostLibrary(compile_host(SOURCE, ["read_before_wait"], sanitize=True))
    with pytest.raises(SanitizerError) as e:
        san.launch("read_before_wait", 1, 32, [x, np.full(32, np.nan, np.float32)])
    kinds = {v["kind"] for v in e.value.violations}
    # nothing has landed yet (uninitialized), and the copy lands in the reader's barrier interval (a race)
    assert kinds == {"uninitialized-shared-read", "shared-race"}


def ldmatrix_reference(mats: np.ndarray, n: int, trans: bool) -> np.ndarray:
    """The PTX ISA's rule: lane l gets (l/4, 2(l%4)..+1) of matrix i in register i; .trans the transpose's."""
    out = np.full((32, 4), 0xdeadbeef, np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(n):
            m = mats[i].T if trans else mats[i]
            out[lane, i] = int(m[g, 2 * t]) | int(m[g, 2 * t + 1]) << 16
    return out


@pytest.mark.parametrize("name", LDM)
@pytest.mark.parametrize("stride", [8, 24, 64])
def test_ldmatrix_per_lane_layout(lib, rng, name, stride):
    n = int(name[5])
    src = rng.integers(0, 1 << 16, size=32 * stride, dtype=np.uint16)
    out = np.full((32, 4), 0x7fc00000, np.uint32)
    lib.launch(name, 1, 32, [src, out, np.int32(stride)])
    mats = src.reshape(32, stride)[:, :8].reshape(4, 8, 8)
    np.testing.assert_array_equal(out, ldmatrix_reference(mats, n, "trans" in name))


def test_ldmatrix_traffic_is_four_phases_of_16_byte_rows():
    prof = HostLibrary(compile_host(SOURCE, ["ldm_x4"], profile=True))
    rng = np.random.default_rng()
    for stride, conflicts in [(8, 0), (64, 7 * 4)]:   # 8 rows 128 bytes apart share 4 banks: 8 wavefronts a phase
        src = rng.integers(0, 1 << 16, size=32 * stride, dtype=np.uint16)
        prof.take_profile()
        prof.launch("ldm_x4", 1, 32, [src, np.zeros((32, 4), np.uint32), np.int32(stride)])
        (c,) = prof.take_profile()
        loads = c["shared_requests"] - (32 * stride // 32)       # less the staging stores, one per lane-pass
        assert loads == 1
        assert c["shared_wavefronts"] - c["shared_phases"] == conflicts


def test_nvrtc_compiles_the_wrappers_for_sm80_and_sm90():
    nvrtc = pytest.importorskip("aotc.kernels.nvrtc_compile")
    try:
        nvrtc.cuda_include_dir()
    except Exception as exc:       # noqa: BLE001 - the wheel may be missing
        pytest.skip(f"no CUDA headers: {exc}")
    for arch in ("sm_80", "sm_90"):
        cubin, ptx = nvrtc.compile_device_with_ptx(SOURCE, arch)
        assert cubin and b"cp.async.cg.shared.global" in ptx and b"cp.async.wait_group 1" in ptx
        assert b"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
