import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.bench.models import small
from aotc.hlo_passes import dce, quantize
from aotc.hlo_passes.pipeline import run_pipeline
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir import dtypes
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.quantized import (distance, draw_feeds, expose_quantized, ort_qdq, ort_run, qdq_conv_model,
                                     quantized_mismatch)
from tests.helpers.rng import fresh_rng

from ._graphs import assert_unchanged, scalar_constant, snapshot


def _anchors(g):
    return [(n.op, n.attrs.get("out_dtype")) for n in g.nodes if n.op in ("dot_general", "convolution")]


def _close(before, after, feeds, rtol=1e-5):
    want, got = interpret(before, feeds), interpret(after, feeds)
    for w, o in zip(want, got):
        assert w.dtype == o.dtype and w.shape == o.shape
        np.testing.assert_allclose(o, w, rtol=rtol, atol=rtol * float(np.abs(w).max()))


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("builder", ["cnn", "bert_encoder"])
def test_ort_quantized_models_run_every_anchor_in_int8(builder, symmetric):
    rng, seed = fresh_rng()
    model, inputs = getattr(small, builder)(**({"batch": 1, "size": 8} if builder == "cnn" else {}))
    qdq = expose_quantized(ort_qdq(model, inputs, rng, symmetric=symmetric))
    g = import_onnx(qdq)
    decided = quantize.decisions(g)
    n_anchors = len(_anchors(g))
    assert len(decided) == n_anchors and set(decided.values()) == {"int8"}, (seed, decided)
    out, _ = run_pipeline(g)
    assert _anchors(out) == [(op, "i32") for op, _ in _anchors(out)] and len(_anchors(out)) == n_anchors
    feeds = draw_feeds(inputs, rng)
    ref = ort_run(qdq, feeds)
    got = interpret(out, feeds)
    # every quantized tensor equals onnxruntime's but where a rounding tie broke the other way (f32 sums in
    # another order): then by one quantum, and what follows (GELU, LayerNorm) may move by a few
    frac, worst = quantized_mismatch(got, ref)
    assert frac <= 0.01 and worst <= 4, (seed, frac, worst)
    assert distance(got[:1], ref[:1]) <= 3e-2, seed


def _qdq_matmul_model(za: int, zb: int, blocked: bool = False, weight_zp: int = 0, float_rhs: bool = False):
    """x (2,5,24) and y (2,24,7) activations quantized asymmetric u8, MatMul; or x @ a quantized weight."""
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.array(0.031, np.float32), "sa"),
             numpy_helper.from_array(np.array(za, np.uint8), "za"),
             numpy_helper.from_array(np.array(0.047, np.float32), "sb"),
             numpy_helper.from_array(np.array(zb, np.uint8), "zb")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sa", "za"], ["qx"]),
             helper.make_node("DequantizeLinear", ["qx", "sa", "za"], ["dx"])]
    if float_rhs or blocked:
        rhs = "y"
    else:
        nodes += [helper.make_node("QuantizeLinear", ["y", "sb", "zb"], ["qy"]),
                  helper.make_node("DequantizeLinear", ["qy", "sb", "zb"], ["dy"])]
        rhs = "dy"
    ins = [helper.make_tensor_value_info("x", f, [2, 5, 24]), helper.make_tensor_value_info("y", f, [2, 24, 7])]
    if blocked:        # a weight with scales blocked along K: they cannot leave the sum
        rng = np.random.default_rng(0)
        inits += [numpy_helper.from_array(rng.integers(-100, 100, (24, 7)).astype(np.int8), "w"),
                  numpy_helper.from_array(rng.uniform(0.01, 0.02, (3, 7)).astype(np.float32), "ws"),
                  numpy_helper.from_array(np.full((3, 7), weight_zp, np.int8), "wz")]
        nodes.append(helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["dw"], axis=0, block_size=8))
        rhs = "dw"
        ins = ins[:1]
    nodes.append(helper.make_node("MatMul", ["dx", rhs], ["out"]))
    graph = helper.make_graph(nodes, "qmm", ins, [helper.make_tensor_value_info("out", f, [2, 5, 7])], inits)
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


def test_asymmetric_activation_times_activation_corrects_both_zero_points():
    rng, seed = fresh_rng()
    g = _qdq_matmul_model(za=131, zb=97)
    snap = snapshot(g)
    out = dce.run(quantize.run(g))
    verify(out)
    assert_unchanged(g, snap)
    assert _anchors(out) == [("dot_general", "i32")]
    assert sum(n.op == "reduce" for n in out.nodes) == 2          # rowsum(qx) and colsum(qy)
    feeds = {"x": rng.standard_normal((2, 5, 24)).astype(np.float32),
             "y": rng.standard_normal((2, 24, 7)).astype(np.float32)}
    _close(g, out, feeds)


def _qdq_conv_model(zx: int, weight_zp: int = 0, modelopt: bool = False):
    return import_onnx(qdq_conv_model(zx, weight_zp, modelopt))


@pytest.mark.parametrize("modelopt", [False, True])
def test_conv_pads_with_the_zero_point_and_folds_the_weight_to_int8(modelopt):
    rng, seed = fresh_rng()
    g = _qdq_conv_model(zx=-9, modelopt=modelopt)
    out = dce.run(quantize.run(g))
    verify(out)
    (conv,) = [n for n in out.nodes if n.op == "convolution"]
    assert conv.attrs["out_dtype"] == "i32" and conv.attrs["pad_value"] == -9
    assert conv.inputs[1] in out.constants and out.constants[conv.inputs[1]].dtype == np.int8
    assert not any(n.op == "round_even" and n.inputs[0] not in out.inputs for n in out.nodes
                   if n.outputs[0].shape == (6, 4, 3, 3))                 # the weight Q was folded
    feeds = {"x": rng.standard_normal((2, 4, 7, 5)).astype(np.float32)}
    _close(g, out, feeds)
    pipe, _ = run_pipeline(g)                      # layout-nhwc and the simplifier keep the integer conv
    assert _anchors(pipe) == [("convolution", "i32")]
    _close(g, pipe, feeds)


@pytest.mark.parametrize("graph,reason", [
    (lambda: _qdq_conv_model(zx=0, weight_zp=3), "weight has a non-zero zero point"),
    (lambda: _qdq_matmul_model(za=128, zb=128, float_rhs=True), "rhs not dequantized"),
    (lambda: _qdq_matmul_model(za=128, zb=128, blocked=True), "rhs scale varies along the contracted dim(s) 0"),
])
def test_refuses_what_cannot_factor_out_and_says_why(graph, reason):
    g = graph()
    snap = snapshot(g)
    (decision,) = quantize.decisions(g).values()
    assert decision == f"float: {reason}" or decision.startswith(f"float: {reason}"), decision
    assert quantize.run(g) is g
    assert_unchanged(g, snap)


def _fp8_dense(w_dtype=dtypes.f8e4m3fn):
    """x (6, 40) -> Q/DQ to float8 e4m3fn per-tensor -> dot with a float8 weight (40, 9), per-column scales."""
    rng = np.random.default_rng(4)
    b = GraphBuilder()
    x = b.input("x", (6, 40))
    sx = b.add("broadcast_in_dim", scalar_constant(b, 0.05, "sx"), shape=(6, 40), broadcast_dimensions=())
    q = b.add("convert", b.add("div", x, sx), dtype="f8e4m3fn", saturate=True)
    dx = b.add("mul", b.add("convert", q, dtype="f32"), sx)
    w = b.constant(rng.standard_normal((40, 9)).astype(w_dtype.np), "w")
    sw = b.add("broadcast_in_dim", b.constant(rng.uniform(0.01, 0.02, 9).astype(np.float32), "sw"), shape=(40, 9),
               broadcast_dimensions=(1,))
    dw = b.add("mul", b.add("convert", w, dtype="f32"), sw)
    y = b.add("dot_general", dx, dw, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,), name="fc")
    return b.build([b.add("tanh", y)])


def test_fp8_dense_runs_fp8_with_f32_accumulation():
    rng, seed = fresh_rng()
    g = _fp8_dense()
    assert quantize.decisions(g) == {"fc": "fp8"}
    out = dce.run(quantize.run(g))
    verify(out)
    (dot,) = [n for n in out.nodes if n.op == "dot_general"]
    assert dot.attrs["out_dtype"] == "f32" and [v.dtype for v in dot.inputs] == [dtypes.f8e4m3fn] * 2
    _close(g, out, {"x": rng.standard_normal((6, 40)).astype(np.float32)})


def test_mixed_float8_types_stay_float():
    assert quantize.decisions(_fp8_dense(dtypes.f8e5m2)) == {"fc": "float: fp8 operands of different types "
                                                                   "f8e4m3fn x f8e5m2"}


def _u8(rng, *shape):
    return rng.integers(0, 256, shape).astype(np.uint8)


def _i8(rng, *shape):
    return rng.integers(-127, 128, shape).astype(np.int8)


def _integer_op_cases(rng):
    f32 = lambda *v: np.array(v, np.float32)                                       # noqa: E731
    return {
        "MatMulInteger": ([("a", _u8(rng, 2, 5, 24)), ("b", _i8(rng, 24, 7)), ("za", np.array(117, np.uint8))],
                          {}, {"b", "za"}),
        "ConvInteger": ([("x", _u8(rng, 1, 4, 6, 5)), ("w", _i8(rng, 3, 4, 3, 3)), ("zx", np.array(99, np.uint8))],
                        {"pads": [1, 1, 1, 1]}, {"w", "zx"}),
        "QLinearMatMul": ([("a", _u8(rng, 5, 24)), ("sa", f32(0.02)), ("za", np.array(120, np.uint8)),
                           ("b", _i8(rng, 24, 7)), ("sb", f32(0.01)), ("zb", np.array(0, np.int8)),
                           ("sy", f32(0.3)), ("zy", np.array(128, np.uint8))], {},
                          {"sa", "za", "b", "sb", "zb", "sy", "zy"}),
        "QLinearConv": ([("x", _u8(rng, 1, 4, 6, 5)), ("sx", f32(0.02)), ("zx", np.array(131, np.uint8)),
                         ("w", _i8(rng, 3, 4, 3, 3)), ("sw", f32(0.01, 0.02, 0.015)),
                         ("zw", np.zeros(3, np.int8)), ("sy", f32(0.2)), ("zy", np.array(128, np.uint8)),
                         ("b", rng.integers(-500, 500, 3).astype(np.int32))], {"pads": [1, 1, 1, 1]},
                        {"sx", "zx", "w", "sw", "zw", "sy", "zy", "b"}),
    }


@pytest.mark.parametrize("op", ["MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"])
def test_integer_onnx_ops_take_the_integer_path(op):
    from tests.importers.onnx.one_node import make_model
    rng, seed = fresh_rng()
    inputs, attrs, consts = _integer_op_cases(rng)[op]
    model = make_model(op, inputs, attrs, opset=21 if op.startswith("QLinear") else 10, consts=consts)
    g = import_onnx(model)
    assert set(quantize.decisions(g).values()) == {"int8"}, seed
    out, _ = run_pipeline(g)
    assert {a for _, a in _anchors(out)} == {"i32"}
    feeds = {n: a for n, a in inputs if n not in consts}
    (got,), (want,) = interpret(out, feeds), ort_run(model, feeds)
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= (1 if op.startswith("QLinear") else 0), seed    # QLinear*: a rounding tie at most


@pytest.mark.parametrize("builder", ["cnn", "bert_encoder"])
def test_dynamic_batch_models_quantize_too(builder):
    """Scales reach a dynamic activation through a broadcast: the views read its constant source."""
    from aotc.bench.models.zoo import with_dynamic_axes
    rng, seed = fresh_rng()
    model, inputs = getattr(small, builder)(**({"batch": 2, "size": 8} if builder == "cnn" else {}))
    qdq = ort_qdq(model, inputs, rng, symmetric=False)
    for vi in list(qdq.graph.value_info):          # drop static intermediate shapes, as an exporter would
        qdq.graph.value_info.remove(vi)
    qdq, _ = with_dynamic_axes((qdq, inputs), axes=("batch",))
    g = import_onnx(qdq, dynamic={"batch": (1, 4)})
    assert g.is_dynamic
    decided = quantize.decisions(g)
    assert decided and set(decided.values()) == {"int8"}, (seed, decided)
    from aotc.ir.dims import dim_ranges
    with dim_ranges(g.dims):                       # as compile_model runs the passes on a dynamic graph
        out, _ = run_pipeline(g)
    assert {a for _, a in _anchors(out)} == {"i32"}
    feeds = {k: np.concatenate([v, v[:1]]) for k, v in draw_feeds(inputs, rng).items()}     # batch 3
    assert distance(interpret(out, feeds)[:1], ort_run(qdq, feeds)[:1]) <= 3e-2, seed
