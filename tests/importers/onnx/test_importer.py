"""The ONNX importer's flow: input shapes, bytes, one error listing every unsupported node, checker and dtype
errors, model-local functions. The converters' one-node tests are in test_<module>.py beside this file."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import ModelError, UnsupportedError
from aotc.importers.onnx import import_onnx
from tests.importers.onnx.one_node import F, I, check, make_model


def test_input_shapes_override_and_bytes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"dynamic dim\(s\) without a range: batch \(x\[0\]\).*--dynamic batch=MIN..MAX"):
        import_onnx(model)
    graph = import_onnx(model.SerializeToString(), input_shapes={"x": (4, 3)})
    assert graph.inputs[0].shape == (4, 3) and graph.outputs[0].shape == (4, 3)
    with pytest.raises(ModelError, match="'nope'"):
        import_onnx(model, input_shapes={"nope": (1, 3)})


def test_unsupported_nodes_listed_in_one_error():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="ok"),
             helper.make_node("RandomUniformLike", ["r"], ["h"], name="rnd"),
             helper.make_node("MyOp", ["h"], ["y"], name="custom", domain="my.domain")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])
    with pytest.raises(UnsupportedError) as e:
        import_onnx(model)
    msg = str(e.value)
    assert "\n" not in msg
    assert "2 unsupported" in msg
    assert "RandomUniformLike 'rnd' (opset 17)" in msg and "my.domain::MyOp 'custom' (opset 1)" in msg
    assert "Supported ONNX ops:" in msg and "Conv" in msg


def test_unsupported_attribute_and_dtype():
    c = [onnx.numpy_helper.from_array(np.ones(1, np.float32), n) for n in ("s", "b", "m", "v")]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["p"], name="bn", training_mode=1),
             helper.make_node("Cast", ["p"], ["y"], name="to_str", to=TensorProto.STRING)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, [1, 1, 4, 4])], c)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    with pytest.raises(UnsupportedError, match="BatchNormalization 'bn'.*training_mode.*Cast 'to_str'.*STRING"):
        import_onnx(model)


def test_dynamic_static_value_is_named():
    model = make_model("Reshape", [("x", F(2, 6)), ("s", I(3, 4))])
    with pytest.raises(UnsupportedError, match=r"Reshape 'reshape_0' \(opset 17\): shape .*model input 's'"):
        import_onnx(model)


def test_checker_failure_is_model_error():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.graph.node[0].input[0] = "missing"
    with pytest.raises(ModelError, match="checker"):
        import_onnx(model)


def test_string_input_rejected():
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    with pytest.raises(UnsupportedError, match="input 'x' has dtype STRING"):
        import_onnx(model)


def test_e8m0_cast_carries_round_mode_and_saturate():
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, round_mode="nearest",
                                            saturate=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, [2])])
    graph = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)]))
    (cv,) = [n for n in graph.nodes if n.op == "convert"]
    assert cv.attrs["dtype"] == "f8e8m0fnu" and cv.attrs["round_mode"] == "nearest" and cv.attrs["saturate"] is False


def test_model_local_functions_are_inlined():
    """Dynamo-style export: modules as local functions (nested, with an attribute reference)."""
    leaky = helper.make_node("LeakyRelu", ["t"], ["y"], name="act")
    leaky.attribute.append(onnx.AttributeProto(name="alpha", ref_attr_name="slope", type=onnx.AttributeProto.FLOAT))
    act = helper.make_function("pkg.torch.nn", "Act", ["t"], ["y"], [leaky],
                               [helper.make_opsetid("", 17)], attributes=["slope"])
    linear = helper.make_function(
        "pkg.torch.nn", "Linear", ["x", "w"], ["y"],
        [helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
         helper.make_node("Act", ["t"], ["y"], name="call_act", domain="pkg.torch.nn", slope=0.2)],
        [helper.make_opsetid("", 17), helper.make_opsetid("pkg.torch.nn", 1)])
    nodes = [helper.make_node("Linear", ["x", "w"], ["h"], name="l0", domain="pkg.torch.nn"),
             helper.make_node("Softmax", ["h"], ["y"], name="sm", axis=-1)]
    g = helper.make_graph(nodes, "fn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
                          [numpy_helper.from_array(F(4, 5), "w")])
    model = helper.make_model(g, functions=[act, linear],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("pkg.torch.nn", 1)])
    check(model, {"x": F(3, 4)})          # negative inputs to LeakyRelu: the referenced slope 0.2 matters






def test_large_initializers_become_typed_inputs_without_copying_the_model():
    from aotc.importers.onnx.importer import LARGE_INITIALIZER, _split_large_initializers
    from tests.helpers.rng import fresh_rng, random_array
    rng, _ = fresh_rng()
    big = random_array(rng, (LARGE_INITIALIZER // 64, 64))
    small = random_array(rng, (64,))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, LARGE_INITIALIZER // 64])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
                          initializer=[numpy_helper.from_array(big, "w"), numpy_helper.from_array(small, "b")],
                          doc_string="kept")
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.metadata_props.add(key="k", value="v")
    before = model.SerializeToString()
    light, split = _split_large_initializers(model)
    assert model.SerializeToString() == before                  # the caller's model is untouched
    assert [t.name for t in split] == ["w"] and [t.name for t in light.graph.initializer] == ["b"]
    assert [i.name for i in light.graph.input] == ["x", "w"]
    assert light.graph.input[1].type.tensor_type.shape.dim[0].dim_value == big.shape[0]
    # everything but the large initializer is carried over, field for field
    expect = onnx.ModelProto()
    expect.CopyFrom(model)
    del expect.graph.initializer[0]
    expect.graph.input.extend([light.graph.input[1]])
    assert light.SerializeToString() == expect.SerializeToString()
    feeds = {"x": random_array(rng, (2, LARGE_INITIALIZER // 64))}
    got = import_onnx(model)
    from aotc.ir.interpreter import interpret
    np.testing.assert_allclose(interpret(got, feeds)[0], feeds["x"] @ big + small, rtol=1e-5, atol=1e-4)
