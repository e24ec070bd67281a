"""aotc's own float8 and int4 conversions (aotc_convert.cuh) through the host emulation, against ml_dtypes.

The GPU build compiles the very same C (no cuda_fp8.h), so bit equality here is
bit equality on the GPU. Exhaustive where it can be: all 256 codes of each
format decode (and of e8m0, the scale type); every float16 bit pattern and a dense float32 sweep (ties,
subnormals, the overflow boundary, NaN, inf) encode, saturating and not.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aotc.ir import dtypes
from aotc.kernels.host_compile import compile_host
from aotc.kernels.host_exec import HostLibrary
from tests.helpers.rng import fresh_rng

FORMATS = [d.name for d in dtypes.FLOAT8]


@pytest.fixture(scope="module")
def lib():
    lines = ['#include "aotc_prelude.cuh"', '#include "aotc_ops.cuh"']
    names = []
    for f in FORMATS:
        lines.append(f'extern "C" __global__ void dec_{f}(const unsigned char *x, float *out, int n) {{\n'
                     f'  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                     f'  if (i < n) out[i] = aotc_from_{f}(x[i]);\n}}')
        for ty, nm in (("float", "f32"), ("double", "f64")):
            lines.append(f'extern "C" __global__ void enc_{f}_{nm}(const {ty} *x, unsigned char *out, int sat, int n) {{\n'
                         f'  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                         f'  if (i < n) out[i] = aotc_to_{f}(x[i], sat != 0);\n}}')
            names.append(f"enc_{f}_{nm}")
        names.append(f"dec_{f}")
    for bits in (4, 2):
        lines.append(f'extern "C" __global__ void wrap{bits}(const long long *x, signed char *si, unsigned char *ui, '
                     f'int n) {{\n  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                     f'  if (i < n) {{ si[i] = aotc_wrap_i{bits}(x[i]); ui[i] = aotc_wrap_u{bits}(x[i]); }}\n}}')
        names.append(f"wrap{bits}")
    lines.append('extern "C" __global__ void f4(const float *x, const unsigned char *c, unsigned char *enc, float *dec, '
                 'int n) {\n  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                 '  if (i < n) { enc[i] = aotc_to_f4e2m1fn(x[i], false); dec[i] = aotc_from_f4e2m1fn(c[i]); }\n}')
    names.append("f4")
    lines.append('extern "C" __global__ void e8m0_dec(const unsigned char *c, float *dec, __half *h, int n) {\n'
                 '  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                 '  if (i < n) { dec[i] = aotc_from_f8e8m0fnu(c[i]); h[i] = __float2half(dec[i]); }\n}')
    for ty, nm in (("float", "f32"), ("double", "f64")):
        lines.append(f'extern "C" __global__ void e8m0_enc_{nm}(const {ty} *x, unsigned char *out, int sat, int mode, '
                     f'int n) {{\n  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                     f'  if (i < n) out[i] = aotc_to_f8e8m0fnu(x[i], sat != 0, mode);\n}}')
        names.append(f"e8m0_enc_{nm}")
    names.append("e8m0_dec")
    return HostLibrary(compile_host("\n".join(lines) + "\n", names))


def _grid(n):
    return (n + 255) // 256, 256


def decode(lib, f, codes):
    out = np.full(codes.shape, -7.0, np.float32)    # poisoned
    lib.launch(f"dec_{f}", *_grid(codes.size), [codes, out, np.int32(codes.size)])
    return out


def encode(lib, f, x, saturate):
    out = np.full(x.shape, 0x5A, np.uint8)           # poisoned
    nm = "f32" if x.dtype == np.float32 else "f64"
    lib.launch(f"enc_{f}_{nm}", *_grid(x.size), [x, out, np.int32(saturate), np.int32(x.size)])
    return out


def _want(x, d, saturate):
    return dtypes.to_float8(x, d, saturate).view(np.uint8)


def _assert_codes(got, want, x, d):
    nan = np.isnan(x)
    bad = np.flatnonzero(got[~nan] != want[~nan])
    assert bad.size == 0, (f"{d}: {bad.size} mismatches, first x={x[~nan][bad[0]]!r} "
                           f"got {got[~nan][bad[0]]:#04x} want {want[~nan][bad[0]]:#04x}")
    assert np.isnan(np.asarray(got[nan]).view(d.np).astype(np.float32)).all()


@pytest.mark.parametrize("f", FORMATS)
def test_all_256_codes_decode_as_ml_dtypes(lib, f):
    d = dtypes.from_name(f)
    codes = np.arange(256, dtype=np.uint8)
    got = decode(lib, f, codes)
    want = codes.view(d.np).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))   # -0 included


@pytest.mark.parametrize("f", FORMATS)
@pytest.mark.parametrize("saturate", [False, True])
def test_every_code_and_midpoint_encodes_as_ml_dtypes(lib, f, saturate):
    """All representable values, the midpoints between neighbours (ties to even), and one ulp
    of f32 either side of each midpoint, both signs; plus the specials and far overflow."""
    d = dtypes.from_name(f)
    vals = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(d.np).astype(np.float64)))
    vals = vals[np.isfinite(vals)]
    hi = vals[-1]
    mids = (vals[:-1] + vals[1:]) / 2
    edge = np.array([hi + (hi - vals[-2]) / 2, hi * 1.5, 1e30, 3.4e38])
    m32 = np.concatenate([mids, edge]).astype(np.float32)
    near = np.concatenate([np.nextafter(m32, np.float32(0)), np.nextafter(m32, np.float32(np.inf))])
    x = np.concatenate([vals, mids, edge]).astype(np.float32)
    x = np.concatenate([x, near, [np.inf, np.nan, 0.0]]).astype(np.float32)
    x = np.concatenate([x, -x])
    _assert_codes(encode(lib, f, x, saturate), _want(x, d, saturate), x, d)
    x64 = x.astype(np.float64)
    _assert_codes(encode(lib, f, x64, saturate), _want(x64, d, saturate), x64, d)


@pytest.mark.parametrize("f", FORMATS)
def test_every_float16_encodes_as_ml_dtypes(lib, f):
    d = dtypes.from_name(f)
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    for saturate in (False, True):
        _assert_codes(encode(lib, f, x, saturate), _want(x, d, saturate), x, d)


@pytest.mark.parametrize("f", FORMATS)
def test_random_float32_bits_encode_as_ml_dtypes(lib, f):
    rng, seed = fresh_rng()
    d = dtypes.from_name(f)
    x = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    for saturate in (False, True):
        got = encode(lib, f, x, saturate)
        want = _want(x, d, saturate)
        nan = np.isnan(x)
        assert np.array_equal(got[~nan], want[~nan]), f"seed {seed}"


@pytest.mark.parametrize("bits", [4, 2])
def test_int4_and_int2_wrap_like_ml_dtypes(lib, bits):
    x = np.arange(-300, 300, dtype=np.int64)
    si = np.full(x.shape, 99, np.int8)
    ui = np.full(x.shape, 99, np.uint8)
    lib.launch(f"wrap{bits}", *_grid(x.size), [x, si, ui, np.int32(x.size)])
    assert np.array_equal(si, x.astype(getattr(ml_dtypes, f"int{bits}")).astype(np.int8))
    assert np.array_equal(ui, x.astype(getattr(ml_dtypes, f"uint{bits}")).astype(np.uint8))


def test_float4_e2m1_encodes_and_decodes_like_ml_dtypes(lib):
    """Every f16 value (ties, overflow, inf, NaN included) encodes; all 16 codes decode."""
    t = ml_dtypes.float4_e2m1fn
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    codes = (np.arange(x.size) % 16).astype(np.uint8)
    enc = np.full(x.shape, 0x5A, np.uint8)
    dec = np.full(x.shape, -7.0, np.float32)
    lib.launch("f4", *_grid(x.size), [x, codes, enc, dec, np.int32(x.size)])
    assert np.array_equal(enc, x.astype(t).view(np.uint8))
    assert np.array_equal(dec.view(np.uint32), codes.view(t).astype(np.float32).view(np.uint32))


def test_all_256_e8m0_codes_decode_as_ml_dtypes(lib):
    """Code 0 is 2^-127, an f32 subnormal built from its bits (kernels compile without ftz, so the GPU
    keeps it too); 0xFF is NaN. To f16 every code below 103 (2^-24) rounds to 0, from 143 (2^16) inf."""
    codes = np.arange(256, dtype=np.uint8)
    dec = np.full(codes.shape, -7.0, np.float32)
    half = np.full(codes.shape, -7.0, np.float16)
    lib.launch("e8m0_dec", *_grid(codes.size), [codes, dec, half, np.int32(codes.size)])
    want = codes.view(ml_dtypes.float8_e8m0fnu)
    assert np.isnan(dec[255]) and np.isnan(half[255])
    assert np.array_equal(dec[:255].view(np.uint32), want[:255].astype(np.float32).view(np.uint32))
    assert dec[0].view(np.uint32) == 0x00400000
    assert np.array_equal(half[:255].view(np.uint16), want[:255].astype(np.float16).view(np.uint16))
    assert (half[:103] == 0).all() and half[103] > 0 and np.isinf(half[143:255]).all() and np.isfinite(half[142])


def _e8m0_sweep():
    """Every exponent with mantissas at and around the guard bit (ties), zero, subnormals, the
    largest finite values, inf and NaN, both signs; plus random f32 bit patterns."""
    rng, seed = fresh_rng()
    e = np.arange(256, dtype=np.uint32)[:, None] << 23
    m = np.array([0, 1, 0x1FFFFF, 0x200000, 0x3FFFFF, 0x400000, 0x400001, 0x600000, 0x7FFFFF], np.uint32)
    bits = np.concatenate([(e | m).ravel(), rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)])
    bits = np.concatenate([bits, bits | 0x80000000])
    return bits.view(np.float32), seed


@pytest.mark.parametrize("mode", dtypes.E8M0_ROUND_MODES)
@pytest.mark.parametrize("saturate", [False, True])
def test_e8m0_encodes_as_onnx_reference_in_every_round_mode(lib, mode, saturate):
    from onnx.numpy_helper import to_float8e8m0
    x, seed = _e8m0_sweep()
    code = {"up": 0, "down": 1, "nearest": 2}[mode]
    want = to_float8e8m0(x, saturate, mode).view(np.uint8)
    assert np.array_equal(dtypes.to_e8m0(x, saturate, mode).view(np.uint8), want), f"seed {seed}"
    with np.errstate(invalid="ignore"):     # signalling NaN bit patterns
        x64 = x.astype(np.float64)
    for xs in (x, x64):
        out = np.full(x.shape, 0x5A, np.uint8)
        lib.launch(f"e8m0_enc_{'f32' if xs.dtype == np.float32 else 'f64'}", *_grid(x.size),
                   [xs, out, np.int32(saturate), np.int32(code), np.int32(x.size)])
        bad = np.flatnonzero(out != want)
        assert bad.size == 0, f"seed {seed}: x={x[bad[0]]!r} got {out[bad[0]]:#04x} want {want[bad[0]]:#04x}"


def test_e8m0_rounds_a_double_through_f32_as_onnx(lib):
    """A double is first rounded to f32: 2^10 * (1 + 2^-30) is 2^10 in f32, so 'up' gives code 137;
    1e-300 is f32 zero (code 0) and 1e300 f32 inf (NaN, saturating or not)."""
    x = np.array([1024.0 * (1 + 2.0**-30), 1024.0 * (1 + 2.0**-20), 1e-300, 1e300])
    want = [137, 138, 0, 255]
    assert dtypes.to_e8m0(x, True, "up").view(np.uint8).tolist() == want
    out = np.full(x.shape, 0x5A, np.uint8)
    lib.launch("e8m0_enc_f64", *_grid(x.size), [x, out, np.int32(1), np.int32(0), np.int32(x.size)])
    assert out.tolist() == want


def test_the_same_conversions_compile_for_the_gpu():
    from aotc.kernels.nvrtc_compile import compile_device
    src = ('#include "aotc_prelude.cuh"\n#include "aotc_ops.cuh"\n'
           'extern "C" __global__ void k(const float *x, const double *d, unsigned char *o, float *y) {\n'
           '  o[0] = aotc_to_f8e4m3fn(x[0], true); o[1] = aotc_to_f8e5m2fnuz(d[0], false);\n'
           '  o[2] = aotc_wrap_u4((long long)x[1]); y[0] = aotc_from_f8e5m2(o[1]) + aotc_from_f8e4m3fnuz(o[0]);\n'
           '  o[3] = aotc_to_f8e8m0fnu(d[1], true, AOTC_E8M0_NEAREST); y[1] = aotc_from_f8e8m0fnu(o[3]);\n}\n')
    cubin = compile_device(src, "sm_80")
    assert cubin[:4] == b"\x7fELF"
