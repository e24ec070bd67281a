"""The built wheel, installed (not editable) into a fresh venv, compiles and runs models from outside the checkout.

An editable install reads templates and runtime sources straight from the
checkout, so a file the compiler reads at run time but the wheel does not ship
(a `.part` template once) passes every other test. Here the wheel is built
from a copy of the working tree, installed into a new venv whose only aotc is
the wheel's, and the `aotc` command it installs compiles a MobileNet-style
depthwise block (ONNX) and a StableHLO program, then runs both engines on the
`cpu` device from a temporary folder; the outputs must match onnxruntime and
jax. The venv borrows the other dependencies (numpy, onnx, jaxlib, the NVRTC
wheels) from this environment: after pip installed the wheel into the empty
venv, every entry of this environment's site-packages except aotc's own is
linked into the venv's. Links rather than a .pth file, because the NVRTC
loader looks for its library in the site-packages folders themselves, not on
sys.path; and after the install, so pip never sees, nor touches, the editable
aotc of this environment.
"""
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.bench.models.builders import ModelBuilder, batch_norm
from tests.helpers.rng import fresh_rng

ROOT = Path(__file__).resolve().parents[2]
_IGNORED = (".git", ".venv", "build", "dist", "__pycache__", ".cache", ".pytest_cache", "*.egg-info", "*.so",
            "*.engine", ".whl")

pytestmark = pytest.mark.slow


def _run(cmd, cwd, env=None, timeout=300):
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _copy_tree(dest: Path) -> None:
    """The working tree (tracked and untracked-but-not-ignored files) without build outputs or the venv."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, check=True).stdout
        files = [f for f in listed.decode().split("\0") if f and (ROOT / f).is_file()]
    except (OSError, subprocess.CalledProcessError):      # not a git checkout: copy, skipping build outputs
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*_IGNORED))
        return
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)


def _link_dependencies(purelib: Path) -> int:
    """Link this environment's installed packages into the venv's site-packages, leaving out aotc's own."""
    dirs = [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    dirs += [p for p in site.getsitepackages() if p not in dirs]
    linked = 0
    for d in map(Path, dirs):
        if not d.is_dir() or d == purelib:
            continue
        for entry in d.iterdir():
            name = entry.name.lower()
            if "aotc" in name or name == "__pycache__" or (purelib / entry.name).exists():
                continue
            (purelib / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
            linked += 1
    return linked


def _depthwise_block(seed: int):
    """A MobileNetV2 inverted residual: 1x1 expand + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 project, add."""
    m = ModelBuilder(seed)
    lo, hi = m.c("lo", 0.0, np.float32), m.c("hi", 6.0, np.float32)
    h = m.op("Conv", ["image", m.w("expand", 48, 16, 1, 1)])
    h = m.op("Clip", [batch_norm(m, h, 48, "bn0"), lo, hi])
    h = m.op("Conv", [h, m.w("dw", 48, 1, 3, 3)], group=48, pads=[1, 1, 1, 1])
    h = m.op("Clip", [batch_norm(m, h, 48, "bn1"), lo, hi])
    h = m.op("Conv", [h, m.w("project", 16, 48, 1, 1)])
    out = m.op("Add", ["image", batch_norm(m, h, 16, "bn2")])
    shape = [2, 16, 14, 14]
    return m.build("depthwise_block", [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)], opset=17)


def _rel_error(got, want) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, its `aotc` command, the wheel, its site-packages) once the wheel is built and installed."""
    base = tmp_path_factory.mktemp("wheel")
    src, wheels, venv = base / "src", base / "wheels", base / "venv"
    _copy_tree(src)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, src], cwd=base, timeout=600)
    (wheel,) = wheels.glob("aotc-*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=base)
    python = venv / "bin" / "python"
    # install before linking the dependencies in: pip sees an empty venv, never the editable aotc here
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel], cwd=base)
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=base).strip())
    assert _link_dependencies(purelib) > 0
    return python, venv / "bin" / "aotc", wheel, purelib


@pytest.fixture
def workdir(tmp_path):
    """A folder outside the checkout, an environment without PYTHONPATH, and a fresh kernel cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AOTC_RUNTIME_LIB")}
    env["AOTC_CACHE_DIR"] = str(tmp_path / "cache")
    work = tmp_path / "work"
    work.mkdir()
    assert ROOT not in work.parents
    return work, env


def _source_files(src: Path) -> dict[str, Path]:
    """Wheel path -> source file, for every file of the aotc package and of cli/ (installed as aotc/cli)."""
    files = {}
    for top, dest in (("aotc", "aotc"), ("cli", "aotc/cli")):
        for p in (src / top).rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyc"):
                files[f"{dest}/{p.relative_to(src / top).as_posix()}"] = p
    return files


def test_the_wheel_ships_aotc_alone_with_every_file_it_reads(installed):
    _, _, wheel, purelib = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"aotc"}, tops
    missing = sorted(set(_source_files(wheel.parents[1] / "src")) - names)
    assert not missing, f"in the source tree but not in the wheel (package-data in pyproject.toml?): {missing}"
    assert "aotc/kernels/templates/depthwise_stage.part" in names
    assert any(n.startswith("aotc/package/_aotc_runtime") for n in names)
    assert "aotc/serving/libtriton_aotc.so" in names  # the Triton backend, built like the runtime
    assert not (purelib / "cli").exists()


def test_the_venv_imports_the_wheel_not_the_checkout(installed, workdir):
    python, _, _, purelib = installed
    work, env = workdir
    code = ("import aotc, aotc.cli.main, aotc.package.runtime_binding as rb, importlib.util, json; "
            "print(json.dumps([aotc.__file__, aotc.cli.main.__file__, rb.library_path(), "
            "importlib.util.find_spec('cli') is None]))")
    aotc_file, cli_file, lib, no_cli = json.loads(_run([python, "-c", code], cwd=work, env=env))
    for path in (aotc_file, cli_file, lib):
        assert Path(path).is_relative_to(purelib), path
    assert no_cli


def test_installed_aotc_compiles_and_runs_a_depthwise_model(installed, workdir):
    import onnxruntime as ort
    _, aotc_cmd, _, _ = installed
    work, env = workdir
    rng, seed = fresh_rng()
    model = _depthwise_block(seed)
    onnx.save(model, work / "block.onnx")
    image = rng.standard_normal((2, 16, 14, 14)).astype(np.float32)
    np.savez(work / "in.npz", image=image)
    _run([aotc_cmd, "compile", "block.onnx", "-o", "block.engine", "--arch", "sm_80", "-q"], cwd=work, env=env)
    summary = json.loads(_run([aotc_cmd, "inspect", "block.engine", "--json"], cwd=work, env=env))
    assert summary["kernels"] and "sm_80" in json.dumps(summary)
    _run([aotc_cmd, "run", "block.engine", "--device", "cpu", "--inputs", "in.npz", "--outputs", "out.npz"],
         cwd=work, env=env)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"image": image})
    got = np.load(work / "out.npz")[model.graph.output[0].name]
    assert got.shape == want[0].shape
    assert _rel_error(got, want[0]) <= 1e-4, f"AOTC_TEST_SEED={seed}"


def test_installed_aotc_compiles_and_runs_a_stablehlo_program(installed, workdir):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    _, aotc_cmd, _, _ = installed
    work, env = workdir
    rng, seed = fresh_rng()
    x = rng.standard_normal((5, 12)).astype(np.float32)
    w = (rng.standard_normal((12, 7)) / np.sqrt(12)).astype(np.float32)

    def f(x, w):
        h = jnp.tanh(x @ w)
        return jax.nn.softmax(h, axis=-1) + jnp.sum(h * h, axis=0)

    (work / "prog.mlir").write_text(jax.jit(f).lower(x, w).as_text())
    want = np.asarray(f(x, w))
    _run([aotc_cmd, "compile", "prog.mlir", "-o", "prog.engine", "--arch", "sm_80", "-q"], cwd=work, env=env)
    summary = json.loads(_run([aotc_cmd, "inspect", "prog.engine", "--json"], cwd=work, env=env))
    names = [i["name"] for i in summary["inputs"]]
    np.savez(work / "in.npz", **dict(zip(names, (x, w))))
    _run([aotc_cmd, "run", "prog.engine", "--device", "cpu", "--inputs", "in.npz", "--outputs", "out.npz"],
         cwd=work, env=env)
    outs = np.load(work / "out.npz")
    (got,) = [outs[k] for k in outs.files]
    assert got.shape == want.shape
    assert _rel_error(got, want) <= 1e-5, f"AOTC_TEST_SEED={seed}"
