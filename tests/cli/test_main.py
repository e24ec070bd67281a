"""The `aotc` command end to end: compile, run, inspect, demo, and one-line errors."""
import json
import struct
import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from aotc.cli.main import main
from aotc.bench.models.small import mlp


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    model, feeds = mlp()
    d = tmp_path_factory.mktemp("cli")
    path = d / "mlp.onnx"
    onnx.save(model, path)
    np.savez(d / "in.npz", **feeds)
    return path


@pytest.fixture(scope="module")
def engine_path(model_path):
    out = model_path.with_suffix(".engine")
    res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert "kernels" in res.output and "arena" in res.output and "sm_80" in res.output
    return out


def test_compile_json_summary(model_path, tmp_path):
    out = tmp_path / "m.engine"
    res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "--json", "--arch", "sm_90"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert s["archs"] == ["sm_90"] and s["ptx"] == "compute_90"
    assert not s["host_build"] and s["host_library"] == "on first cpu run"     # the default: built when first run
    assert s["nodes_imported"] >= s["nodes_optimized"] > 0 and s["engine_bytes"] == out.stat().st_size
    assert set(s["stage_seconds"]) >= {"import", "passes", "fusion", "codegen", "nvrtc"}
    # the process's CPU, and the part of it spent while NVRTC ran
    assert set(s["cpu_seconds"]) == {"total", "during nvrtc"}
    assert 0 <= s["cpu_seconds"]["during nvrtc"] <= s["cpu_seconds"]["total"]
    res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "--json", "--arch", "sm_90", "--host"])
    s = json.loads(res.output)
    assert s["host_build"] and s["host_library"] == "embedded" and "host" in s["stage_seconds"]


def test_compile_summary_says_where_the_host_library_comes_from(model_path, tmp_path):
    out = tmp_path / "m.engine"
    for flags, said in (([], "host library on first cpu run (--host embeds it)"), (["--host"], "host library embedded")):
        res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "-q", "--arch", "none", *flags])
        assert res.exit_code == 0, res.output
        assert next(ln for ln in res.output.splitlines() if ln.strip().startswith("targets")).endswith(said)


def test_compile_explain_shows_each_kernels_fusion(model_path, tmp_path):
    """--explain lists every region with its ONNX ops and the reasons its fusion stopped."""
    out = tmp_path / "m.engine"
    res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "--explain", "--json",
                                    "--arch", "sm_90", "--no-host"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert len(s["fusion"]) == s["regions"]
    assert [r["kind"] for r in s["fusion"]] == ["dot", "dot", "dot"]
    assert s["fusion"][1]["anchor"] and "Gelu_5/tanh" in s["fusion"][1]["ops"]
    assert any("not fused" in why for r in s["fusion"] for why in r["why_not_larger"])
    res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "--explain", "-q",
                                    "--arch", "sm_90", "--no-host"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("fusion"))
    assert "Gemm_6" in "".join(lines[start:]) and "operand prologue takes only index math" in "".join(lines[start:])


def test_compile_explain_says_why_a_quantized_conv_stays_float(tmp_path):
    """A Q/DQ conv whose weights have a zero point runs in float, and --explain names the reason per node."""
    from tests.helpers.quantized import qdq_conv_model
    path, out = tmp_path / "q.onnx", tmp_path / "q.engine"
    onnx.save(qdq_conv_model(zx=5, weight_zp=3), path)
    args = ["compile", str(path), "-o", str(out), "--explain", "--arch", "sm_90", "--no-host"]
    res = CliRunner().invoke(main, args + ["--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["quantization"] == {"conv1": "float: weight has a non-zero zero point "
                                                                "(supported: symmetric weights)"}
    res = CliRunner().invoke(main, args + ["-q"])
    assert res.exit_code == 0, res.output
    assert "quantized  0 of 1 dot/conv nodes" in res.output and "conv1: float: weight has a non-zero" in res.output


def test_run_with_inputs_matches_onnxruntime(engine_path, model_path, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    outs = tmp_path / "out.npz"
    inputs = model_path.parent / "in.npz"
    res = CliRunner().invoke(main, ["run", str(engine_path), "--inputs", str(inputs), "--outputs", str(outs)])
    assert res.exit_code == 0, res.output
    got = np.load(outs)
    feeds = dict(np.load(inputs))
    want = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, feeds)
    name = onnx.load(model_path).graph.output[0].name
    np.testing.assert_allclose(got[name], want[0], rtol=1e-4, atol=1e-6)


def test_run_random_inputs(engine_path):
    res = CliRunner().invoke(main, ["run", str(engine_path), "--iterations", "2"])
    assert res.exit_code == 0 and "median" in res.output


def test_inspect_json_lists_signature_kernels_and_archs(engine_path):
    res = CliRunner().invoke(main, ["inspect", str(engine_path), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["inputs"] == [{"name": "x", "dtype": "f32", "shape": [4, 32]}]
    assert info["outputs"][0]["shape"] == [4, 10]
    assert info["archs"] == ["sm_80", "sm_90"] and info["kernels"]
    assert all(k["bytes"] > 0 and k["flops"] > 0 for k in info["kernels"])
    text = CliRunner().invoke(main, ["inspect", str(engine_path)]).output
    assert "roofline" in text and "x: f32[4,32]" in text


def run_cli(*args):
    """Run the real console entry point in a subprocess (stderr and exit code as a user sees them)."""
    return subprocess.run([sys.executable, "-m", "aotc.cli.main", *args], capture_output=True, text=True)


def one_line_error(proc, *words):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith("  .. ")]   # progress
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_errors_are_one_line(tmp_path, engine_path):
    one_line_error(run_cli("compile", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "x.engine")),
                   "not found")
    bad = tmp_path / "bad.engine"
    data = bytearray(engine_path.read_bytes())
    count, table = struct.unpack_from("<IQ", data, 36)
    off, size = max((struct.unpack_from("<II16sQQII", data, table + 48 * i)[3:5] for i in range(count)),
                    key=lambda e: e[1])
    data[off + size // 2] ^= 0xFF         # inside the largest section (not the padding between sections)
    bad.write_bytes(bytes(data))
    one_line_error(run_cli("run", str(bad)), "error")
    one_line_error(run_cli("inspect", str(bad)), "error")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    one_line_error(run_cli("compile", str(tmp_path / "junk.onnx"), "-o", str(tmp_path / "j.engine")), "error")


def test_unsupported_op_is_a_short_list_naming_the_node(tmp_path):
    node = helper.make_node("NonMaxSuppression", ["b", "s"], ["y"], name="nms0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 4]),
                                            helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [4, 3])])
    path = tmp_path / "nms.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    proc = run_cli("compile", str(path), "-o", str(tmp_path / "n.engine"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith("  .. ")]
    # a summary line, then one short line per unsupported node
    assert "unsupported" in lines[0] and lines[0].startswith("aotc: error:")
    assert len(lines) == 2 and "NonMaxSuppression" in lines[1] and "nms0" in lines[1]


def test_bad_input_shape_names_the_input(engine_path, tmp_path):
    np.savez(tmp_path / "wrong.npz", x=np.zeros((3, 32), np.float32))
    one_line_error(run_cli("run", str(engine_path), "--inputs", str(tmp_path / "wrong.npz")), "'x'")


def test_cuda_without_driver_is_a_clean_error(engine_path):
    proc = run_cli("run", str(engine_path), "--device", "cuda")
    if proc.returncode == 0:
        pytest.skip("a GPU is present")
    one_line_error(proc, "error")


def test_demo_runs_and_checks():
    res = CliRunner().invoke(main, ["demo"])
    assert res.exit_code == 0, res.output
    assert "OK" in res.output and "MISMATCH" not in res.output


def test_inspect_roofline_is_overridable(engine_path):
    base = json.loads(CliRunner().invoke(main, ["inspect", str(engine_path), "--json"]).output)
    slow = json.loads(CliRunner().invoke(main, ["inspect", str(engine_path), "--json", "--bandwidth", "0.043",
                                                "--fp32-tflops", "0.6"]).output)
    assert base["roofline_floor_us_h200"] > 0
    assert abs(slow["roofline_floor_us_h200"] / base["roofline_floor_us_h200"] - 100) < 1e-6


def test_input_shape_fixes_symbolic_dims(tmp_path):
    """Exported models carry dynamic axes; --input-shape fixes them (names may hold ':', as tf2onnx's do)."""
    ort = pytest.importorskip("onnxruntime")
    x = helper.make_tensor_value_info("input_1:0", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])
    graph = helper.make_graph([helper.make_node("Softmax", ["input_1:0"], ["y"], name="sm", axis=-1)], "g", [x], [y])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    one_line_error(run_cli("compile", str(path), "-o", str(tmp_path / "d.engine"), "--arch", "none"),
                   "--input-shape input_1:0:1x1x4")
    res = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "d.engine"), "--arch", "none", "-q",
                                    "--input-shape", "input_1:0:3x5x4"])
    assert res.exit_code == 0, res.output
    feeds = {"input_1:0": np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    res = CliRunner().invoke(main, ["run", str(tmp_path / "d.engine"), "--inputs", str(tmp_path / "in.npz"),
                                    "--outputs", str(tmp_path / "out.npz")])
    assert res.exit_code == 0, res.output
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], want, rtol=1e-5, atol=1e-6)
    bad = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "e.engine"), "--input-shape", "3x5x4"])
    assert bad.exit_code != 0 and "NAME:DIMS" in bad.output


def test_compile_summary_says_how_the_device_code_was_built(model_path, tmp_path, monkeypatch):
    out = tmp_path / "m.engine"
    monkeypatch.setenv("AOTC_PTXAS", "none")
    res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "-q", "--arch", "sm_90"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.strip().startswith("targets"))
    assert "sm_90, PTX compute_90 (NVRTC per arch: no ptxas of NVRTC's release" in line


def test_compile_fast_compile_is_recorded_and_runs(model_path, tmp_path):
    out = tmp_path / "fast.engine"
    res = CliRunner().invoke(main, ["compile", str(model_path), "-o", str(out), "--fast-compile", "--arch", "sm_90",
                                    "-q"])
    assert res.exit_code == 0, res.output
    from aotc.package.engine_format import read_engine
    plan = read_engine(out.read_bytes())
    assert plan.manifest["fast_compile"] is True and plan.cubins["sm_90"][:4] == b"\x7fELF"
    assert plan.manifest["device_build"] == "NVRTC per arch: fast compile"     # --Ofast-compile is NVRTC's own
    res = CliRunner().invoke(main, ["run", str(out), "--iterations", "1"])
    assert res.exit_code == 0, res.output


def test_compile_explain_says_why_an_int8_attention_is_not_one_kernel(tmp_path):
    """ModelOpt-style Q/DQ attention: one int8 attention kernel; with its quantized probabilities also a
    model output, the two int8 GEMMs, and --explain says why in one line."""
    from onnx import TensorProto, helper
    from tests.e2e.test_quantized_models import _modelopt_attention
    model = _modelopt_attention(1, 2, 9, 16)
    path, out = tmp_path / "a.onnx", tmp_path / "a.engine"
    args = ["compile", str(path), "-o", str(out), "--explain", "--arch", "none", "--no-host", "--json"]
    onnx.save(model, path)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert [r["kind"] for r in json.loads(res.output)["fusion"]].count("attention") == 1
    model.graph.output.append(helper.make_tensor_value_info("p_q", TensorProto.INT8, [1, 2, 9, 9]))
    onnx.save(model, path)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    fusion = json.loads(res.output)["fusion"]
    assert "attention" not in [r["kind"] for r in fusion]
    assert [w for r in fusion for w in r["why_not_larger"] if "attention" in w] == \
        ["int8 attention not fused: 'p_q' is a graph output"]
