"""bench/gpu_all.sh and the GPU check scripts, end to end under the stand-in CUDA driver.

Only the hardware is left untested: the scripts run on --device cuda through
aotc.testing.fakecuda (kernels run by the host build), so a broken script, a
missing guard or a NaN that passes shows up here, not on a borrowed GPU.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aotc.kernels.host_compile import have_host_compiler
from aotc.testing.fakecuda import environment

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="the stand-in runs kernels through host builds")

# builders handed to gpu_check.main in a child process: a model whose output is NaN on every
# device, one whose builder raises, and a good one after them
GPU_CHECK_DRIVER = r'''
import importlib.util, json, sys
import numpy as np
from onnx import TensorProto, helper
spec = importlib.util.spec_from_file_location("gpu_check", "bench/gpu_check.py")
gc = importlib.util.module_from_spec(spec); spec.loader.exec_module(gc)
from aotc.bench.models.small import mlp

def nan_model():
    g = helper.make_graph([helper.make_node("Sqrt", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return m, {"x": -np.abs(np.random.default_rng(0).standard_normal((4, 8))).astype(np.float32) - 1}

def broken():
    raise RuntimeError("builder failed")

rc = gc.main(["fp32"], {"sqrt_of_negative": nan_model, "broken": broken, "mlp": mlp}, json_path=sys.argv[1])
print("RC", rc)
'''


def test_gpu_check_counts_nan_as_failure_and_survives_a_broken_model(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-c", GPU_CHECK_DRIVER, str(out)], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **environment()}, timeout=900)
    assert "RC 1" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    rows = {r["model"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["sqrt_of_negative"]["status"] == "FAIL"      # NaN everywhere: the old rel() said 0 failures
    assert rows["sqrt_of_negative"]["cuda_vs_cpu"] == float("inf")
    assert rows["broken"]["status"] == "error" and "builder failed" in rows["broken"]["detail"]
    assert rows["mlp"]["status"] == "pass" and rows["mlp"]["cuda_vs_cpu"] == 0.0


@pytest.mark.slow
def test_gpu_all_runs_end_to_end_under_the_stand_in(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("AOTC_LIBCUDA", "LD_LIBRARY_PATH")}
    env.update(OUT=str(tmp_path), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    proc = subprocess.run(["bash", "bench/gpu_all.sh", "--stand-in", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    data = json.loads((tmp_path / "gpu_all.json").read_text())
    assert data["passed"] and data["stand_in"] == "1"
    checks = {r["check"] for r in data["rows"]}
    assert checks == {"preflight", "gpu_check", "gpu_runtime_check", "gpu_split_k", "gpu_kernels"}, checks
    graph = [r for r in data["rows"] if r["check"] == "gpu_runtime_check" and r.get("mode") == "graph"]
    assert graph and graph[0]["graph"] is True
    assert "rows, 0 not passing" in (tmp_path / "gpu_all.txt").read_text()


def test_gpu_all_stops_at_a_failed_preflight(tmp_path):
    """Without a GPU and without --stand-in the preflight fails and says why; nothing else runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("AOTC_LIBCUDA", "LD_LIBRARY_PATH")}
    env.update(OUT=str(tmp_path), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               AOTC_LIBCUDA=environment()["AOTC_LIBCUDA"])  # the stand-in, but not accepted as a GPU
    proc = subprocess.run(["bash", "bench/gpu_all.sh"], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 1
    assert "pass --stand-in" in proc.stdout and "preflight failed" in proc.stdout
    data = json.loads((tmp_path / "gpu_all.json").read_text())
    assert {r["check"] for r in data["rows"]} == {"preflight"} and not data["passed"]
