"""`aotc run --inputs/--outputs` with bfloat16 and float8 arrays as numpy saves them (raw |V2, |V1, '<f1')."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import aotc
from aotc.kernels.host_compile import have_host_compiler
from tests.cli.test_main import one_line_error, run_cli
from tests.helpers.rng import fresh_rng

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")


def _model():
    inp = [helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [3, 5]),
           helper.make_tensor_value_info("b", TensorProto.FLOAT8E4M3FN, [7]),
           helper.make_tensor_value_info("c", TensorProto.FLOAT8E5M2, [7])]
    out = [helper.make_tensor_value_info("a2", TensorProto.BFLOAT16, [3, 5]),
           helper.make_tensor_value_info("bf", TensorProto.FLOAT, [7]),
           helper.make_tensor_value_info("c8", TensorProto.FLOAT8E5M2, [7])]
    nodes = [helper.make_node("Add", ["a", "a"], ["a2"]),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["cf", "cf"], ["cc"]),
             helper.make_node("Cast", ["cc"], ["c8"], to=TensorProto.FLOAT8E5M2)]
    return helper.make_model(helper.make_graph(nodes, "g", inp, out), opset_imports=[helper.make_opsetid("", 21)])


@pytest.fixture(scope="module")
def engine_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("npz") / "m.engine"
    aotc.compile(_model(), str(path), arch="sm_80")
    return path


def test_bf16_and_float8_npz_round_trip(engine_path, tmp_path):
    rng, seed = fresh_rng()
    a = rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
    b = (rng.standard_normal(7) * 50).astype(ml_dtypes.float8_e4m3fn)
    c = (rng.standard_normal(7) * 20).astype(ml_dtypes.float8_e5m2)
    np.savez(tmp_path / "in.npz", a=a, b=b, c=c)           # |V2, |V1 and '<f1' as numpy writes them
    proc = run_cli("run", str(engine_path), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "o.npz"))
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "o.npz")                      # loads without ml_dtypes' help
    assert got["a2"].dtype == np.dtype("V2") and got["c8"].dtype == np.dtype("V1")
    a2 = got["a2"].view(ml_dtypes.bfloat16)
    assert np.array_equal(a2.astype(np.float32), (a.astype(np.float32) * 2)), f"seed {seed}"
    assert np.array_equal(got["bf"], b.astype(np.float32)), f"seed {seed}"
    cf = c.astype(np.float32)
    want = np.clip(cf * cf, -57344, 57344).astype(ml_dtypes.float8_e5m2)   # Cast saturates by default
    assert np.array_equal(got["c8"].view(np.uint8), want.view(np.uint8)), f"seed {seed}"


def test_raw_bytes_of_the_wrong_width_are_one_line_errors(engine_path, tmp_path):
    np.savez(tmp_path / "bad.npz", a=np.zeros((3, 5), "V1"), b=np.zeros(7, ml_dtypes.float8_e4m3fn),
             c=np.zeros(7, ml_dtypes.float8_e5m2))
    proc = run_cli("run", str(engine_path), "--inputs", str(tmp_path / "bad.npz"))
    one_line_error(proc, "input 'a'", "raw 1-byte elements", "bf16")


def test_help_says_how_to_read_outputs_back():
    proc = run_cli("run", "--help")
    assert proc.returncode == 0 and "ml_dtypes" in proc.stdout and "|V2" in proc.stdout
