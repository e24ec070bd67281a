"""onnx.checks: safe external data, the opset range, negative dims (through import_onnx)."""
from __future__ import annotations

import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import ModelError
from aotc.importers.onnx import checks as model_checks
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret

rng = np.random.default_rng(7)


def _io(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _matmul_model() -> tuple[onnx.ModelProto, np.ndarray]:
    w = rng.standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [_io("x", [3, 16])],
                              [_io("y", [3, 8])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


def _external(model: onnx.ModelProto, name: str, location: str) -> onnx.ModelProto:
    """A copy whose tensor `name` (initializer or Constant value) points at `location`."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    tensors = list(m.graph.initializer) + [a.t for n in m.graph.node for a in n.attribute if a.name == "value"]
    t = next(t for t in tensors if t.name == name)
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", location
    return m


def test_external_data_beside_the_model_is_read(tmp_path):
    model, w = _matmul_model()
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.weights", size_threshold=0)
    assert (tmp_path / "m.weights").stat().st_size == w.nbytes
    assert onnx.load(path, load_external_data=False).graph.initializer[0].data_location == TensorProto.EXTERNAL
    x = rng.standard_normal((3, 16)).astype(np.float32)
    (y,) = interpret(import_onnx(path), {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_external_data_without_a_folder_is_refused(tmp_path):
    model, _ = _matmul_model()
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.weights",
                    size_threshold=0)
    unloaded = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    for given, how in ((unloaded, "onnx.ModelProto"), (unloaded.SerializeToString(), "bytes")):
        with pytest.raises(ModelError, match=f"tensor 'w' keeps its data in an external file \\('m.weights'\\), "
                                             f"but the model was given as (an )?{how}"):
            import_onnx(given)


@pytest.mark.parametrize("location, message", [
    ("../secret.bin", "contains '..'"),
    ("sub/../../secret.bin", "contains '..'"),
    ("..\\secret.bin", "contains '..'"),
    ("ABSOLUTE", "is not a relative path"),
    ("link.bin", "outside the model's folder"),
    ("", "is not a relative path"),
    ("w\0.bin", "is not a relative path"),
    ("C:\\secret.bin", "is not a relative path"),
    ("missing.bin", "missing"),
    ("sub", "not a regular file"),
])
def test_unsafe_or_missing_external_data_is_refused_before_any_read(tmp_path, monkeypatch, location, message):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(128, np.float32).tobytes())
    os.symlink(secret, folder / "link.bin")
    location = str(secret) if location == "ABSOLUTE" else location
    model, _ = _matmul_model()
    path = folder / "m.onnx"
    path.write_bytes(_external(model, "w", location).SerializeToString())
    reads = []
    monkeypatch.setattr(onnx, "load_external_data_for_model", lambda *a: reads.append(a))
    with pytest.raises(ModelError, match=f"tensor 'w' external data location .*{message}"):
        import_onnx(path)
    assert reads == []


def test_external_data_of_a_constant_node_is_checked_too(tmp_path):
    value = numpy_helper.from_array(np.ones((2, 2), np.float32), "k")
    graph = helper.make_graph([helper.make_node("Constant", [], ["c"], value=value),
                               helper.make_node("Add", ["x", "c"], ["y"])], "g", [_io("x", [2, 2])],
                              [_io("y", [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (tmp_path / "m.onnx").write_bytes(_external(model, "k", "../k.bin").SerializeToString())
    with pytest.raises(ModelError, match="tensor 'k' external data location '../k.bin' contains '..'"):
        import_onnx(tmp_path / "m.onnx")


def _not_model(opset: int, domain: str = "") -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Not", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BOOL, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])


def test_opsets_from_1_to_the_newest_onnx_knows_import():
    x = rng.random((2, 3)) < 0.5
    for opset in (model_checks.OPSET_MIN, 13, model_checks.opset_max()):
        (y,) = interpret(import_onnx(_not_model(opset)), {"x": x})
        np.testing.assert_array_equal(y, ~x)


@pytest.mark.parametrize("opset", [0, "newest+1", 99])
def test_an_opset_outside_the_range_is_refused(opset):
    newest = onnx.defs.onnx_opset_version()
    opset = newest + 1 if opset == "newest+1" else opset
    for domain in ("", "ai.onnx"):
        with pytest.raises(ModelError, match=f"imports ONNX opset {opset} .*aotc supports opsets 1 to {newest}"):
            import_onnx(_not_model(opset, domain).SerializeToString())


def test_negative_dims_name_the_tensor_and_the_dim():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [_io("x", ["n", 4])], [_io("y", ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"input 'x' dim 0 is -2 \(shape \[-2, 4\]\); dims must be >= 0"):
        import_onnx(model, input_shapes={"x": (-2, 4)})
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [_io("x", [3, 4])], [_io("y", [3, -4])])
    with pytest.raises(ModelError, match=r"output 'y' dim 1 is -4"):
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("op, attrs, bad", [
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [1, 0]}, "strides=[1, 0] must be positive"),
    ("AveragePool", {"kernel_shape": [0, 2]}, "kernel_shape=[0, 2] must be positive"),
    ("Conv", {"dilations": [0, 1]}, "dilations=[0, 1] must be positive"),
    ("DepthToSpace", {"blocksize": 0}, "blocksize=[0] must be positive"),
    ("AveragePool", {"kernel_shape": [2, 2], "pads": [0, 0, -1, 1]}, "pads=[0, 0, -1, 1] must be non-negative"),
    ("Conv", {"group": 0}, "group=[0] must be positive"),
    ("Split", {"num_outputs": 0}, "num_outputs=[0] must be positive"),
    ("Cast", {"to": 99}, "to=[99] is not an ONNX data type"),
])
def test_bad_windows_strides_groups_pads_and_dtypes_are_refused(op, attrs, bad):
    """Converters divide by these, pad with them or name their type; ONNX's checker lets
    them through (a ZeroDivisionError, numpy's ValueError or protobuf's before)."""
    w = numpy_helper.from_array(np.ones((3, 2, 2, 2), np.float32), "w")
    graph = helper.make_graph([helper.make_node(op, ["x", "w"] if op == "Conv" else ["x"], ["y"], name="n0", **attrs)],
                              "g", [_io("x", [1, 2, 6, 6])], [_io("y", ["a", "b", "c", "d"])],
                              [w] if op == "Conv" else [])
    with pytest.raises(ModelError, match=f"{op} 'n0': attribute {re.escape(bad)}"):
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def test_pad_2_keeps_its_negative_pads():
    """Pad-2's pads attribute crops where negative: the rule above is for Conv/pool pads only."""
    graph = helper.make_graph([helper.make_node("Pad", ["x"], ["y"], pads=[0, -1, 0, 2])], "g",
                              [_io("x", [2, 4])], [_io("y", [2, 5])])
    x = rng.standard_normal((2, 4)).astype(np.float32)
    (y,) = interpret(import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 2)])), {"x": x})
    np.testing.assert_array_equal(y, np.pad(x[:, 1:], [(0, 0), (0, 2)]))


def test_a_graph_without_outputs_is_refused():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [_io("x", [2])], [])
    with pytest.raises(ModelError, match="declares no outputs"):
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
