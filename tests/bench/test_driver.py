"""run_bench: the accuracy column catches a wrong engine; unavailable competitors are rows, not crashes."""
import struct

import numpy as np
import onnx
import pytest

import aotc.compiler
from aotc.bench import load_source, run_bench
from aotc.package.engine_format import read_engine, write_engine
from aotc.bench.models.small import mlp

ort = pytest.importorskip("onnxruntime")
FAST = dict(iterations=4, warmup=1, input_count=2)


def _rows(result):
    return {r["system"]: r for r in result["rows"]}


def test_accuracy_column_catches_a_corrupted_weight(tmp_path):
    model, _ = mlp(seed=3)
    onnx.save(model, tmp_path / "m.onnx")
    good = tmp_path / "good.engine"
    aotc.compiler.compile(model, good, arch="none")
    plan = read_engine(good.read_bytes())
    offset = next(a.offset for launch in plan.launches for a in launch.args if a.kind == "weight")
    (w,) = struct.unpack_from("<f", plan.weights, offset)
    plan.weights = plan.weights[:offset] + struct.pack("<f", w + 40.0) + plan.weights[offset + 4:]
    bad = tmp_path / "bad.engine"
    write_engine(plan, bad)
    results = {}
    for name in ("good", "bad"):
        src = load_source(tmp_path / f"{name}.engine", model_path=tmp_path / "m.onnx")
        results[name] = _rows(run_bench(src, against=["onnxruntime"], **FAST))
    assert results["good"]["aotc"]["max_rel_err"] < 1e-5
    assert results["bad"]["aotc"]["max_rel_err"] > 1e-2 and results["bad"]["aotc"]["max_abs_err"] > 1e-2
    assert results["bad"]["onnxruntime-cpu"]["max_rel_err"] == 0.0          # the reference itself
    assert results["bad"]["aotc"]["build_s"] is None                         # prebuilt: no build time


def test_missing_and_inapplicable_competitors_are_reported(tmp_path, monkeypatch):
    import aotc.bench.systems as systems
    real = systems.missing
    monkeypatch.setattr(systems, "missing", lambda m, p: "not installed (pip install onnxruntime)"
                        if m == "onnxruntime" else real(m, p))
    model, _ = mlp()
    result = run_bench(load_source_from(model, tmp_path), against=["onnxruntime", "tensorrt", "torch", "jax"],
                       **FAST)
    rows = _rows(result)
    assert rows["aotc"]["status"] == "ok" and rows["aotc"]["p50_ms"] > 0
    assert rows["onnxruntime-cpu"]["status"] == "not installed (pip install onnxruntime)"
    assert result["reference"] == "aotc interpreter (fp32)" and rows["aotc"]["max_rel_err"] < 1e-5
    assert rows["tensorrt"]["status"] in ("not installed (pip install tensorrt)",
                                          "not applicable (TensorRT runs on the cuda device only)")
    assert rows["torch-eager"]["status"].startswith("not applicable")
    assert rows["jax"]["status"].startswith("not applicable")


def test_batch_override_times_the_same_shapes_everywhere(tmp_path):
    model, _ = mlp()
    onnx.save(model, tmp_path / "m.onnx")
    result = run_bench(load_source(tmp_path / "m.onnx", batch=16), against=["onnxruntime"], **FAST)
    rows = _rows(result)
    assert result["batch"] == 16 and result["inputs"] == {"x": ["f32", [16, 32]]}
    for r in rows.values():
        assert r["runs"] == 4 and r["throughput"] == pytest.approx(16 / (r["p50_ms"] / 1e3))
    assert rows["aotc"]["max_rel_err"] < 1e-5 and np.isfinite(result["roofline_floor_ms"])


def load_source_from(model, tmp_path):
    onnx.save(model, tmp_path / "m.onnx")
    return load_source(tmp_path / "m.onnx")


def test_cuda_timing_replays_a_cuda_graph_under_the_stand_in_driver(tmp_path):
    """Rotating input sets must not rebind pointers: the timed cuda runs are graph replays."""
    import json
    import os
    import subprocess
    import sys

    from aotc.testing.fakecuda import environment
    model, _ = mlp()
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    exe = os.path.join(os.path.dirname(sys.executable), "aotc")
    proc = subprocess.run([exe, "bench", str(path), "--device", "cuda", "--against", "onnxruntime",
                           "--iterations", "6", "--warmup", "2", "--json", str(tmp_path / "r.json"), "-q"],
                          capture_output=True, text=True, env={**os.environ, **environment()}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    row = json.loads((tmp_path / "r.json").read_text())["rows"][0]
    assert row["system"] == "aotc" and row["cuda_graph"] is True, row
    assert row["max_rel_err"] < 1e-5 and row["runs"] == 6, row
