import numpy as np
from onnx import TensorProto, helper, numpy_helper

from aotc.bench.models import small
from aotc.hlo_passes import dce, qdq_propagate
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir import dtypes
from aotc.ir.interpreter import interpret
from tests.helpers.quantized import draw_feeds, ort_qdq
from tests.helpers.rng import fresh_rng

from ._graphs import assert_unchanged, snapshot


def _same(before, after, feeds):
    for w, g in zip(interpret(before, feeds), interpret(after, feeds)):
        assert w.dtype == g.dtype
        np.testing.assert_array_equal(g, w)     # exact: Q commutes with max and with moves


def _pools(g):
    return [n.outputs[0].dtype for n in g.nodes if n.op == "reduce_window" and n.attrs["kind"] == "max"]


def _model(nodes, inits, shape=(1, 4, 6, 6), out_shape=None):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)], inits)
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))


def _scale(name, value, zp=None, dtype=np.int8):
    out = [numpy_helper.from_array(np.array(value, np.float32), name)]
    if zp is not None:
        out.append(numpy_helper.from_array(np.array(zp, dtype), name + "_z"))
    return out


def test_ort_dq_maxpool_q_with_equal_scales_becomes_an_int8_max_pool():
    rng, seed = fresh_rng()
    model, inputs = small.cnn(batch=1, size=8)
    g = import_onnx(ort_qdq(model, inputs, rng, symmetric=False))
    assert _pools(g) == [dtypes.f32]
    snap = snapshot(g)
    out = dce.run(qdq_propagate.run(g))
    verify(out)
    assert_unchanged(g, snap)
    assert _pools(out) == [dtypes.i8], seed
    assert len(out.nodes) < len(g.nodes)
    _same(g, out, draw_feeds(inputs, rng))


def test_modelopt_relu_maxpool_q_moves_the_q_above_the_pool_and_the_reshape():
    """Relu -> MaxPool -> Reshape -> Q -> DQ (ModelOpt puts Q/DQ only at the next conv's input)."""
    rng, seed = fresh_rng()
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["p", "shape"], ["f"]),
             helper.make_node("QuantizeLinear", ["f", "s", "s_z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "s_z"], ["out"])]
    g = _model(nodes, _scale("s", 0.013, 0) + [numpy_helper.from_array(np.array([1, 36], np.int64), "shape")],
               out_shape=[1, 36])
    out = dce.run(qdq_propagate.run(g))
    verify(out)
    assert _pools(out) == [dtypes.i8]
    (reshape,) = [n for n in out.nodes if n.op == "reshape" and n.outputs[0].shape == (1, 36)]
    assert reshape.outputs[0].dtype == dtypes.i8
    _same(g, out, {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32) * 2})


def test_concat_requantizes_only_the_input_whose_scale_differs():
    rng, seed = fresh_rng()
    nodes = [helper.make_node("QuantizeLinear", ["x", "a", "a_z"], ["qa"]),
             helper.make_node("DequantizeLinear", ["qa", "a", "a_z"], ["da"]),
             helper.make_node("QuantizeLinear", ["x", "b", "b_z"], ["qb"]),
             helper.make_node("DequantizeLinear", ["qb", "b", "b_z"], ["db"]),
             helper.make_node("Concat", ["da", "db"], ["c"], axis=1),
             helper.make_node("QuantizeLinear", ["c", "a", "a_z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "a", "a_z"], ["out"])]
    g = _model(nodes, _scale("a", 0.02, 3) + _scale("b", 0.05, -7), out_shape=[1, 8, 6, 6])
    out = dce.run(qdq_propagate.run(g))
    verify(out)
    (cat,) = [n for n in out.nodes if n.op == "concatenate"]
    assert cat.outputs[0].dtype == dtypes.i8
    assert sum(n.op == "round_even" for n in out.nodes) == 3     # qa, qb, and qb's requantize to a's scale
    _same(g, out, {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)})


def test_leaves_a_pool_with_another_user_alone():
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "s", "s_z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "s_z"], ["d"]),
             helper.make_node("Add", ["d", "p"], ["out"])]
    g = _model(nodes, _scale("s", 0.02, 0), out_shape=[1, 4, 5, 5])
    snap = snapshot(g)
    assert qdq_propagate.run(g) is g
    assert_unchanged(g, snap)
