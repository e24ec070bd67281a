"""GPU check: compile the e2e test models, run each engine on `cuda` and on `cpu`, compare.

Run on a machine with an NVIDIA GPU (see bench/gpu_check.sh). Prints one
table row per model: max relative difference cuda vs cpu, cuda vs
onnxruntime, and the median cuda latency over 20 runs. Exits non-zero if any
model disagrees beyond 1e-3 relative (the GPU uses fast-math intrinsics).
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotc.compiler  # noqa: E402
from aotc.package.runtime_binding import Engine  # noqa: E402
from tests.e2e.models import MODELS  # noqa: E402


def rel(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


def main() -> int:
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    bad = 0
    print(f"{'model':<20} {'cuda-vs-cpu':>12} {'cuda-vs-ort':>12} {'cuda p50 ms':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in MODELS.items():
            model, feeds = build()
            path = Path(tmp) / f"{name}.engine"
            aotc.compiler.compile(model, path)
            engine = Engine(str(path))
            cpu = engine.create_context(device="cpu").run(feeds)
            ctx = engine.create_context(device="cuda")
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                gpu = ctx.run(feeds)
                times.append(time.perf_counter() - t0)
            spec = engine.outputs[0].name
            d_cpu = rel(gpu[spec], cpu[spec])
            d_ort = rel(gpu[spec], ort.InferenceSession(model.SerializeToString(),
                                                        providers=["CPUExecutionProvider"]).run(None, feeds)[0]) \
                if ort else float("nan")
            bad += d_cpu > 1e-3 or (ort is not None and d_ort > 1e-3)
            print(f"{name:<20} {d_cpu:>12.2e} {d_ort:>12.2e} {statistics.median(times) * 1e3:>12.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
