"""Function expansion: ops without a converter import through their ONNX function body."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.errors import UnsupportedError
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from tests.helpers.rng import fresh_rng, random_array

ort = pytest.importorskip("onnxruntime")


def test_softmax_cross_entropy_expands_through_nested_functions():
    rng, seed = fresh_rng()
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "y"], ["loss"], reduction="mean", name="sce")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
                                            helper.make_tensor_value_info("y", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    g = import_onnx(model)
    assert not any(n.op == "SoftmaxCrossEntropyLoss" for n in g.nodes)
    x, y = random_array(rng, (4, 5)), rng.integers(0, 5, 4).astype(np.int64)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "y": y})
    np.testing.assert_allclose(interpret(g, {"x": x, "y": y})[0], want[0], rtol=1e-5, err_msg=f"seed {seed}")


def test_op_without_body_or_converter_is_still_reported_by_name():
    node = helper.make_node("NonMaxSuppression", ["b", "s"], ["y"], name="nms")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 4]),
                                            helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [4, 3])])
    with pytest.raises(UnsupportedError, match="NonMaxSuppression 'nms'"):
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_attention_with_a_skipped_optional_input_expands_its_context_dependent_body():
    # attn_mask is skipped (""), past_key/past_value are given: the schema builds its body from the input types
    rng, seed = fresh_rng()
    b, h, kvh, t, past, d = 2, 4, 2, 3, 5, 8
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "present_k", "present_v"],
                            is_causal=1, name="attn")
    shapes = {"q": (b, h, t, d), "k": (b, kvh, t, d), "v": (b, kvh, t, d), "pk": (b, kvh, past, d),
              "pv": (b, kvh, past, d)}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (b, h, t, d)),
                               helper.make_tensor_value_info("present_k", TensorProto.FLOAT, (b, kvh, past + t, d)),
                               helper.make_tensor_value_info("present_v", TensorProto.FLOAT, (b, kvh, past + t, d))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    g = import_onnx(model)
    assert not any(n.op == "Attention" for n in g.nodes)
    feeds = {n: random_array(rng, s) for n, s in shapes.items()}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, w in zip(interpret(g, feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")


def test_causal_conv_with_state_with_past_state_and_no_bias_matches_the_reference():
    # bias is skipped (""): the body must still be built, so past_state is concatenated before the conv
    from onnx.reference import ReferenceEvaluator
    rng, seed = fresh_rng()
    b, c, t, k = 2, 5, 7, 4
    node = helper.make_node("CausalConvWithState", ["x", "w", "", "past"], ["y", "state"], activation="silu")
    shapes = {"x": (b, c, t), "w": (c, 1, k), "past": (b, c, k - 1)}
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                            for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (b, c, t)),
                               helper.make_tensor_value_info("state", TensorProto.FLOAT, (b, c, k - 1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    g = import_onnx(model)
    assert [n.op for n in g.nodes].count("convolution") == 1
    feeds = {n: random_array(rng, s) for n, s in shapes.items()}
    for got, w in zip(interpret(g, feeds), ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")
