"""GPU check: compile the e2e test models, run each engine on `cuda` and on `cpu`, compare.

Run on a machine with an NVIDIA GPU (see bench/gpu_check.sh). Prints one
table row per model: max relative difference cuda vs cpu, cuda vs
onnxruntime, and the median cuda latency over 20 runs, for each precision
(fp32, tf32, fp16 by default; `python -m bench.gpu_check fp32,tf32` to choose;
`--models real` for ResNet-50, MobileNetV2, BERT-base, GPT-2 small, ViT-B/16;
`--models zoo` for the exporter-style zoo: LLaMA, EfficientNet, UNet, YOLO, Whisper, T5).
Exits non-zero if any model disagrees beyond TOLERANCE (the GPU uses fast-math
intrinsics).
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import aotc.compiler
from aotc.bench.models.small import MODELS
from aotc.package.runtime_binding import Engine


def rel(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


# max relative difference allowed: (cuda vs cpu, cuda vs onnxruntime fp32). The cpu device runs
# the same source with the same roundings (tf32 operands, f16 stores), so cuda vs cpu stays tight.
TOLERANCE = {"fp32": (1e-3, 1e-3), "tf32": (1e-3, 1e-2), "fp16": (1e-2, 2e-2)}


def main(precisions, models, with_cpu: bool = True) -> int:
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    bad = 0
    print(f"{'model':<20} {'prec':<5} {'cuda-vs-cpu':>12} {'cuda-vs-ort':>12} {'cuda p50 ms':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in models.items():
            model, feeds = build()
            want = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, feeds)[0] if ort else None
            for prec in precisions:
                path = Path(tmp) / f"{name}.{prec}.engine"
                aotc.compiler.compile(model, path, precision=prec)
                engine = Engine(str(path))
                cpu = engine.create_context(device="cpu").run(feeds) if with_cpu else None
                ctx = engine.create_context(device="cuda")
                times = []
                for _ in range(20):
                    t0 = time.perf_counter()
                    gpu = ctx.run(feeds)
                    times.append(time.perf_counter() - t0)
                spec = engine.outputs[0].name
                d_cpu = rel(gpu[spec], cpu[spec]) if cpu is not None else float("nan")
                d_ort = rel(gpu[spec], want) if want is not None else float("nan")
                tol_cpu, tol_ort = TOLERANCE[prec]
                bad += (cpu is not None and d_cpu > tol_cpu) or (want is not None and d_ort > tol_ort)
                print(f"{name:<20} {prec:<5} {d_cpu:>12.2e} {d_ort:>12.2e} {statistics.median(times) * 1e3:>12.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("precisions", nargs="?", default=",".join(TOLERANCE))
    ap.add_argument("--models", choices=["small", "real", "zoo", "all"], default="small",
                    help="the e2e test models, the five full-size architectures, the exporter-style zoo "
                         "(LLaMA with norm prologues, gated MLP, RoPE attention; EfficientNet, UNet...), or all")
    ap.add_argument("--no-cpu", action="store_true",
                    help="skip the cpu-device run (full-size models take ~30 s each on the host emulation)")
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
    sys.exit(main(args.precisions.split(","), chosen, with_cpu=not args.no_cpu))
