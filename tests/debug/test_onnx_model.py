"""onnx_model: which IR value holds which ONNX tensor, twins of passes, onnxruntime with extra outputs."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.debug import onnx_model as om
from aotc.errors import AotcError, ModelError
from aotc.hlo_passes.pipeline import run_pipeline
from aotc.ir.interpreter import interpret
from tests.debug._models import mlp
from tests.helpers.rng import fresh_rng


def test_load_model_errors(tmp_path):
    with pytest.raises(AotcError, match="not found"):
        om.load_model(tmp_path / "none.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x00\x01junk")
    with pytest.raises(ModelError, match="not an ONNX model"):
        om.load_model(tmp_path / "junk.onnx")
    (tmp_path / "p.mlir").write_text("module {}")
    with pytest.raises(AotcError, match="needs an ONNX model"):
        om.load_model(tmp_path / "p.mlir")


def test_node_names_fall_back_to_the_op_type():
    node = helper.make_node("Relu", ["a"], ["b"])
    assert om.node_name(node) == "relu"
    assert om.node_names(mlp())[:3] == ["fc1", "bias1", "relu1"]


def test_every_tensor_maps_to_the_value_holding_it():
    rng, seed = fresh_rng()
    model = mlp()
    graph, tensor_of = om.import_with_tensor_names(model)
    assert graph.signature_output_names() == ["y"] and len(graph.outputs) == 1
    assert set(tensor_of.values()) >= {"h", "hb", "r", "o", "ob", "t", "s", "y"}
    x = rng.standard_normal((4, 16)).astype(np.float32)
    _, env = interpret(graph, {"x": x}, return_env=True)
    by_name = {v.name: a for v, a in env.items()}
    ort = om.ort_run(model, {"x": x}, om.intermediate_tensors(model))
    for value, tensor in tensor_of.items():
        np.testing.assert_allclose(by_name[value], ort[tensor], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{value} vs {tensor} (seed {seed})")


def test_twins_of_the_precision_and_layout_passes():
    assert om.twin_of("relu0.1.nhwc.f16") == om.Twin("relu0.1", True)
    assert om.twin_of("mm.f32") == om.Twin("mm", False)
    assert om.twin_of("mm") == om.Twin("mm", False)
    a = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    assert om.to_channels_last(a).shape == (2, 4, 5, 3)


def test_the_layout_pass_keeps_the_twin_naming():
    """The names compare.py reads: a conv's result in NHWC is NAME.nhwc of the NCHW value NAME."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])],
                          [onnx.numpy_helper.from_array(w, "w")])
    graph, tensor_of = om.import_with_tensor_names(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    optimized, _ = run_pipeline(graph, precision="fp16")
    twins = [om.twin_of(n.outputs[0].name) for n in optimized.nodes if n.op == "convolution"]
    assert twins and all(t.nhwc and tensor_of.get(t.base) == "c" for t in twins)


def test_ort_run_adds_outputs_and_names_missing_inputs():
    model = mlp()
    x = np.ones((4, 16), np.float32)
    out = om.ort_run(model, {"x": x}, ["r", "hb"])
    assert set(out) == {"y", "r", "hb"} and out["r"].shape == (4, 32)
    assert len(model.graph.output) == 1                   # the model itself is left alone
    with pytest.raises(AotcError, match="no input values"):
        om.ort_run(model, {}, [])


def test_a_path_loads_external_data(tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              size_threshold=0, location="m.data")
    loaded = om.load_model(tmp_path / "m.onnx")
    assert {t.name for t in loaded.graph.initializer} >= {"W1", "W2"}
    assert onnx.numpy_helper.to_array(next(t for t in loaded.graph.initializer if t.name == "W1")).shape == (16, 32)
    (tmp_path / "m.data").unlink()
    with pytest.raises(ModelError, match="external data"):
        om.load_model(tmp_path / "m.onnx")
