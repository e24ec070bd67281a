"""Each kernel family's recorded math (aotc/kernels/kernel_math.py): what `aotc inspect` shows."""
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.kernels.codegen import generate
from aotc.kernels.kernel_math import MATHS, kernel_math, manifest_fields, math_by_arch


def _kernels(graph):
    return [generate(graph, r) for r in partition(graph)]


def _dot(dtype, **attrs):
    b = GraphBuilder()
    a = b.input("a", (20, 40), dtype)
    w = b.input("w", (30, 40), "i8" if dtype in ("i8", "u8") else dtype)
    d = b.add("dot_general", a, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(1,), **attrs)
    return b.build([b.add("convert", d, dtype="f32") if dtype != "f32" else b.add("tanh", d)])


@pytest.mark.parametrize("dtype,attrs,want", [
    ("f32", {}, "f32"), ("f32", {"precision": "tf32"}, "tf32"), ("f16", {}, "f16"), ("bf16", {}, "bf16"),
    ("i8", {"out_dtype": "i32"}, "int8"), ("u8", {"out_dtype": "i32"}, "int8")])
def test_gemm_math(dtype, attrs, want):
    (k,) = _kernels(_dot(dtype, **attrs))
    assert kernel_math(k) == want and want in MATHS
    assert math_by_arch(k, ["sm_80", "sm_90"]) == {}


def test_other_kernels_name_the_type_they_compute_in():
    b = GraphBuilder()
    x = b.input("x", (3, 50), "f16")
    i = b.input("i", (7,), "i64")
    y = b.add("exp", x)                                   # f16 storage, f32 arithmetic
    j = b.add("add", i, i)                                # integer index math
    ks = _kernels(b.build([y, j]))
    assert sorted(kernel_math(k) for k in ks) == ["f32", "i64"]


def test_int8_conv_kernels_and_the_manifest_fields():
    b = GraphBuilder()
    x = b.input("x", (1, 6, 6, 4), "u8")
    w = b.constant(np.ones((4, 3, 3, 1), np.int8), "w")
    w2 = b.constant(np.ones((8, 1, 1, 4), np.int8), "w2")
    acc = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=4,
                layout="NHWC", out_dtype="i32", pad_value=3)      # depthwise: the direct integer kernel
    q = b.add("convert", acc, dtype="u8")
    acc2 = b.add("convolution", q, w2, strides=(1, 1), padding=((0, 0), (0, 0)), dilations=(1, 1), groups=1,
                 layout="NHWC", out_dtype="i32")
    ks = _kernels(b.build([b.add("convert", acc2, dtype="f32")]))
    fields = manifest_fields(ks, ["sm_80", "sm_90"])
    assert sorted(fields["kernel_math"].values()) == ["int8", "int8"] and fields["kernel_math_by_arch"] == {}
    assert sorted(k.name.split("_")[1] + "_" + k.name.split("_")[2] for k in ks) == ["conv_int", "dot_mma8"]
