"""AotcBackend on hand-made one-node models (fast; the full node suite is test_node_suite.py, slow)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from aotc.errors import UnsupportedError
from tests.onnx_backend.backend import AotcBackend
from tests.onnx_backend.cases import EXCLUDED_TAGS, summarize
from tests.helpers.rng import fresh_rng, random_array


def _model(node, inputs, outputs, opset=18):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_shape_carrying_input_is_frozen_at_run():
    """TopK's K is a graph input, as in the node tests: the rep compiles at run() with K frozen."""
    rng, seed = fresh_rng()
    m = _model(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
               [("x", TensorProto.FLOAT, [3, 7]), ("k", TensorProto.INT64, [1])],
               [("v", TensorProto.FLOAT, [3, 2]), ("i", TensorProto.INT64, [3, 2])])
    rep = AotcBackend.prepare(m, "CPU")
    assert rep.engine is None
    x = random_array(rng, (3, 7))
    v, i = rep.run([x, np.array([2], np.int64)])
    assert rep.frozen == ["k"]
    want = np.argsort(-x, axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(i, want, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(v, np.take_along_axis(x, want, 1))


def test_cuda_device_is_refused_and_cpu_runs():
    rng, seed = fresh_rng()
    m = _model(helper.make_node("Acos", ["x"], ["y"]), [("x", TensorProto.FLOAT, [50])],
               [("y", TensorProto.FLOAT, [50])])
    assert AotcBackend.supports_device("CPU") and not AotcBackend.supports_device("CUDA")
    with pytest.raises(UnsupportedError, match="device 'CUDA'"):
        AotcBackend.prepare(m, "CUDA")
    x = random_array(rng, (50,), np.float32, -0.9, 0.9)
    (y,) = AotcBackend.run_model(m, [x])
    np.testing.assert_allclose(y, np.arccos(x), rtol=1e-5, err_msg=f"seed {seed}")


def test_nvrtc_path_for_one_case():
    pytest.importorskip("cuda.bindings.nvrtc")
    m = _model(helper.make_node("BitShift", ["x", "s"], ["y"], direction="RIGHT"),
               [("x", TensorProto.UINT8, [9]), ("s", TensorProto.UINT8, [9])], [("y", TensorProto.UINT8, [9])])
    rep = AotcBackend.prepare(m, "CPU", arch="sm_80")
    x = np.arange(200, 209, dtype=np.uint8)
    s = np.array([0, 1, 2, 3, 7, 8, 9, 200, 4], np.uint8)
    (y,) = rep.run([x, s])
    np.testing.assert_array_equal(y, np.where(s >= 8, 0, x >> np.minimum(s, 7)))


def test_summary_counts_an_op_only_when_all_its_cases_pass_or_are_excluded():
    recs = [("a1", "passed", ["A"], ""), ("a2", "xfail:f64", ["A"], ""),
            ("b1", "passed", ["B"], ""), ("b2", "xfail:unsupported", ["B"], ""),
            ("c1", "failed", ["C"], "x"), ("d1", "xfail:f64", ["D"], "")]
    s = summarize(recs)
    assert "f64" in EXCLUDED_TAGS and "unsupported" not in EXCLUDED_TAGS
    assert s["op_types_supported"] == ["A"] and s["op_types_partial"] == ["B"]
    assert s["counts"] == {"passed": 2, "failed": 1, "xfail:f64": 2, "xfail:unsupported": 1}
