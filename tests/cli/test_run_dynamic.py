"""`aotc run` and `aotc bench` on a dynamic engine: `--dim` picks the shape of random inputs,
.npz inputs of any shape in range run, bad shapes are one-line errors with nothing written."""
from __future__ import annotations

import numpy as np
import pytest

from aotc.kernels.host_compile import have_host_compiler
from aotc.package.engine_format import write_engine
from tests.cli.test_main import one_line_error, run_cli
from tests.package.dynamic_plans import host_build, inputs, make_dynamic_plan, reference

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")


@pytest.fixture(scope="module")
def engine_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("dyn") / "dyn.engine"
    write_engine(make_dynamic_plan(host_build()), path)
    return path


def test_run_with_dims_and_with_npz_inputs(engine_path, tmp_path):
    proc = run_cli("run", str(engine_path), "--dim", "batch=5", "--dim", "seq=12")
    assert proc.returncode == 0, proc.stderr
    assert "at batch=5, seq=12" in proc.stdout and "y: float32[80]" in proc.stdout and "v: float32[12]" in proc.stdout
    feeds = inputs(np.random.default_rng(3), 17, 24)
    np.savez(tmp_path / "in.npz", **feeds)
    proc = run_cli("run", str(engine_path), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "o.npz"))
    assert proc.returncode == 0, proc.stderr
    got, want = np.load(tmp_path / "o.npz"), reference(feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)
    assert got["which"][0] == 2 and got["v"].shape == (24,)


@pytest.mark.parametrize("shapes, words", [
    ({"x": (65, 16), "m": (65,)}, ["input 'x' dim 0 (batch) is 65, outside 0..64"]),
    ({"m": (3,)}, ["input 'm' dim 0 (batch) is 3 but input 'x' gives batch = 4"]),
    ({"u": (513,)}, ["input 'u' dim 0 (seq) is 513, outside 4..64"]),
    ({"x": (4,)}, ["input 'x' has rank 2"]),
])
def test_bad_shapes_exit_one_with_one_line_and_write_nothing(engine_path, tmp_path, shapes, words):
    rng = np.random.default_rng(4)
    feeds = inputs(rng, 4, 8)
    feeds.update({k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()})
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "out.npz"
    one_line_error(run_cli("run", str(engine_path), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(out)),
                   "aotc: error:", *words)
    assert not out.exists()


def test_dim_errors_and_bench(engine_path):
    one_line_error(run_cli("run", str(engine_path), "--dim", "batch=65"), "dim batch = 65 is outside its range 0..64")
    one_line_error(run_cli("run", str(engine_path), "--dim", "sequence=8"), "unknown dim(s) 'sequence'")
    proc = run_cli("bench", str(engine_path), "--against", "", "--dim", "batch=9", "--dim", "seq=16",
                   "--iterations", "3", "--warmup", "1", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "aotc " in proc.stdout and "batch 9" in proc.stdout
    one_line_error(run_cli("bench", str(engine_path), "--against", "", "--dim", "seq=6", "-q"),
                   "dim seq = 6 is outside its range 4..64 in multiples of 4")
