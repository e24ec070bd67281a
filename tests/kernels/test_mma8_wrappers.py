"""The 8-bit mma wrappers (templates/aotc_mma8.cuh) against numpy, through the host fallbacks.

Fragments are packed here from the PTX ISA's m16n8k32 layout for 8-bit types,
written out independently of the C fallback: (g, t) = (lane / 4, lane % 4);
register r of A holds row g + 8 * (r & 1), columns 4t + 16 * (r >> 1) + 0..3;
register r of B holds column g, rows 4t + 16 * r + 0..3; C/D element i is
(g + 8 * (i >> 1), 2t + (i & 1)); the lowest k sits in the low byte. Inputs are
fresh random draws, outputs poisoned. The fp8 decoder and encoder are checked
on all 256 patterns against ml_dtypes, and the sm_80 cubin's e4m3-on-f16 path
(built on the host too) against the same products.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aotc.kernels.host_compile import compile_host, have_host_compiler
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.rng import fresh_rng

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")

_INT_KINDS = ("s8s8", "s8u8", "u8s8", "u8u8")


def _kernel(name: str, wrapper: str, acc: str) -> str:
    return f"""
extern "C" __global__ void {name}(const unsigned *a, const unsigned *b, const {acc} *c, {acc} *d) {{
  const int lane = threadIdx.x;
  unsigned af[4] = {{a[4 * lane], a[4 * lane + 1], a[4 * lane + 2], a[4 * lane + 3]}};
  unsigned bf[2] = {{b[2 * lane], b[2 * lane + 1]}};
  {acc} cf[4] = {{c[4 * lane], c[4 * lane + 1], c[4 * lane + 2], c[4 * lane + 3]}}, df[4];
  {wrapper}(df, af, bf, cf);
  for (int i = 0; i < 4; ++i) d[4 * lane + i] = df[i];
}}
"""


SOURCE = ('#include "aotc_prelude.cuh"\n#include "aotc_mma8.cuh"\n'
          + "".join(_kernel(f"mma_{k}", f"aotc_mma_m16n8k32_{k}", "int") for k in _INT_KINDS)
          + _kernel("mma_e4m3", "aotc_mma_m16n8k32_e4m3", "float")
          + _kernel("mma_e4m3_on_f16", "aotc_mma_m16n8k32_e4m3_on_f16", "float")
          + """
// dot_mma8.cu's warp tile: 2 A fragments x 4 B fragments, accumulated onto acc (per lane [2][4][4])
extern "C" __global__ void tile_e4m3(const unsigned *a, const unsigned *b, float *acc, int on_f16) {
  const int lane = threadIdx.x;
  unsigned af[2][4], bf[4][2];
  float c[2][4][4];
  for (int i = 0; i < 8; ++i) af[i / 4][i % 4] = a[8 * lane + i];
  for (int i = 0; i < 8; ++i) bf[i / 2][i % 2] = b[8 * lane + i];
  for (int i = 0; i < 32; ++i) c[i / 16][(i / 4) % 4][i % 4] = acc[32 * lane + i];
  if (on_f16) aotc_mma8_tile_e4m3_on_f16(c, af, bf);
  else aotc_mma8_tile_e4m3(c, af, bf);
  for (int i = 0; i < 32; ++i) acc[32 * lane + i] = c[i / 16][(i / 4) % 4][i % 4];
}
extern "C" __global__ void e4m3_decode(const unsigned char *x, float *y, unsigned short *h) {
  y[threadIdx.x] = aotc_e4m3_to_float(x[threadIdx.x]);
  h[threadIdx.x] = (unsigned short)aotc_e4m3_to_f16_bits(x[threadIdx.x]);
}
extern "C" __global__ void e4m3_encode(const float *x, unsigned char *y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = aotc_float_to_e4m3(x[i]);
}
""")
KERNELS = [f"mma_{k}" for k in _INT_KINDS] + ["mma_e4m3", "mma_e4m3_on_f16", "tile_e4m3", "e4m3_decode",
                                               "e4m3_encode"]


@pytest.fixture(scope="module")
def lib():
    from aotc.kernels.host_exec import HostLibrary
    return HostLibrary(compile_host(SOURCE, KERNELS))


def pack_a(A: np.ndarray) -> np.ndarray:
    """(16, 32) bytes -> per-lane registers (32, 4) as uint32."""
    out = np.zeros((32, 4, 4), np.uint8)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for r in range(4):
            out[lane, r] = A[g + 8 * (r & 1), 4 * t + 16 * (r >> 1):4 * t + 16 * (r >> 1) + 4]
    return out.view("<u4").reshape(32, 4)


def pack_b(B: np.ndarray) -> np.ndarray:
    """(32, 8) bytes -> per-lane registers (32, 2) as uint32."""
    out = np.zeros((32, 2, 4), np.uint8)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for r in range(2):
            out[lane, r] = B[4 * t + 16 * r:4 * t + 16 * r + 4, g]
    return out.view("<u4").reshape(32, 2)


def pack_c(C: np.ndarray) -> np.ndarray:
    """(16, 8) -> per-lane (32, 4)."""
    out = np.empty((32, 4), C.dtype)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i in range(4):
            out[lane, i] = C[g + 8 * (i >> 1), 2 * t + (i & 1)]
    return out


def run_mma(lib, kind, A, B, C):
    d = np.full((32, 4), np.nan if C.dtype.kind == "f" else 0x5A5A5A5A, C.dtype)
    lib.launch(f"mma_{kind}", 1, 32, [pack_a(A.view(np.uint8)), pack_b(B.view(np.uint8)), pack_c(C), d])
    return d


def _int(rng, kind, shape):
    return (rng.integers(-128, 128, shape).astype(np.int8) if kind == "s8"
            else rng.integers(0, 256, shape).astype(np.uint8))


@pytest.mark.parametrize("kind", _INT_KINDS)
def test_int8_mma_is_exact_and_wraps(lib, kind):
    rng, seed = fresh_rng()
    A, B = _int(rng, kind[:2], (16, 32)), _int(rng, kind[2:], (32, 8))
    # accumulators near the s32 limits: the sum wraps mod 2**32 as mma's s32 accumulator does
    C = rng.integers(-2**31, 2**31, (16, 8)).astype(np.int32)
    C[:4] = 2**31 - 1 - rng.integers(0, 1000, (4, 8))
    want = ((A.astype(np.int64) @ B.astype(np.int64) + C) + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(run_mma(lib, kind, A, B, C), pack_c(want.astype(np.int32)), err_msg=f"seed {seed}")
    if kind == "u8u8":        # a wrap really happened somewhere in this draw (255 * 255 * 32 per row is 2e6)
        assert (want != A.astype(np.int64) @ B.astype(np.int64) + C).any()


def _e4m3(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) * 8
    q = x.astype(ml_dtypes.float8_e4m3fn)
    q[q == 0] = ml_dtypes.float8_e4m3fn(0.5)
    return q


@pytest.mark.parametrize("kind", ["e4m3", "e4m3_on_f16"])
def test_e4m3_mma_products_are_exact_sums_f32(lib, kind):
    rng, seed = fresh_rng()
    A, B = _e4m3(rng, (16, 32)), _e4m3(rng, (32, 8))
    C = rng.standard_normal((16, 8)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64) + C
    got = run_mma(lib, kind, A, B, C)
    # every product is exact in f32 (4-bit significands); only the f32 sums round
    np.testing.assert_allclose(got, pack_c(exact), rtol=1e-6, atol=1e-4 * np.abs(exact).max(), err_msg=f"seed {seed}")


@pytest.mark.parametrize("on_f16", [0, 1])
def test_e4m3_warp_tile(lib, on_f16):
    """dot_mma8.cu's 32x32 warp tile: as sm_90 runs it, and as sm_80 does (fragments widened to f16 once)."""
    rng, seed = fresh_rng()
    A, B = _e4m3(rng, (32, 32)), _e4m3(rng, (32, 32))
    C = rng.standard_normal((32, 32)).astype(np.float32)
    a = np.stack([pack_a(A[16 * i:16 * i + 16].view(np.uint8)) for i in range(2)], 1).reshape(32, 8)
    b = np.stack([pack_b(B[:, 8 * j:8 * j + 8].view(np.uint8)) for j in range(4)], 1).reshape(32, 8)
    acc = np.stack([pack_c(C[16 * i:16 * i + 16, 8 * j:8 * j + 8]) for i in range(2) for j in range(4)], 1)
    acc = np.ascontiguousarray(acc.reshape(32, 32))
    lib.launch("tile_e4m3", 1, 32, [a, b, acc, np.int32(on_f16)])
    exact = A.astype(np.float64) @ B.astype(np.float64) + C
    want = np.stack([pack_c(exact[16 * i:16 * i + 16, 8 * j:8 * j + 8]) for i in range(2) for j in range(4)], 1)
    np.testing.assert_allclose(acc, want.reshape(32, 32), rtol=1e-6, atol=1e-4 * np.abs(exact).max(),
                               err_msg=f"seed {seed}")


def test_e4m3_decode_all_patterns(lib):
    bits = np.arange(256, dtype=np.uint8)
    got, half = np.full(256, -1.0, np.float32), np.full(256, 0x5A5A, np.uint16)
    for lo in range(0, 256, 32):
        out, h = np.full(32, -1.0, np.float32), np.full(32, 0x5A5A, np.uint16)
        lib.launch("e4m3_decode", 1, 32, [bits[lo:lo + 32].copy(), out, h])
        got[lo:lo + 32], half[lo:lo + 32] = out, h
    want = bits.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    as_f16 = half.view(np.float16).astype(np.float32)       # the sm_80 path's widening, bit for bit
    np.testing.assert_array_equal(np.isnan(as_f16), nan)
    np.testing.assert_array_equal(as_f16[~nan], want[~nan])
    np.testing.assert_array_equal(np.signbit(as_f16), np.signbit(want))


def test_e4m3_encode_rounds_half_even_and_saturates(lib):
    rng, seed = fresh_rng()
    every = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    every = every[~np.isnan(every)]
    x = np.concatenate([every, rng.standard_normal(2000).astype(np.float32) * 50,
                        rng.uniform(-0.02, 0.02, 500).astype(np.float32),
                        np.sort(every)[:-1] / 2 + np.sort(every)[1:] / 2,       # every tie between neighbours
                        [1e6, -1e6, 460.0, -470.0, np.inf, np.nan]]).astype(np.float32)
    out = np.full(x.size, 0xAA, np.uint8)
    lib.launch("e4m3_encode", 1, 64, [x, out, np.int32(x.size)])
    want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)   # ml_dtypes: RNE
    fin = ~np.isnan(x)
    np.testing.assert_array_equal(out[fin], want[fin], err_msg=f"seed {seed}")
    assert (out[~fin] & 0x7F == 0x7F).all()


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "compute_90"])
def test_wrappers_compile_for_each_gpu_target(target):
    """NVRTC builds every wrapper; the e4m3 instruction appears only where the arch has it."""
    code = compile_device(SOURCE, "compute_" + target[3:] if target.startswith("sm_") else target)
    assert code.count(b"mma.sync.aligned.m16n8k32.row.col.s32") == 4
    e4m3 = b"mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in code
    assert e4m3 == (target != "sm_80")
    assert b"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in code       # the on_f16 path
    if target.startswith("sm_"):
        assert compile_device(SOURCE, target)[:4] == b"\x7fELF"
