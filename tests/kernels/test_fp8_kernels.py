"""fp8 e4m3 GEMM and implicit-GEMM conv regions (templates/dot_mma8.cu) on the host emulation vs the interpreter.

The host build computes what the sm_90 cubin does: e4m3 x e4m3 products (exact
in f32) summed in f32, so only the summation order differs from the
interpreter's f32 matmul. The sm_80 cubin has no e4m3 mma: the same source
builds there with the operands widened to f16 (exact) for f16 mma, and `aotc
inspect` says so (kernel_math_by_arch). Shapes break the 64x64x32 tile;
outputs are poisoned (run_on_host), inputs fresh random draws.
"""
import ml_dtypes
import numpy as np
import pytest

from aotc.errors import UnsupportedError
from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.kernels import codegen
from aotc.kernels.codegen import generate
from aotc.kernels.kernel_math import FP8_ON_SM80, kernel_math, manifest_fields
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.rng import fresh_rng
from tests.kernels.test_codegen import check

E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"


def fp8(rng, shape, scale=4.0):
    q = (rng.standard_normal(shape) * scale).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    q[q.astype(np.float32) == 0] = ml_dtypes.float8_e4m3fn(0.25)    # never zeros
    return q


def _scaled_epilogue(b, rng, acc, channel_dim):
    """f32 accumulator * per-channel scale + bias, relu: the dequantizing epilogue."""
    shape, nch = acc.shape, acc.shape[channel_dim]
    scale = b.constant(rng.uniform(0.01, 0.02, nch).astype(np.float32), "scale")
    bias = b.constant(rng.standard_normal(nch).astype(np.float32), "bias")
    y = b.add("mul", acc, b.add("broadcast_in_dim", scale, shape=shape, broadcast_dimensions=(channel_dim,)))
    y = b.add("add", y, b.add("broadcast_in_dim", bias, shape=shape, broadcast_dimensions=(channel_dim,)))
    zero = b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=shape, broadcast_dimensions=())
    return b.add("max", y, zero)


def _arch_builds(kernels):
    """Both cubins build; PTX for sm_90 runs e4m3 mma, sm_80's runs f16 mma on widened operands instead."""
    source = codegen.module_source(kernels)
    for arch in ("sm_80", "sm_90"):
        assert compile_device(source, arch)[:4] == b"\x7fELF"
    ptx90, ptx80 = compile_device(source, "compute_90"), compile_device(source, "compute_80")
    assert E4M3.encode() in ptx90
    assert E4M3.encode() not in ptx80 and b"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx80


@pytest.mark.parametrize("m,n,k,batch", [(50, 70, 45, ()), (3, 8, 32, (2,)), (130, 17, 100, ())])
def test_fp8_gemm_region(m, n, k, batch):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    a = b.input("a", batch + (m, k), "f8e4m3fn")
    w = b.input("w", batch + (n, k), "f8e4m3fn")
    nb = len(batch)
    acc = b.add("dot_general", a, w, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
                lhs_contract=(nb + 1,), rhs_contract=(nb + 1,), out_dtype="f32")
    graph = b.build([_scaled_epilogue(b, rng, acc, nb + 1)])
    kernels = check(graph, [fp8(rng, batch + (m, k)), fp8(rng, batch + (n, k))], seed, rtol=1e-5, atol=1e-5,
                    kinds=["dot"])
    (kern,) = kernels
    assert kern.name.startswith("aotc_dot_mma8_") and kernel_math(kern) == "fp8"
    assert manifest_fields(kernels, ["sm_80", "sm_90"])["kernel_math_by_arch"] == {kern.name: {"sm_80": FP8_ON_SM80}}
    _arch_builds(kernels)


def test_fp8_gemm_with_a_cast_prologue():
    """An activation quantized to e4m3 inside the GEMM's prologue (a saturating convert), weights (K, N)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (33, 70))
    a = b.add("convert", x, dtype="f8e4m3fn")
    w = b.constant(fp8(rng, (70, 20)), "w")
    acc = b.add("dot_general", a, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,),
                out_dtype="f32")
    graph = b.build([acc])
    xs = (rng.standard_normal((33, 70)) * 30).astype(np.float32)       # rounds, never saturates
    (kern,) = check(graph, [xs], seed, rtol=1e-5, atol=1e-4, kinds=["dot"])
    assert "aotc_float_to_e4m3" in kern.source


@pytest.mark.parametrize("xshape,wshape,strides,pads", [
    ((1, 9, 11, 3), (50, 3, 3, 3), (1, 1), ((1, 1), (1, 1))),
    ((2, 7, 6, 40), (17, 1, 1, 40), (2, 1), ((0, 1), (0, 0))),
])
def test_fp8_conv_region(xshape, wshape, strides, pads):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", xshape, "f8e4m3fn")
    w = b.constant(fp8(rng, wshape), "w")
    acc = b.add("convolution", x, w, strides=strides, padding=pads, dilations=(1, 1), groups=1, layout="NHWC",
                out_dtype="f32")
    graph = b.build([_scaled_epilogue(b, rng, acc, 3)])
    kernels = check(graph, [fp8(rng, xshape)], seed, rtol=1e-5, atol=1e-5, kinds=["conv"])
    assert kernels[0].name.startswith("aotc_dot_mma8_")
    _arch_builds(kernels)


@pytest.mark.parametrize("dtype,groups", [("f8e4m3fnuz", 1), ("f8e4m3fn", 2)])
def test_unsupported_fp8_cases_name_what_is_missing(dtype, groups):
    b = GraphBuilder()
    x = b.input("x", (1, 5, 5, 4), dtype)
    w = b.input("w", (4, 3, 3, 4 // groups), dtype)
    acc = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=groups,
                layout="NHWC", out_dtype="f32")
    graph = b.build([acc])
    with pytest.raises(UnsupportedError, match=dtype if groups == 1 else "groups=2"):
        [generate(graph, r) for r in partition(graph)]
