"""Engines the serving tests serve, compiled once per session (arch none: host build only),
with the ONNX models they came from as the onnxruntime reference."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aotc
from aotc.bench.models import small, zoo


def _scale_shift():
    """y = x * 2 + 1 and s = sum over the last axis: x [batch, seq] with two dynamic dims."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 1])
    nodes = [helper.make_node("Mul", ["x", "two"], ["x2"]), helper.make_node("Add", ["x2", "one"], ["y"]),
             helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1)]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    graph = helper.make_graph(nodes, "scale_shift", [x], [y, s], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _flatten():
    """y = reshape(x, [-1]): x [batch, 8], y [8 * batch], whose dim 0 is not the batch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "flatten", [x], [y],
                              [helper.make_tensor("shape", TensorProto.INT64, [1], [-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="session")
def serving_engines(tmp_path_factory):
    """name -> (engine path, onnx path): mlp (batch 1..32), mlp_static ([4, 32]), seq (batch 1..16,
    seq 1..16), flatten (batch 1..8, an output whose dim 0 is 8 * batch), t5 (a T5 layer: two int64
    inputs, batch 1..8)."""
    d = tmp_path_factory.mktemp("serving_engines")
    dyn, _ = zoo.with_dynamic_axes(small.mlp(batch=4), axes=("batch",))
    static, _ = small.mlp(batch=4)
    t5, _ = zoo.with_dynamic_axes(zoo.t5_layer(), axes=("batch",))
    out = {}
    for name, model, dynamic in (("mlp", dyn, {"batch": (1, 32)}), ("mlp_static", static, None),
                                 ("seq", _scale_shift(), {"batch": (1, 16), "seq": (1, 16)}),
                                 ("flatten", _flatten(), {"batch": (1, 8)}), ("t5", t5, {"batch": (1, 8)})):
        onnx_path = d / f"{name}.onnx"
        onnx.save(model, onnx_path)
        engine = d / f"{name}.engine"
        aotc.compile(model, str(engine), arch="none", **({"dynamic": dynamic} if dynamic else {}))
        out[name] = (str(engine), str(onnx_path))
    return out


def reference(onnx_path: str, feeds: dict) -> dict:
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def rand(shape, seed) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
