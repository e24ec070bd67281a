"""Where a cold aotc compile spends its time: stages, NVRTC per target and phase, NVRTC per kernel.

compile_vs_iree.py says how aotc compares; this says why. For one model of
aotc/bench/models/real.py (or an .onnx path) it prints:

- each stage's wall seconds from one cold compile (a fresh kernel cache, the
  default targets) and the CPU seconds of the process, in all and while NVRTC
  ran (CompileResult.cpu_seconds);
- NVRTC's own phase times for the module (`--time`: front end, NVVM optimizer,
  PTX translation; ptxas is the rest of the sm_XY job);
- with --per-kernel, each distinct kernel compiled alone for `--target` (CPU
  seconds above an empty module's), the costliest first, and how many classes
  the kernels form when integer constants are ignored: what a compile would
  cost if kernels differing only in sizes were one;
- with --check-sass, whether the build used one NVVM run for all archs
  (aotc/kernels/shared_ptx.py) and, kernel by kernel, whether its SASS equals
  that of NVRTC's whole-module compile per arch (AOTC_PTXAS=none).

    python -m bench.compile_breakdown resnet50 [--per-kernel] [--check-sass] [--target sm_90]

Numbers move with the machine's load; CPU seconds move less than wall seconds.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path


def cold_compile(model):
    """The CompileResult of one compile with the default targets and a fresh kernel cache (no host library)."""
    import aotc.compiler
    old = os.environ.get("AOTC_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AOTC_CACHE_DIR"] = tmp          # aotc/kernels/cache.py reads it on every lookup
        try:
            return aotc.compiler.compile_model(model, host=False)
        finally:
            if old is None:
                os.environ.pop("AOTC_CACHE_DIR", None)
            else:
                os.environ["AOTC_CACHE_DIR"] = old


def nvrtc_phases(source: str, target: str) -> dict[str, float]:
    """NVRTC's `--time` report for one compile of `source`: phase name -> seconds."""
    from aotc.kernels.nvrtc_compile import _nvrtc_compile, _options
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "time.csv"
        _nvrtc_compile(source, target, _options(target) + [f"--time={report}"])
        rows = [line.split(",") for line in report.read_text().splitlines()[1:]]
    out: dict[str, float] = {}
    for row in rows:
        if len(row) >= 4 and row[3].strip() == "ms":
            out[row[1].strip()] = out.get(row[1].strip(), 0.0) + float(row[2]) / 1000
    return out


def kernel_classes(kernels) -> dict[str, list]:
    """Distinct kernels grouped by their source with every integer literal (and the name) blanked out."""
    classes: dict[str, list] = {}
    for k in {k.name: k for k in kernels}.values():
        classes.setdefault(re.sub(r"\b\d+\b", "N", k.source.replace(k.name, "K")), []).append(k)
    return classes


def per_kernel_cpu(kernels, target: str) -> list[tuple[float, str]]:
    """(CPU seconds above an empty module's, kernel name) for each distinct kernel compiled alone, costliest first."""
    from aotc.kernels.codegen import module_source
    from aotc.kernels.nvrtc_compile import _nvrtc_compile, _options

    def cpu(ks) -> float:
        start = time.thread_time()
        _nvrtc_compile(module_source(ks), target, _options(target))
        return time.thread_time() - start
    cpu([])                                   # NVRTC's one-time start-up is not the first kernel's cost
    empty = min(cpu([]) for _ in range(3))
    return sorted(((cpu([k]) - empty, k.name) for k in {k.name: k for k in kernels}.values()), reverse=True)


def kernel_sass(cubin: bytes) -> dict[str, list[tuple[str, str]]]:
    """Each kernel's SASS as (opcode, operands), its labels renamed in order of first use and ptxas's
    own subroutines ($__internal_N_$__cuda_sm70_shflsync_bfly_p) unnumbered: two builds name them
    differently, which is no difference in the code."""
    from aotc.profile.sass import disassemble, parse
    out = {}
    for name, k in parse(disassemble(cubin)).items():
        labels: dict[str, str] = {}
        out[name] = [(op, re.sub(r"\.L\w+", lambda m: labels.setdefault(m.group(0), f"L{len(labels)}"),
                                 re.sub(r"\$__internal_\d+_", "$__internal_", args)))
                     for _, op, args in k.instructions]
    return out


def sass_differences(result) -> dict[str, list[str]]:
    """arch -> kernels whose SASS in `result`'s engine differs from NVRTC's whole-module compile."""
    from aotc.kernels.codegen import module_source
    from aotc.kernels.nvrtc_compile import compile_device
    source = module_source(list({k.name: k for k in result.kernels}.values()))
    out = {}
    for arch, cubin in result.plan.cubins.items():
        mine, whole = kernel_sass(cubin), kernel_sass(compile_device(source, arch))
        out[arch] = sorted(n for n in set(mine) | set(whole) if mine.get(n) != whole.get(n))
    return out


def main(name: str, per_kernel: bool = False, target: str = "sm_90", check_sass: bool = False) -> None:
    from aotc.bench.models.real import REAL_MODELS
    from aotc.kernels.codegen import module_source
    model = REAL_MODELS[name]()[0] if name in REAL_MODELS else name
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{name}: cold compile, default targets, host library left out; load average {load}")
    result = cold_compile(model)
    s = result.summary()
    print("  wall s   " + ", ".join(f"{k} {v:.2f}" for k, v in s["stage_seconds"].items()))
    print("  cpu s    " + ", ".join(f"{k} {v:.2f}" for k, v in s["cpu_seconds"].items()))
    built = list({k.name: k for k in result.kernels}.values())
    source = module_source(built)
    phases = nvrtc_phases(source, target)
    print(f"  NVRTC {target} phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    classes = kernel_classes(built)
    print(f"  kernels  {len(built)} distinct, {len(classes)} classes modulo integer constants")
    if check_sass:
        print(f"  device build: {result.plan.manifest['device_build']}")
        for arch, differ in sass_differences(result).items():
            print(f"  {arch}: {len(built) - len(differ)} of {len(built)} kernels' SASS equal the whole-module "
                  f"compile's" + (f"; differ: {', '.join(differ)}" if differ else ""))
    if per_kernel:
        rows = per_kernel_cpu(built, target)
        print(f"  per kernel, {target} alone (CPU s above an empty module's), sum {sum(c for c, _ in rows):.2f}:")
        for c, n in rows:
            print(f"    {c:6.3f}  {n}")


def _cli(args) -> int:
    if not args or "-h" in args or "--help" in args:
        print(__doc__)
        return 0 if args else 2
    target = "sm_90"
    if "--target" in args:
        i = args.index("--target")
        if i + 1 >= len(args):
            print("error: --target needs sm_XY or compute_XY", file=sys.stderr)
            return 2
        target, args = args[i + 1], args[:i] + args[i + 2:]
    names = [a for a in args if not a.startswith("-")]
    if len(names) != 1:
        print("error: name one model (resnet50, mobilenetv2, ...) or an .onnx path", file=sys.stderr)
        return 2
    main(names[0], "--per-kernel" in args, target, "--check-sass" in args)
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
