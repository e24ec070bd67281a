"""GPU check: compile the e2e test models, run each engine on `cuda` and on `cpu`, compare.

Run on a machine with an NVIDIA GPU (see bench/gpu_check.sh). Prints one
table row per model: max relative difference cuda vs cpu, cuda vs
onnxruntime, and the median cuda latency over 20 runs, for each precision
(fp32, tf32, fp16 by default; `python -m bench.gpu_check fp32,tf32` to choose;
`--models real` for ResNet-50, MobileNetV2, BERT-base, GPT-2 small, ViT-B/16;
`--models zoo` for the exporter-style zoo: LLaMA, EfficientNet, UNet, YOLO, Whisper, T5).
Exits non-zero if any model disagrees beyond TOLERANCE (the GPU uses fast-math
intrinsics), has a non-finite output (a NaN never passes), or fails to build or
run; one model's failure does not stop the others. A model this onnxruntime
cannot load (a newer opset) is compared with the cpu device only.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import aotc.compiler
from aotc.bench.gpu_report import Rows, one_line, rel_error, within
from aotc.bench.models.small import MODELS
from aotc.package.runtime_binding import Engine
from aotc.testing.fakecuda import active as stand_in


# max relative difference allowed: (cuda vs cpu, cuda vs onnxruntime fp32). The cpu device runs
# the same source with the same roundings (tf32 operands, f16 stores), so cuda vs cpu stays tight.
TOLERANCE = {"fp32": (1e-3, 1e-3), "tf32": (1e-3, 1e-2), "fp16": (1e-2, 2e-2)}


def _ort_reference(ort, model, feeds):
    """onnxruntime's outputs, or (None, why) when this onnxruntime cannot run the model (e.g. a newer opset)."""
    if ort is None:
        return None, "onnxruntime not installed"
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds), None
    except Exception as e:  # noqa: BLE001 - an older onnxruntime is no verdict on aotc
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default="?")
        return None, f"onnxruntime {ort.__version__} cannot run this opset-{opset} model ({one_line(e)[:120]})"


def check_model(rows, name, build, precisions, tmp, ort, with_cpu):
    model, feeds = build()
    want, why = _ort_reference(ort, model, feeds)
    if why:
        print(f"{name}: no onnxruntime comparison: {why}", flush=True)
    for prec in precisions:
        with rows.guard(name, prec):
            path = Path(tmp) / f"{name}.{prec}.engine"
            # the host build only when the cpu device runs it (or the stand-in driver runs the cuda path on it)
            aotc.compiler.compile(model, path, precision=prec, host=with_cpu or stand_in())
            engine = Engine(str(path))
            order = [s.name for s in engine.outputs]
            cpu = engine.create_context(device="cpu").run(feeds) if with_cpu else None
            ctx = engine.create_context(device="cuda")
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                gpu = ctx.run(feeds)
                times.append(time.perf_counter() - t0)
            got = [gpu[n] for n in order]
            d_cpu = rel_error(got, [cpu[n] for n in order]) if cpu is not None else None
            d_ort = rel_error(got, want) if want is not None else None
            tol_cpu, tol_ort = TOLERANCE[prec]
            ok = (d_cpu is None or within(d_cpu, tol_cpu)) and (d_ort is None or within(d_ort, tol_ort))
            ms = statistics.median(times) * 1e3
            rows.add(name, prec, ok, cuda_vs_cpu=d_cpu, cuda_vs_ort=d_ort, cuda_p50_ms=ms, ort_note=why)
            show = lambda d: f"{d:>12.2e}" if d is not None else f"{'-':>12}"  # noqa: E731
            print(f"{name:<20} {prec:<5} {show(d_cpu)} {show(d_ort)} {ms:>12.3f}{'' if ok else '  FAIL'}",
                  flush=True)


def main(precisions, models, with_cpu: bool = True, json_path: str | None = None) -> int:
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    rows = Rows("gpu_check", json_path)
    print(f"{'model':<20} {'prec':<5} {'cuda-vs-cpu':>12} {'cuda-vs-ort':>12} {'cuda p50 ms':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in models.items():
            with rows.guard(name):  # a builder that fails is one row, not the end of the run
                check_model(rows, name, build, precisions, tmp, ort, with_cpu)
    rows.write(precisions=precisions, with_cpu=with_cpu, stand_in=stand_in())
    return 1 if rows.failed else 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("precisions", nargs="?", default=",".join(TOLERANCE))
    ap.add_argument("--models", choices=["small", "real", "zoo", "all"], default="small",
                    help="the e2e test models, the five full-size architectures, the exporter-style zoo "
                         "(LLaMA with norm prologues, gated MLP, RoPE attention; EfficientNet, UNet...), or all")
    ap.add_argument("--no-cpu", action="store_true",
                    help="skip the cpu-device run (full-size models take ~30 s each on the host emulation)")
    ap.add_argument("--only", default=None, help="comma-separated model names out of the chosen set")
    ap.add_argument("--json", default=None, help="write the rows here (bench/gpu_all.sh merges them)")
    args = ap.parse_args()
    chosen = {}
    if args.models in ("small", "all"):
        chosen.update(MODELS)
    if args.models in ("real", "all"):
        from aotc.bench.models.real import REAL_MODELS
        chosen.update(REAL_MODELS)
    if args.models in ("zoo", "all"):
        from aotc.bench.models.zoo import ZOO_MODELS

        def fixed(build):           # zoo builders return a feed maker; static shapes only
            model, make_feeds = build()
            return model, make_feeds(np.random.default_rng(0))
        chosen.update({n: (lambda b=b: fixed(b)) for n, b in ZOO_MODELS.items() if "dynamic" not in n})
    if args.only:
        wanted = args.only.split(",")
        unknown = [n for n in wanted if n not in chosen]
        if unknown:
            sys.exit(f"unknown model(s) {unknown}; have {sorted(chosen)}")
        chosen = {n: chosen[n] for n in wanted}
    sys.exit(main(args.precisions.split(","), chosen, with_cpu=not args.no_cpu, json_path=args.json))
