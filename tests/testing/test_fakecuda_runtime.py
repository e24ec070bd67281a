"""The cuda device path end to end under the stand-in driver: the runtime, the binding and the CLI.

Every e2e model runs on `cuda` (the stand-in executing the cubins' kernels
through the host build) and on `cpu`, and the two must agree bit for bit:
CUDA graphs off and on, new input values between runs, several contexts on
several threads; and again with work run as late as CUDA allows
(AOTC_FAKECUDA_ORDER=deferred), which shows any order the runtime relies on
but CUDA does not promise. Each check runs in a child process whose environment names
the stand-in (AOTC_LIBCUDA), as the runtime picks its driver once per process.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aotc.compiler
from aotc.kernels.host_compile import have_host_compiler
from aotc.testing.fakecuda import environment, library_path
from aotc.bench.models.small import MODELS, bert_encoder, resnet_bottleneck
from tests.helpers.rng import fresh_rng

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")
ROOT = Path(__file__).resolve().parents[2]


def _fake_env(**extra) -> dict:
    return {**os.environ, **environment(), **extra}


def _second_feeds(feeds: dict, rng) -> dict:
    out = {}
    for k, v in feeds.items():
        if v.dtype.kind == "f":
            out[k] = rng.standard_normal(v.shape).astype(v.dtype)
        else:  # token ids and the like: a permutation keeps them in range
            out[k] = rng.permutation(v.reshape(-1)).reshape(v.shape)
    return out


def _crosscheck(builders: dict, tmp_path: Path, light: bool = False, **env) -> dict:
    rng, seed = fresh_rng()
    specs = []
    for name, build in builders.items():
        built = build()
        model, feeds = built[0], built[1]
        if callable(feeds):
            feeds = feeds(rng)
        symbolic = {i.name for i in model.graph.input if any(d.dim_param for d in i.type.tensor_type.shape.dim)}
        path = tmp_path / f"{name}.engine"
        aotc.compiler.compile(model, path, input_shapes={n: feeds[n].shape for n in symbolic} or None)
        np.savez(tmp_path / f"{name}.npz", **feeds)
        np.savez(tmp_path / f"{name}.2.npz", **_second_feeds(feeds, rng))
        specs.append({"name": name, "engine": str(path), "feeds": str(tmp_path / f"{name}.npz"),
                      "feeds2": str(tmp_path / f"{name}.2.npz"), "light": light})
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    proc = subprocess.run([sys.executable, "-m", "tests.testing.fakecuda_crosscheck", str(tmp_path / "specs.json")],
                          cwd=ROOT, env=_fake_env(**env), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["name"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(results) == set(builders), (proc.stdout, proc.stderr[-2000:], seed)
    return results


def _assert_bit_exact(results: dict):
    for name, r in results.items():
        assert "error" not in r, (name, r)
        assert r["plain"] and r["graphs"] and r["threads"], (name, r)
        assert r["uses_graph"] and not r["plain_uses_graph"], (name, r)
        assert r["graph_launches"] > 0, (name, r)
        assert r["live_allocations"] == 0, (name, r)  # every context and engine gave its memory back


def test_small_models_match_the_cpu_device_bit_for_bit(tmp_path):
    _assert_bit_exact(_crosscheck(MODELS, tmp_path))


def test_small_models_match_bit_for_bit_when_work_runs_as_late_as_cuda_allows(tmp_path):
    """Before the runtime waited for its first-use work (the weight upload and the split-K counter
    zeroing run on the legacy stream, the launches on the context's non-blocking stream), the
    first context's first run read the weights' NaN pattern here."""
    _assert_bit_exact(_crosscheck(MODELS, tmp_path, AOTC_FAKECUDA_ORDER="deferred"))


@pytest.mark.slow
@pytest.mark.parametrize("order", ["eager", "deferred"])
def test_larger_e2e_and_zoo_models_match_the_cpu_device_bit_for_bit(tmp_path, order):
    from aotc.bench.models.zoo import ZOO_MODELS
    _assert_bit_exact(_crosscheck({"resnet_bottleneck": resnet_bottleneck, "bert_encoder": bert_encoder,
                                   **ZOO_MODELS}, tmp_path, AOTC_FAKECUDA_ORDER=order))


@pytest.mark.slow
def test_real_size_models_match_the_cpu_device_bit_for_bit(tmp_path):
    """ResNet-50, MobileNetV2, BERT-base, GPT-2 small, ViT-B/16: the cuda path under the stand-in, graphs
    off and on, two contexts on two threads, equal to the cpu device bit for bit."""
    from aotc.bench.models.real import REAL_MODELS
    _assert_bit_exact(_crosscheck(REAL_MODELS, tmp_path, light=True))


def _aotc(*args, env=None):
    exe = Path(sys.executable).with_name("aotc")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env or _fake_env(), timeout=600)


def test_cli_runs_an_engine_on_cuda_under_the_stand_in(tmp_path):
    model, feeds = MODELS["transformer_block"]()
    engine = tmp_path / "t.engine"
    aotc.compiler.compile(model, engine)
    np.savez(tmp_path / "in.npz", **feeds)
    for device in ("cpu", "cuda"):
        proc = _aotc("run", str(engine), "--device", device, "--inputs", str(tmp_path / "in.npz"),
                     "--outputs", str(tmp_path / f"{device}.npz"), "--iterations", "3")
        assert proc.returncode == 0, proc.stderr
        assert f"on {device}" in proc.stdout
    cpu, cuda = np.load(tmp_path / "cpu.npz"), np.load(tmp_path / "cuda.npz")
    assert set(cpu.files) == set(cuda.files)
    for k in cpu.files:
        np.testing.assert_array_equal(cuda[k], cpu[k])


def test_ptx_only_engine_is_jit_compiled_and_matches_the_cpu(tmp_path):
    model, feeds = MODELS["mlp"]()
    engine = tmp_path / "m.engine"
    aotc.compiler.compile(model, engine, arch="compute_90")  # PTX only, no cubin
    np.savez(tmp_path / "in.npz", **feeds)
    for device in ("cpu", "cuda"):
        proc = _aotc("run", str(engine), "--device", device, "--inputs", str(tmp_path / "in.npz"),
                     "--outputs", str(tmp_path / f"{device}.npz"), env=_fake_env(AOTC_FAKECUDA_ARCH="100"))
        assert proc.returncode == 0, proc.stderr
    cpu, cuda = np.load(tmp_path / "cpu.npz"), np.load(tmp_path / "cuda.npz")
    for k in cpu.files:
        np.testing.assert_array_equal(cuda[k], cpu[k])


def test_engine_without_kernels_for_the_device_arch_is_refused(tmp_path):
    model, _ = MODELS["mlp"]()
    engine = tmp_path / "m.engine"
    aotc.compiler.compile(model, engine, arch="sm_80,none")  # sm_80 SASS only, no PTX
    proc = _aotc("run", str(engine), "--device", "cuda", env=_fake_env(AOTC_FAKECUDA_ARCH="90"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no kernels for this GPU (sm_90)" in proc.stderr, proc.stderr


def test_bad_aotc_libcuda_is_one_clear_line(tmp_path):
    model, _ = MODELS["mlp"]()
    engine = tmp_path / "m.engine"
    aotc.compiler.compile(model, engine)
    proc = _aotc("run", str(engine), "--device", "cuda", env={**os.environ, "AOTC_LIBCUDA": str(tmp_path / "nope.so")})
    assert proc.returncode != 0 and "AOTC_LIBCUDA=" in proc.stderr and "Traceback" not in proc.stderr


def test_module_prints_the_library_path():
    proc = subprocess.run([sys.executable, "-m", "aotc.testing.fakecuda"], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == library_path() and os.path.exists(proc.stdout.strip())


@pytest.mark.parametrize("change", ["drop", "add"])
def test_plan_passing_the_wrong_argument_count_is_refused(tmp_path, change):
    """The runtime checks each launch's argument count against the cubin's parameter info
    (cuFuncGetParamInfo), so a plan and kernels that disagree fail before any launch."""
    from aotc.package.engine_format import write_engine
    model, _ = MODELS["mlp"]()
    plan = aotc.compiler.compile(model).plan
    launch = plan.launches[0]
    launch.args = launch.args[:-1] if change == "drop" else launch.args + [launch.args[-1]]
    engine = tmp_path / "bad.engine"
    write_engine(plan, engine)
    proc = _aotc("run", str(engine), "--device", "cuda")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    n = len(launch.args)
    want = f"takes {n + 1} parameters" if change == "drop" else f"takes {n - 1} parameters"
    assert f"kernel '{launch.kernel}' (launch 0) {want} in the cubin sm_90, the launch plan passes {n}" \
        in proc.stderr, proc.stderr


def test_engine_without_a_host_build_says_the_stand_in_needs_one(tmp_path):
    model, _ = MODELS["mlp"]()
    engine = tmp_path / "m.engine"
    aotc.compiler.compile(model, engine, host=False)
    proc = _aotc("run", str(engine), "--device", "cuda")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "the stand-in CUDA driver runs the engine's host build: engine has no host build" in proc.stderr, \
        proc.stderr
