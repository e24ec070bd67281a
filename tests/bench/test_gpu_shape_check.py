"""bench/gpu_shape_check.py under the stand-in driver: alternating shapes of a dynamic engine replay
their CUDA graphs with outputs equal to plain launches, and a row of timings per shape."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aotc.kernels.host_compile import have_host_compiler
from aotc.package.engine_format import write_engine
from aotc.testing.fakecuda import environment
from tests.package.dynamic_plans import device_images, host_build, make_dynamic_plan

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")
ROOT = Path(__file__).resolve().parents[2]


def test_alternating_shapes_are_identical_with_and_without_graphs(tmp_path):
    cubin, ptx = device_images()
    path = tmp_path / "dyn.engine"
    write_engine(make_dynamic_plan(host_build(), {"sm_90": cubin}, ptx), path)
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_shape_check", str(path), "--shape", "batch=3,seq=8",
                           "--shape", "batch=20,seq=64", "--shape", "batch=0", "--iterations", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, **environment()})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "3 shapes x 3 rounds, graphs vs plain launches: identical; replaying now: True" in lines[0]
    assert [l.split()[0] for l in lines[2:5]] == ["batch=3,", "batch=20,", "batch=0,"]
    assert all(float(l.split()[-1]) < 1e-5 for l in lines[2:4]), lines    # cuda (host build) equals cpu
    bad = subprocess.run([sys.executable, "-m", "bench.gpu_shape_check", str(path), "--shape", "batch=99"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, **environment()})
    assert bad.returncode == 2 and bad.stderr == "gpu_shape_check: error: dim batch = 99 is outside its range 0..64\n"
