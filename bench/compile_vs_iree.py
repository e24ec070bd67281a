"""Cold compile time, aotc against IREE's CUDA compile, side by side in one run.

IREE is a yardstick, not a dependency: it lives in a venv of its own.

    python3 -m venv /work/iree-venv
    /work/iree-venv/bin/pip install 'iree-base-compiler==3.13.*' onnx
    python -m bench.compile_vs_iree --iree /work/iree-venv [--repeat 3] [--default-only] [model ...]

For each model (aotc/bench/models/real.py; MobileNetV2 and ResNet-50 by default)
the builder's ONNX file is written once, then each compile runs in a fresh
process, one after the other, so all share the same (loaded) machine; a round
runs every compiler once, and --repeat rounds give each one's median:

- aotc: `aotc compile` with the default targets (sm_80 and sm_90 cubins,
  compute_90 PTX; the host library is left to the engine's first cpu run)
  and a fresh kernel cache;
- aotc +host: the same with `--host`, the host library built and embedded
  (what a default compile did before it was left to the first cpu run);
- aotc sm_80: `--arch sm_80`, the one target IREE builds here;
  (--default-only runs the default configuration alone: a third of aotc's share of the run;)
- IREE: `iree-import-onnx` (ONNX to MLIR) plus `iree-compile
  --iree-hal-target-backends=cuda --iree-cuda-target=sm_80` (MLIR to a .vmfb
  holding PTX), each stage's time shown and their sum compared.

Wall-clock seconds of the whole process, Python start-up included on both
sides (aotc's modules byte-compiled first, as `pip install` leaves them and as
IREE's importer has them: an editable checkout under PYTHONDONTWRITEBYTECODE
would otherwise recompile its ~130 modules in every process), and the CPU seconds (user + system, children included) beside them:
on a machine others share, CPU time moves less with the load than wall time.
The IREE venv comes from --iree PATH or $IREE_VENV.
"""
from __future__ import annotations

import os
import resource
import statistics
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


AOTC_CONFIGS = {"aotc": [], "aotc +host": ["--host"], "aotc sm_80": ["--arch", "sm_80"]}


def aotc_command(onnx_path, engine, config: str = "aotc") -> list[str]:
    """`aotc compile` through this interpreter, with the flags of AOTC_CONFIGS[config]."""
    cmd = [sys.executable, "-c", "from aotc.cli.main import main; main()", "compile", str(onnx_path),
           "-o", str(engine), "-q"]
    return cmd + AOTC_CONFIGS[config]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env=None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, '' or the failure's last stderr line) of one process."""
    t0, c0 = time.perf_counter(), _children_cpu()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if res.returncode != 0:
        lines = (res.stderr or res.stdout).strip().splitlines() or [f"exit {res.returncode}"]
        return seconds, cpu, lines[-1][:160]
    return seconds, cpu, ""


def aotc_times(onnx_path, work, configs=tuple(AOTC_CONFIGS)) -> tuple[dict, dict]:
    """({label: seconds, label + ' cpu': CPU seconds}, {label: error}) for each of `configs` (AOTC_CONFIGS' labels)."""
    out, errors = {}, {}
    for label in configs:
        with tempfile.TemporaryDirectory(dir=work) as cache:
            env = dict(os.environ, AOTC_CACHE_DIR=cache)
            out[label], out[label + " cpu"], err = timed(aotc_command(onnx_path, Path(cache) / "model.engine", label),
                                                         env)
        if err:
            errors[label] = err
    return out, errors


def iree_times(onnx_path, tools, work) -> tuple[dict, dict]:
    """({'iree import', 'iree compile', 'iree': their sum, 'iree cpu'}, {'iree': error}); NaN for what did not finish."""
    stages, cpu, errors = [], 0.0, {}
    for cmd in iree_commands(tools, onnx_path, work):
        seconds, used, err = timed(cmd)
        stages.append(seconds)
        cpu += used
        if err:
            errors["iree"] = err
            break
    nan = float("nan")
    out = {"iree import": stages[0], "iree compile": stages[1] if len(stages) > 1 else nan,
           "iree": sum(stages) if not errors else nan, "iree cpu": cpu if not errors else nan}
    return out, errors


def compare(onnx_path, tools, work, repeat: int = 1, configs=tuple(AOTC_CONFIGS)) -> dict:
    """Median seconds per compiler for one ONNX file over `repeat` rounds; 'errors' holds what failed."""
    rounds, errors = [], {}
    for _ in range(repeat):
        aotc, aotc_errors = aotc_times(onnx_path, work, configs)
        iree, iree_errors = iree_times(onnx_path, tools, work)
        rounds.append({**aotc, **iree})
        errors.update(aotc_errors)
        errors.update(iree_errors)
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]} | {"errors": errors, "rounds": repeat}


def format_row(name: str, r: dict) -> str:
    """One table row; a configuration left out (--default-only) shows as '-'."""
    nan = float("nan")

    def over(a):
        return r["iree"] / r[a] if r.get(a, nan) > 0 else nan
    host, sm80 = r.get("aotc +host", nan), r.get("aotc sm_80", nan)
    line = (f"{name:<13} {r['aotc']:>7.1f} {host:>10.1f} {sm80:>10.1f} {r['iree import']:>12.1f} "
            f"{r['iree compile']:>13.1f} {r['iree']:>7.1f} {over('aotc'):>11.2f} {over('aotc +host'):>11.2f} "
            f"{r['aotc cpu']:>9.1f} {r['iree cpu']:>9.1f}").replace(" nan", "   -")
    return line + "".join(f"\n    {k} failed: {v}" for k, v in r["errors"].items())


HEADER = (f"{'model':<13} {'aotc s':>7} {'aotc +host':>10} {'aotc sm_80':>10} {'iree import':>12} "
          f"{'iree compile':>13} {'iree s':>7} {'iree / aotc':>11} {'iree / +host':>11} {'aotc cpu':>9} {'iree cpu':>9}")


def byte_compile_aotc() -> None:
    """Write aotc's .pyc files, as an installed wheel has them (compileall writes them whatever
    PYTHONDONTWRITEBYTECODE says; the processes timed then only read them)."""
    import compileall

    import aotc
    import aotc.cli
    for folder in {Path(p) for pkg in (aotc, aotc.cli) for p in pkg.__path__}:
        compileall.compile_dir(str(folder), quiet=1)


def main(names=None, venv=None, repeat: int = 3, configs=tuple(AOTC_CONFIGS)) -> None:
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
    byte_compile_aotc()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"IREE: {said[0] if said else '?'}; cpus: {os.cpu_count()}, load average {load}; "
          f"wall seconds, one process each, cold caches, median of {repeat} rounds")
    print(HEADER)
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            model, _ = REAL_MODELS[name]()
            path = Path(work) / f"{name}.onnx"
            path.write_bytes(model.SerializeToString())
            row = format_row(name, compare(path, tools, work, repeat, configs))
            print(f"{row}   (load {os.getloadavg()[0]:.1f})", flush=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average at the end {load}. aotc: sm_80 + sm_90 cubins and compute_90 PTX, the host library left to "
          "the first cpu run; +host: --host (built and embedded); aotc sm_80: --arch sm_80; iree: iree-import-onnx + "
          "iree-compile --iree-hal-target-backends=cuda --iree-cuda-target=sm_80; cpu: user + system seconds")


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
    repeat = 3
    if "--repeat" in args:
        i = args.index("--repeat")
        if i + 1 >= len(args) or not args[i + 1].isdigit() or int(args[i + 1]) < 1:
            print("error: --repeat needs a positive count", file=sys.stderr)
            return 2
        repeat = int(args[i + 1])
        args = args[:i] + args[i + 2:]
    configs = ("aotc",) if "--default-only" in args else tuple(AOTC_CONFIGS)
    try:
        main([a for a in args if not a.startswith("-")], venv, repeat, configs)
    except IreeMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
