"""NHWC implicit-GEMM and depthwise conv kernels on the host emulation vs the interpreter.

Shapes break the 64x64 GEMM tile and the 8x8x32 depthwise tile (3, 50 and 783
output pixels or channels, single channels, kernel windows larger than the
input with padding); outputs are poisoned (run_on_host), inputs are fresh
random draws. Each case also checks which kernel family was chosen, and the
generated source compiles with NVRTC for sm_80 and sm_90.
"""
import re

import ml_dtypes

import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from aotc.kernels import codegen, split_k
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_codegen import check


NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _conv_graph(rng, xshape, wshape, strides, pads, dil, groups, dtype="f32", residual=False):
    """NHWC conv + bias + (residual) + relu; shapes are channels-last, w is (O, *K, C/g)."""
    b = GraphBuilder()
    x = b.input("x", xshape, dtype)
    w = b.constant(random_array(rng, wshape).astype(NP[dtype]), "w")
    c = b.add("convolution", x, w, strides=strides, padding=pads, dilations=dil, groups=groups, layout="NHWC")
    bias = b.constant(random_array(rng, (wshape[0],)).astype(NP[dtype]), "b")
    y = b.add("add", c, b.add("broadcast_in_dim", bias, shape=c.shape, broadcast_dimensions=(len(xshape) - 1,)))
    ins = [random_array(rng, xshape).astype(NP[dtype])]
    if residual:
        y = b.add("add", y, b.input("r", c.shape, dtype))
        ins.append(random_array(rng, c.shape).astype(NP[dtype]))
    zero = b.add("broadcast_in_dim", b.constant(np.zeros((), NP[dtype])), shape=c.shape, broadcast_dimensions=())
    out = b.add("max", y, zero)
    if dtype == "bf16":         # a cast epilogue; also lets check() compare in f32
        out = b.add("convert", out, dtype="f32")
    return b.build([out]), ins


GEMM_CASES = [  # xshape (N, *S, C), wshape (O, *K, C), strides, pads, dilations
    ((1, 9, 11, 3), (50, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),         # stem-like, O breaks the tile
    ((2, 28, 28, 16), (3, 1, 1, 16), (1, 1), ((0, 0), (0, 0)), (1, 1)),       # 1x1: M = 1568, N = 3
    ((1, 27, 29, 8), (64, 3, 3, 8), (2, 2), ((0, 1), (1, 0)), (1, 1)),        # M = 14*15 = 210, odd pads
    ((1, 13, 12, 5), (7, 3, 2, 5), (1, 2), ((2, 2), (0, 1)), (2, 1)),         # dilated, rectangular window
    ((1, 3, 3, 4), (9, 5, 5, 4), (1, 1), ((2, 2), (2, 2)), (1, 1)),           # window larger than the input
    ((1, 783, 6), (17, 4, 6), (1,), ((1, 2),), (1,)),                          # 1-D, M = 783
    ((1, 4, 5, 6, 3), (4, 2, 2, 2, 3), (1, 1, 1), ((1, 0), (0, 1), (1, 1)), (1, 1, 1)),  # 3-D
]


@pytest.mark.parametrize("xshape,wshape,strides,pads,dil", GEMM_CASES)
def test_implicit_gemm_conv(xshape, wshape, strides, pads, dil):
    rng, seed = fresh_rng()
    graph, ins = _conv_graph(rng, xshape, wshape, strides, pads, dil, 1, residual=True)
    # f32 sums of up to 200 products (|terms| to ~5) in two orders differ by ~1e-5 where conv + residual
    # cancel to near 0 (0.65x atol 1e-5 within 40 draws); a wrong tap moves an output by ~1
    (k,) = check(graph, ins, seed, rtol=1e-4, atol=5e-5, kinds=["conv"])
    assert k.name.startswith("aotc_dot_") and not k.name.startswith("aotc_dot_mma_")
    bm, bn = map(int, re.search(r"Block tile (\d+)x(\d+)", k.source).groups())     # split_k.choose_tiling's
    assert (bm, bn) in split_k.SIMT_TILES and k.block == (bm * bn // 16, 1, 1)
    assert k.grid[:2] == (-(-wshape[0] // bn), -(-int(np.prod(graph.outputs[0].shape[:-1])) // bm))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("cin", [24, 6])
def test_implicit_gemm_conv_tensor_cores(dtype, cin):
    """Channels in whole 16-byte chunks are staged by cp.async (padding taps zero-filled), others per element."""
    rng, seed = fresh_rng()
    graph, ins = _conv_graph(rng, (2, 11, 10, cin), (50, 3, 3, cin), (2, 1), ((1, 1), (1, 1)), (1, 1), 1, dtype)
    (k,) = check(graph, ins, seed, rtol=3e-2, atol=3e-2, kinds=["conv"])
    assert k.name.startswith("aotc_dot_mma_")
    for tile in ("As", "Bs"):
        assert (f"const unsigned {tile[0]}_s =" in k.source) == (cin % 8 == 0)


DW_CASES = [  # channels, input H, W, kernel, strides, pads, dilations
    (6, 8, 8, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (50, 19, 17, (3, 3), (2, 2), ((0, 1), (0, 1)), (1, 1)),    # channels break the 32-channel tile
    (96, 15, 13, (5, 5), (2, 2), ((2, 2), (2, 2)), (1, 1)),
    (32, 9, 10, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2)),      # dilated
    (1, 12, 7, (3, 2), (1, 3), ((1, 1), (0, 1)), (1, 1)),       # one channel, rectangular window
    (40, 3, 3, (7, 7), (1, 1), ((3, 3), (3, 3)), (1, 1)),       # window larger than the input
]


@pytest.mark.parametrize("chans,h,w,k,strides,pads,dil", DW_CASES)
def test_depthwise_conv(chans, h, w, k, strides, pads, dil):
    rng, seed = fresh_rng()
    graph, ins = _conv_graph(rng, (2, h, w, chans), (chans,) + k + (1,), strides, pads, dil, chans)
    (kern,) = check(graph, ins, seed, rtol=1e-4, atol=1e-5, kinds=["conv"])
    assert kern.name.startswith("aotc_depthwise_")


@pytest.mark.parametrize("shape,tile", [((1, 72, 72, 64), (8, 8)),    # 162 blocks of 8x8: the largest tile
                                        ((1, 7, 7, 960), (4, 4)),      # 30 blocks of 8x8 would idle the GPU
                                        ((1, 3, 5, 32), (2, 4))])      # never below 8 pixels a block
def test_depthwise_tile_shrinks_until_half_the_sms_have_a_block(shape, tile):
    rng, seed = fresh_rng()
    n, h, w, c = shape
    graph, ins = _conv_graph(rng, shape, (c, 3, 3, 1), (1, 1), ((1, 1), (1, 1)), (1, 1), c)
    (kern,) = check(graph, ins, seed, rtol=1e-4, atol=1e-5, kinds=["conv"])
    assert kern.name.startswith("aotc_depthwise_")
    assert kern.grid[0] == -(-h // tile[0]) * -(-w // tile[1]), kern.grid


def test_depthwise_f16_with_fused_prologue():
    """The depthwise input loads run the region's prologue (here an NCHW->NHWC transpose and a scale)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, 40, 9, 14), "f16")
    xt = b.add("transpose", x, permutation=(0, 2, 3, 1))
    w = b.constant(random_array(rng, (40, 3, 3, 1)).astype(np.float16), "w")
    c = b.add("convolution", xt, w, strides=(1, 2), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=40,
              layout="NHWC")
    graph = b.build([b.add("tanh", c)])
    (kern,) = check(graph, [random_array(rng, (1, 40, 9, 14)).astype(np.float16)], seed, rtol=2e-2, atol=2e-2,
                    kinds=["conv"])
    assert kern.name.startswith("aotc_depthwise_")


def test_grouped_conv_stays_on_the_direct_kernel():
    rng, seed = fresh_rng()
    graph, ins = _conv_graph(rng, (1, 10, 7, 4), (6, 3, 2, 2), (2, 1), ((0, 1), (2, 0)), (2, 1), 2)
    (k,) = check(graph, ins, seed, rtol=1e-4, atol=1e-5, kinds=["conv"])
    assert k.name.startswith("aotc_conv_")


def test_conv_kernels_compile_for_the_gpu():
    rng, _ = fresh_rng()
    kernels = []
    for graph, _ in (_conv_graph(rng, (1, 9, 11, 3), (50, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
                     _conv_graph(rng, (1, 9, 11, 8), (16, 3, 3, 8), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, "f16"),
                     _conv_graph(rng, (1, 19, 17, 50), (50, 3, 3, 1), (2, 2), ((1, 1), (1, 1)), (1, 1), 50)):
        from aotc.fusion.regions import partition
        (region,) = partition(graph)
        kernels.append(codegen.generate(graph, region))
    assert [k.name.split("_")[1] for k in kernels] == ["dot", "dot", "depthwise"]
    src = codegen.module_source(kernels)
    for arch in ("sm_80", "sm_90"):
        assert compile_device(src, arch)[:4] == b"\x7fELF"


@pytest.mark.parametrize("groups,wshape", [(1, (50, 3, 3, 6)), (6, (6, 3, 3, 1)), (2, (4, 3, 3, 3))])
def test_tf32_convolutions(groups, wshape):
    """precision='tf32' on every conv kernel family: implicit GEMM (tensor cores), depthwise, direct."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, 9, 11, 6))
    w = b.constant(random_array(rng, wshape), "w")
    c = b.add("convolution", x, w, strides=(1, 2), padding=((1, 1), (0, 1)), dilations=(1, 1), groups=groups,
              layout="NHWC", precision="tf32")
    graph = b.build([b.add("tanh", c)])
    (k,) = check(graph, [random_array(rng, (1, 9, 11, 6))], seed, rtol=1e-4, atol=1e-5, kinds=["conv"])
    want = {1: "aotc_dot_tf32_", 6: "aotc_depthwise_", 2: "aotc_conv_"}[groups]
    assert k.name.startswith(want)


@pytest.mark.parametrize("dtype,stride,cin,cexp,precision,stem", [
    ("f32", 1, 8, 48, None, None), ("f32", 2, 5, 50, None, None), ("f16", 2, 16, 96, None, None),
    ("f32", 1, 3, 40, "tf32", None),
    ("f32", 1, 3, 32, None, (3, 2, 1)), ("f16", 2, 3, 16, None, (3, 2, 1)), ("f32", 1, 2, 24, None, (5, 1, 2))])
def test_expansion_fused_into_depthwise(dtype, stride, cin, cexp, precision, stem):
    """MobileNet's 1x1 expansion (+bias+relu6), or its stem (a small dense conv, `stem` = (k, stride, pad)),
    computed while the depthwise kernel stages its patch."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 13, 10, cin), dtype)
    k, s, p = stem or (1, 1, 0)
    w1 = b.constant(random_array(rng, (cexp, k, k, cin)).astype(NP[dtype]), "w1")
    extra = {"precision": precision} if precision else {}
    e = b.add("convolution", x, w1, strides=(s, s), padding=((p, p), (p, p)), dilations=(1, 1), groups=1,
              layout="NHWC", **extra)
    bias = b.constant(random_array(rng, (cexp,)).astype(NP[dtype]), "b1")
    e = b.add("add", e, b.add("broadcast_in_dim", bias, shape=e.shape, broadcast_dimensions=(3,)))
    lo = b.add("broadcast_in_dim", b.constant(np.zeros((), NP[dtype])), shape=e.shape, broadcast_dimensions=())
    hi = b.add("broadcast_in_dim", b.constant(np.full((), 6, NP[dtype])), shape=e.shape, broadcast_dimensions=())
    r = b.add("clamp", lo, e, hi)
    w2 = b.constant(random_array(rng, (cexp, 3, 3, 1)).astype(NP[dtype]), "w2")
    d = b.add("convolution", r, w2, strides=(stride, stride), padding=((1, 1), (1, 1)), dilations=(1, 1),
              groups=cexp, layout="NHWC")
    graph = b.build([b.add("tanh", d)])
    tol = 2e-2 if dtype == "f16" else 1e-4
    (k,) = check(graph, [random_array(rng, (2, 13, 10, cin)).astype(NP[dtype])], seed, rtol=tol, atol=tol,
                 kinds=["conv"])
    assert k.name.startswith("aotc_depthwise_") and "float ex = 0.0f;" in k.source
    assert compile_device(codegen.module_source([k]), "sm_90")[:4] == b"\x7fELF"


def test_depthwise_window_too_large_for_shared_memory_uses_the_direct_kernel():
    """A 33x33 window (dilated) cannot stage even a 1x1 tile's patch in 48 KB: the direct kernel runs it."""
    rng, seed = fresh_rng()
    graph, ins = _conv_graph(rng, (1, 12, 11, 4), (4, 33, 33, 1), (1, 1), ((32, 32), (32, 32)), (2, 2), 4)
    (k,) = check(graph, ins, seed, rtol=1e-4, atol=1e-5, kinds=["conv"])
    assert k.name.startswith("aotc_conv_")


def _relu6(b, v, dtype):
    lo = b.add("broadcast_in_dim", b.constant(np.zeros((), NP[dtype])), shape=v.shape, broadcast_dimensions=())
    hi = b.add("broadcast_in_dim", b.constant(np.full((), 6, NP[dtype])), shape=v.shape, broadcast_dimensions=())
    return b.add("clamp", lo, v, hi)


def _biased_conv(b, rng, v, wshape, dtype, **attrs):
    """conv + bias; weights scaled by 1/sqrt(fan-in) as initializers do, so sums over ~1000 channels stay O(1)
    and the f32 tolerance stays relative to what the output holds."""
    fan_in = wshape[1] * wshape[2] * wshape[3]
    w = b.constant((random_array(rng, wshape) / np.sqrt(fan_in)).astype(NP[dtype]))
    c = b.add("convolution", v, w, dilations=(1, 1), layout="NHWC", **attrs)
    bias = b.constant(random_array(rng, (wshape[0],)).astype(NP[dtype]))
    return b.add("add", c, b.add("broadcast_in_dim", bias, shape=c.shape, broadcast_dimensions=(3,)))


def _inverted_residual(rng, xshape, cexp, cout, stride, dtype="f32", expand=True, precision=None, k=3):
    """MobileNetV2's block: [1x1 expand + relu6] -> kxk depthwise + relu6 -> 1x1 project (+ residual)."""
    b = GraphBuilder()
    x = b.input("x", xshape, dtype)
    cin = xshape[-1]
    extra = {"precision": precision} if precision else {}
    one = dict(strides=(1, 1), padding=((0, 0), (0, 0)), groups=1, **extra)
    h = _relu6(b, _biased_conv(b, rng, x, (cexp, 1, 1, cin), dtype, **one), dtype) if expand else x
    h = _relu6(b, _biased_conv(b, rng, h, (h.shape[-1], k, k, 1), dtype, strides=(stride, stride),
                               padding=((k // 2, k // 2),) * 2, groups=h.shape[-1]), dtype)
    y = _biased_conv(b, rng, h, (cout, 1, 1, h.shape[-1]), dtype, **one)
    if stride == 1 and cout == cin:
        y = b.add("add", y, x)
    if dtype != "f32":
        y = b.add("convert", y, dtype="f32")
    return b.build([y]), [random_array(rng, xshape).astype(NP[dtype])]


@pytest.mark.parametrize("xshape,cexp,cout,stride,dtype,expand,precision,k", [
    ((2, 13, 10, 8), 48, 8, 1, "f32", True, None, 3),        # residual, 2 channel chunks, image tiles broken
    ((1, 27, 23, 5), 50, 3, 2, "f32", True, None, 3),        # 50 channels: a partial chunk; 3 outputs
    ((1, 9, 11, 24), 144, 24, 1, "f32", True, None, 3),      # 1x1 pixel tiles: 99 blocks, no split
    ((1, 3, 3, 64), 384, 64, 1, "f32", True, None, 3),       # 12 chunks over 4 splits (partials within 10%)
    ((1, 56, 56, 16), 96, 24, 2, "f32", True, None, 3),      # MobileNet's second block
    ((1, 21, 19, 32), 32, 17, 1, "f32", False, None, 3),     # no expansion (MobileNet's first block)
    ((1, 7, 7, 160), 960, 320, 1, "f32", True, None, 3),     # the last block: a small tile, no split
    ((3, 11, 6, 12), 72, 20, 2, "f32", True, None, 5),       # 5x5 (MobileNetV3, EfficientNet), batch 3
    ((2, 1, 1, 40), 240, 40, 1, "f32", True, None, 5),       # a 1x1 image: the whole window in the padding
    ((2, 12, 9, 16), 96, 24, 2, "f16", True, None, 3),
    ((1, 10, 13, 8), 40, 8, 1, "f32", True, "tf32", 3),
])
def test_depthwise_and_project_fused(xshape, cexp, cout, stride, dtype, expand, precision, k):
    """The depthwise conv (expansion included) and the 1x1 project conv it feeds run as one kernel:
    the depthwise result stays in shared memory, channel splits meet as partials."""
    rng, seed = fresh_rng()
    graph, ins = _inverted_residual(rng, xshape, cexp, cout, stride, dtype, expand, precision, k)
    # f16: the fused kernel keeps the depthwise result in f32 where the interpreter rounds it to f16;
    # outputs reach |40|, so the cancellation near 0 gets an absolute bound of 2.5e-3 of that scale
    rtol, atol = (2e-2, 0.1) if dtype == "f16" else (1e-4, 1e-4)
    (kern,) = check(graph, ins, seed, rtol=rtol, atol=atol, kinds=["conv"])
    assert kern.name.startswith("aotc_depthwise_project_")
    assert ("float ex = 0.0f;" in kern.source) == expand
    assert compile_device(codegen.module_source([kern]), "sm_90")[:4] == b"\x7fELF"


def test_depthwise_project_partials_sum_in_a_fixed_order():
    """Splits meet through a workspace and tile counters: two runs on one arena agree bit for bit and
    leave the counters at zero for the next launch."""
    from tests.helpers.host_run import run_on_host
    rng, _ = fresh_rng()
    graph, ins = _inverted_residual(rng, (1, 3, 3, 64), 384, 64, 1)
    once, (k,), _ = run_on_host(graph, ins)
    assert k.splits > 1 and k.workspace > 0 and k.counters > 0
    twice, _, counters = run_on_host(graph, ins, runs=2)
    np.testing.assert_array_equal(once[0], twice[0])
    assert not counters.any()


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_squeeze_excite_scale_in_the_project_conv(dtype):
    """x * sigmoid(s)[n, c] computed in a 1x1 conv's operand loads (one block column: each element
    loaded once); x is also pooled, so it is materialized anyway."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.add("tanh", b.input("x", (2, 9, 7, 37), dtype))
    s = b.input("s", (2, 1, 1, 37), dtype)
    sb = b.add("broadcast_in_dim", b.add("logistic", s), shape=x.shape, broadcast_dimensions=(0, 1, 2, 3))
    w = b.constant(random_array(rng, (50, 1, 1, 37)).astype(NP[dtype]))
    y = b.add("convolution", b.add("mul", x, sb), w, strides=(1, 1), padding=((0, 0), (0, 0)), dilations=(1, 1),
              groups=1, layout="NHWC")
    pooled = b.add("reduce", x, kind="sum", axes=(1, 2))
    outs = [y, pooled] if dtype == "f32" else [b.add("convert", y, dtype="f32"), b.add("convert", pooled, dtype="f32")]
    graph = b.build(outs)
    ins = [random_array(rng, (2, 9, 7, 37)).astype(NP[dtype]), random_array(rng, (2, 1, 1, 37)).astype(NP[dtype])]
    tol = 2e-2 if dtype == "f16" else 1e-4
    kernels = check(graph, ins, seed, rtol=tol, atol=tol)
    conv = next(k for k in kernels if k.region.kind == "conv")
    if dtype == "f32":
        assert "mul" in {n.op for n in conv.region.nodes} and len(kernels) == 3    # tanh, the conv, the pool
    else:       # f16 keeps the scaled tensor rounded to f16, as the references compute it
        assert "mul" not in {n.op for n in conv.region.nodes}
