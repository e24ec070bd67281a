"""Cold compile time, aotc against IREE's CUDA compile, side by side in one run.

IREE is a yardstick, not a dependency: it lives in a venv of its own.

    python3 -m venv /work/iree-venv
    /work/iree-venv/bin/pip install 'iree-base-compiler==3.13.*' onnx
    python -m bench.compile_vs_iree --iree /work/iree-venv [model ...]

For each model (aotc/bench/models/real.py; MobileNetV2 and ResNet-50 by default)
the builder's ONNX file is written once, then each compile runs in a fresh
process, one after the other, so all share the same (loaded) machine:

- aotc: `aotc compile` with the default targets (sm_80 and sm_90 cubins,
  compute_90 PTX, the host library) and a fresh kernel cache;
- aotc sm_80: `--arch sm_80 --no-host`, the one target IREE builds here;
- IREE: `iree-import-onnx` (ONNX to MLIR) plus `iree-compile
  --iree-hal-target-backends=cuda --iree-cuda-target=sm_80` (MLIR to a .vmfb
  holding PTX), each stage's time shown and their sum compared.

Wall-clock seconds of the whole process, Python start-up included on both
sides. The IREE venv comes from --iree PATH or $IREE_VENV.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_MODELS = ["mobilenetv2", "resnet50"]


class IreeMissing(Exception):
    """The IREE venv lacks a tool this comparison runs."""


def iree_tools(venv) -> dict[str, Path]:
    """The IREE command-line tools in `venv`, or IreeMissing naming what to install."""
    tools = {name: Path(venv) / "bin" / name for name in ("iree-import-onnx", "iree-compile")}
    missing = [str(p) for p in tools.values() if not os.access(p, os.X_OK)]
    if missing:
        raise IreeMissing(f"no {', '.join(missing)}: install IREE with "
                          f"`python3 -m venv {venv} && {venv}/bin/pip install 'iree-base-compiler==3.13.*' onnx`")
    return tools


def iree_commands(tools, onnx_path, work) -> list[list[str]]:
    """ONNX -> MLIR, then MLIR -> a CUDA .vmfb for sm_80."""
    mlir, vmfb = Path(work) / "model.mlir", Path(work) / "model.vmfb"
    return [[str(tools["iree-import-onnx"]), str(onnx_path), "-o", str(mlir)],
            [str(tools["iree-compile"]), str(mlir), "--iree-hal-target-backends=cuda",
             "--iree-cuda-target=sm_80", "-o", str(vmfb)]]


def aotc_command(onnx_path, engine, targets: str = "default") -> list[str]:
    """`aotc compile` through this interpreter; targets 'sm_80' adds --arch sm_80 --no-host."""
    cmd = [sys.executable, "-c", "from aotc.cli.main import main; main()", "compile", str(onnx_path),
           "-o", str(engine), "-q"]
    return cmd + (["--arch", "sm_80", "--no-host"] if targets == "sm_80" else [])


def timed(cmd, env=None) -> tuple[float, str]:
    """(wall seconds, '' or the failure's last stderr line) of one process."""
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        lines = (res.stderr or res.stdout).strip().splitlines() or [f"exit {res.returncode}"]
        return seconds, lines[-1][:160]
    return seconds, ""


def aotc_times(onnx_path, work) -> tuple[dict, dict]:
    """({label: seconds}, {label: error}) for aotc with its default targets and with IREE's (sm_80, no host)."""
    out, errors = {}, {}
    for label, targets in (("aotc", "default"), ("aotc sm_80", "sm_80")):
        with tempfile.TemporaryDirectory(dir=work) as cache:
            env = dict(os.environ, AOTC_CACHE_DIR=cache)
            out[label], err = timed(aotc_command(onnx_path, Path(cache) / "model.engine", targets), env)
        if err:
            errors[label] = err
    return out, errors


def iree_times(onnx_path, tools, work) -> tuple[dict, dict]:
    """({'iree import', 'iree compile', 'iree': their sum}, {'iree': error}); NaN for what did not finish."""
    stages, errors = [], {}
    for cmd in iree_commands(tools, onnx_path, work):
        seconds, err = timed(cmd)
        stages.append(seconds)
        if err:
            errors["iree"] = err
            break
    nan = float("nan")
    out = {"iree import": stages[0], "iree compile": stages[1] if len(stages) > 1 else nan,
           "iree": sum(stages) if not errors else nan}
    return out, errors


def compare(onnx_path, tools, work) -> dict:
    """Seconds per compiler for one ONNX file, one after the other; 'errors' holds what failed."""
    aotc, aotc_errors = aotc_times(onnx_path, work)
    iree, iree_errors = iree_times(onnx_path, tools, work)
    return {**aotc, **iree, "errors": {**aotc_errors, **iree_errors}}


def format_row(name: str, r: dict) -> str:
    def over(a):
        return r["iree"] / r[a] if r[a] > 0 else float("nan")
    line = (f"{name:<13} {r['aotc']:>7.1f} {r['aotc sm_80']:>10.1f} {r['iree import']:>12.1f} "
            f"{r['iree compile']:>13.1f} {r['iree']:>7.1f} {over('aotc'):>11.2f} {over('aotc sm_80'):>11.2f}")
    return line + "".join(f"\n    {k} failed: {v}" for k, v in r["errors"].items())


HEADER = (f"{'model':<13} {'aotc s':>7} {'aotc sm_80':>10} {'iree import':>12} {'iree compile':>13} "
          f"{'iree s':>7} {'iree / aotc':>11} {'iree / sm_80':>11}")


def main(names=None, venv=None) -> None:
    from aotc.bench.models.real import REAL_MODELS
    if not venv:
        raise IreeMissing("no IREE venv: pass --iree PATH or set IREE_VENV")
    tools = iree_tools(venv)
    names = names or DEFAULT_MODELS
    unknown = [n for n in names if n not in REAL_MODELS]
    if unknown:
        raise IreeMissing(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(REAL_MODELS)}")
    version = subprocess.run([str(tools["iree-compile"]), "--version"], capture_output=True, text=True)
    said = [l.strip() for l in (version.stdout + version.stderr).splitlines() if "version" in l.lower()]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"IREE: {said[0] if said else '?'}; cpus: {os.cpu_count()}, load average {load}; "
          "wall seconds, one process each, cold caches")
    print(HEADER)
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            model, _ = REAL_MODELS[name]()
            path = Path(work) / f"{name}.onnx"
            path.write_bytes(model.SerializeToString())
            print(format_row(name, compare(path, tools, work)), flush=True)
    print("aotc: sm_80 + sm_90 cubins, compute_90 PTX and the host library; aotc sm_80: --arch sm_80 --no-host;"
          " iree: iree-import-onnx + iree-compile --iree-hal-target-backends=cuda --iree-cuda-target=sm_80")


def _cli(args) -> int:
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    venv = os.environ.get("IREE_VENV")
    if "--iree" in args:
        i = args.index("--iree")
        if i + 1 >= len(args):
            print("error: --iree needs the IREE venv's path", file=sys.stderr)
            return 2
        venv = args[i + 1]
        args = args[:i] + args[i + 2:]
    try:
        main([a for a in args if not a.startswith("-")], venv)
    except IreeMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
