"""The kernel families' fusion rules: anchors, accepted prologues, fit limits, read by fusion and kernels alike."""
import numpy as np
import pytest

from aotc.fusion import rules
from aotc.fusion.rules import conv as conv_rules
from aotc.fusion.rules.gemm import lhs_loaded_once, pointwise_conv
from aotc.fusion.rules.target import MAX_WORKSPACE, TARGET_SMS, TC_RIDGE
from aotc.ir import ops
from aotc.ir.graph import GraphBuilder
from aotc.kernels import codegen_conv, split_k


def _conv(b, x, o, k, groups):
    w = b.constant(np.ones((o, k, k, x.shape[-1] // groups), np.float32))
    p = (k // 2, k // 2)
    return b.add("convolution", x, w, strides=(1, 1), padding=(p, p), dilations=(1, 1), groups=groups,
                 layout="NHWC")


def _node(v, graph):
    return graph.producers()[v]


def test_every_anchor_category_has_a_family():
    assert set(rules.ANCHOR_KINDS) == {ops.REDUCTION, ops.DOT, ops.CONV, ops.WINDOW}
    dot, red = rules.RULES[ops.DOT], rules.RULES[ops.REDUCTION]
    assert rules.prologue_accepts(dot, "transpose") and rules.prologue_accepts(dot, "convert")
    assert not rules.prologue_accepts(dot, "exp")
    assert rules.prologue_accepts(red, "exp") and not rules.prologue_accepts(red, "dot_general")
    assert rules.prologue_accepts(None, "exp") and not rules.prologue_accepts(None, "reduce")


def test_a_depthwise_conv_runs_on_the_depthwise_kernel_while_its_patch_fits():
    b = GraphBuilder()
    x = b.input("x", (1, 16, 16, 32))
    small, huge = _conv(b, x, 32, 3, 32), _conv(b, x, 32, 31, 32)
    dense = _conv(b, x, 32, 3, 1)
    g = b.build([small, huge, dense])
    assert conv_rules.staged_depthwise(_node(small, g))
    assert not conv_rules.staged_depthwise(_node(huge, g))        # a 31x31 patch of 32 channels > 48 KB
    assert not conv_rules.staged_depthwise(_node(dense, g)) and not conv_rules.staged_depthwise(None)
    assert conv_rules.channel_tile(8) == 8 and conv_rules.channel_tile(33) == conv_rules.DW_CHANNELS


def test_a_pointwise_conv_joins_a_depthwise_one_within_the_tile_limits():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 8, 16))
    dw = _conv(b, x, 16, 3, 16)
    ok, wide = _conv(b, dw, 24, 1, 1), _conv(b, dw, 5000, 1, 1)
    g = b.build([ok, wide])
    assert pointwise_conv(_node(ok, g)) and not pointwise_conv(_node(dw, g))
    assert conv_rules.depthwise_project_fits(_node(dw, g), _node(ok, g)) == ""
    why = conv_rules.depthwise_project_fits(_node(dw, g), _node(wide, g))
    assert why == "5000 pointwise outputs per pixel do not fit a tile"


def test_a_gemm_lhs_is_loaded_once_up_to_one_tile_of_columns():
    b = GraphBuilder()
    x = b.input("x", (8, 32))
    narrow, wide = b.input("w", (32, 64)), b.input("v", (32, 65))
    dims = dict(lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    d1, d2 = b.add("dot_general", x, narrow, **dims), b.add("dot_general", x, wide, **dims)
    h = b.add("convert", x, dtype="f16")
    d3 = b.add("dot_general", h, b.add("convert", narrow, dtype="f16"), **dims)
    g = b.build([d1, d2, d3])
    assert lhs_loaded_once(_node(d1, g)) and not lhs_loaded_once(_node(d2, g))
    assert not lhs_loaded_once(_node(d3, g))          # f16 operands are rounded where they are stored


def test_kernels_read_their_limits_from_the_rules():
    assert codegen_conv.depthwise_node_fits is conv_rules.depthwise_node_fits and codegen_conv._project_plan is \
        conv_rules.project_plan
    assert split_k.TARGET_SMS == TARGET_SMS and split_k.MAX_WORKSPACE == MAX_WORKSPACE


def test_quantized_convs_stay_out_of_the_float_fused_kernels():
    """An 8-bit conv (out_dtype) is never staged by the depthwise kernel nor a depthwise+pointwise prologue
    anchor: those compute in float; the integer kernels keep it exact (kernels/codegen_conv8.py)."""
    b = GraphBuilder()
    x = b.input("x", (1, 8, 8, 16), "u8")
    attrs = dict(strides=(1, 1), dilations=(1, 1), layout="NHWC", out_dtype="i32")
    dw = b.add("convolution", x, b.constant(np.ones((16, 3, 3, 1), np.int8)), padding=((1, 1), (1, 1)),
               groups=16, pad_value=4, **attrs)
    pw = b.add("convolution", b.add("convert", dw, dtype="u8"), b.constant(np.ones((8, 1, 1, 16), np.int8)),
               padding=((0, 0), (0, 0)), groups=1, **attrs)
    xf = b.input("xf", (1, 8, 8, 16))
    dwf = _conv(b, xf, 16, 3, 16)
    graph = b.build([pw, dwf])
    dw_n, pw_n, dwf_n = (_node(v, graph) for v in (dw, pw, dwf))
    assert rules.quantized_anchor(dw_n) and rules.quantized_anchor(pw_n) and not rules.quantized_anchor(dwf_n)
    assert not conv_rules.staged_depthwise(dw_n) and conv_rules.staged_depthwise(dwf_n)
    assert "int8/fp8 GEMM" in conv_rules.depthwise_project_fits(dwf_n, pw_n)


def test_f64_dots_and_convs_take_only_their_plain_double_kernels():
    """f64 anchors sum in double in the SIMT GEMM and the direct conv; the depthwise, depthwise+pointwise,
    gated and attention kernels sum in float, so an f64 anchor is a plain_anchor (not a quantized one)."""
    b = GraphBuilder()
    x = b.input("x", (1, 8, 8, 16), "f64")
    dw = b.add("convolution", x, b.constant(np.ones((16, 3, 3, 1))), strides=(1, 1), dilations=(1, 1),
               padding=((1, 1), (1, 1)), groups=16, layout="NHWC")
    pw = b.add("convolution", dw, b.constant(np.ones((8, 1, 1, 16))), strides=(1, 1), dilations=(1, 1),
               padding=((0, 0), (0, 0)), groups=1, layout="NHWC")
    m = b.add("dot_general", b.input("a", (4, 16), "f64"), b.input("w", (16, 8), "f64"), lhs_batch=(),
              rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    xf = b.input("xf", (1, 8, 8, 16))
    dwf = _conv(b, xf, 16, 3, 16)
    g = b.build([pw, m, dwf])
    dw_n, pw_n, m_n, dwf_n = (_node(v, g) for v in (dw, pw, m, dwf))
    assert all(rules.plain_anchor(n) and not rules.quantized_anchor(n) for n in (dw_n, pw_n, m_n))
    assert not rules.plain_anchor(dwf_n) and not rules.plain_anchor(None)
    assert not conv_rules.staged_depthwise(dw_n)
    assert "f64 pointwise conv" in conv_rules.depthwise_project_fits(dwf_n, pw_n)


def _projected_attention(other: str, dt: str = "f16"):
    """Q = heads of (x . w + r) (1 x 40 tokens, 2 heads of 64), K and V inputs: r a broadcast bias, a residual
    input ("residual") or a bias whose GEMM result is also a graph output ("output")."""
    from tests.kernels.test_attention_mma import _const
    from tests.kernels.test_codegen import _softmax
    g = GraphBuilder()
    x, w = g.input("x", (1, 40, 128), dt), g.input("w", (128, 128), dt)
    y = g.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
    if other == "residual":
        r = g.input("r", (1, 40, 128), dt)
    else:
        r = g.add("broadcast_in_dim", g.input("bias", (128,), dt), shape=(1, 40, 128), broadcast_dimensions=(2,))
    q = g.add("transpose", g.add("reshape", g.add("add", y, r), shape=(1, 40, 2, 64)), permutation=(0, 2, 1, 3))
    k, v = g.input("k", (1, 2, 64, 40), dt), g.input("v", (1, 2, 40, 64), dt)
    s = g.add("dot_general", q, k, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,))
    p = _softmax(g, g.add("mul", s, _const(g, 0.125, dt, s.shape)), (3,))
    o = g.add("dot_general", p, v, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,))
    return g.build([o, y] if other == "output" else [o])


@pytest.mark.parametrize("other,dt,left", [("bias", "f16", True), ("bias", "bf16", True), ("bias", "f32", False),
                                           ("residual", "f16", False), ("output", "f16", False)])
def test_a_projection_bias_stays_its_gemms_epilogue_only_for_the_tensor_core_attention(other, dt, left):
    from aotc.fusion.regions import partition
    from aotc.fusion.rules.attention import attention_refusal, operand_epilogues
    from aotc.patterns.attention import classify
    graph = _projected_attention(other, dt)
    (match,) = classify(graph, attention_refusal)[0].values()
    found = operand_epilogues(match, graph.producers(), graph.users(), set(graph.outputs))
    assert [n.op for n in found] == (["add"] if left else [])
    (att,) = [r for r in partition(graph) if r.kind == "attention"]
    assert ("add" in [n.op for n in att.nodes if n not in match.nodes]) != left


def test_the_ridge_is_inspects_roofline():
    """TC_RIDGE (which GEMMs codegen_dot_mma treats as memory-bound) is inspect's H200 peak over its bandwidth,
    the profile model's `bound`."""
    from aotc.package.inspect import H200_BANDWIDTH, H200_TC_FLOPS
    assert TC_RIDGE == H200_TC_FLOPS / H200_BANDWIDTH
