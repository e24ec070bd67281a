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
