"""Split-K A/B: each model compiled with and without split-K, timed side by side on one GPU.

At batch 1 most GEMM/conv launches of ResNet-50, BERT-base and ViT-B/16 have
fewer 64x64 tiles than half the H200's SMs; aotc splits their K loop
(aotc/kernels/split_k.py). This script measures what that buys: both engines
of a model are timed alternately (A B A B ..., device-resident inputs and
outputs), so machine noise hits both, and the table shows the medians, their
ratio and the two engines' max relative difference (the split adds partial
sums in a different order).

    python -m bench.gpu_split_k [--models resnet50,bert_base,vit_b16] [--precisions fp32,fp16]
    python -m bench.gpu_split_k --device cpu --small      (smoke run, no GPU)
"""
from __future__ import annotations

import argparse
import statistics
import sys
from types import SimpleNamespace

import numpy as np

from aotc.bench.gpu_report import Rows, rel_error, within
from aotc.bench.measure import time_runs
from aotc.bench.systems import AotcSystem
from aotc.testing.fakecuda import active as stand_in


def _engine(model, precision: str, split: bool, device: str):
    from aotc.compiler import compile_model
    from aotc.package.engine_format import engine_bytes
    res = compile_model(model, precision=precision, split_k=split, arch="none" if device == "cpu" else None,
                        host=device == "cpu" or stand_in())
    splits = sum(1 for k in res.kernels if k.splits > 1)
    return engine_bytes(res.plan), splits


def _system(blob: bytes, device: str, names):
    s = AotcSystem(SimpleNamespace(engine_bytes=blob, model=None, input_shapes=None), device, names)
    s.build()
    return s


def _matmul(seed=0, m=4, k=1024, n=64):
    """A batch-1-shaped projection: one 64x64 tile of output, K = 1024 (8-way split)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          "matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], initializer=[w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((m, k)).astype(np.float32)}


def _models(names, small: bool):
    if small:
        return {"matmul": _matmul}
    from aotc.bench.models.real import REAL_MODELS
    return {n: REAL_MODELS[n] for n in names}


def compare(rows, name, model, feeds, prec, args):
    """Both engines of one model and precision: their difference and alternating timings."""
    names = [o.name for o in model.graph.output]
    (blob_a, _), (blob_b, splits) = (_engine(model, prec, s, args.device) for s in (False, True))
    a, b = _system(blob_a, args.device, names), _system(blob_b, args.device, names)
    try:
        diff = rel_error(b.run(feeds), a.run(feeds))
        prep_a, prep_b = a.prepare(feeds), b.prepare(feeds)
        ta, tb = [], []
        for _ in range(args.rounds):
            ta.append(time_runs(a.launch, [prep_a], args.iterations, 3, a.sync, stage=a.stage).p50)
            tb.append(time_runs(b.launch, [prep_b], args.iterations, 3, b.sync, stage=b.stage).p50)
    finally:
        a.close()
        b.close()
    ma, mb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
    tol = 1e-3 if prec in ("fp32", "tf32") else 2e-2
    ok = within(diff, tol)
    rows.add(name, prec, ok, splits=splits, no_split_ms=ma, split_ms=mb, speedup=ma / mb, rel_diff=diff)
    print(f"{name:<12} {prec:<5} {splits:>5} {ma:>12.3f} {mb:>9.3f} {ma / mb:>7.2f}x {diff:>9.1e}"
          + ("" if ok else "  MISMATCH"), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,bert_base,vit_b16")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="tiny e2e models instead (smoke run)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating A/B timing rounds")
    ap.add_argument("--iterations", type=int, default=20, help="runs per round and engine")
    ap.add_argument("--json", default=None, help="write the rows here (bench/gpu_all.sh merges them)")
    args = ap.parse_args(argv)
    print(f"{'model':<12} {'prec':<5} {'split':>5} {'no-split ms':>12} {'split ms':>9} {'speedup':>8} "
          f"{'rel diff':>9}")
    rows = Rows("gpu_split_k", args.json)
    for name, build in _models(args.models.split(","), args.small).items():
        with rows.guard(name):
            model, feeds = build()
            for prec in args.precisions.split(","):
                with rows.guard(name, prec):
                    compare(rows, name, model, feeds, prec, args)
    print("split: launches split-K in the split engine; speedup = no-split p50 / split p50 (medians of rounds)")
    rows.write(stand_in=stand_in())
    return 1 if rows.failed else 0


if __name__ == "__main__":
    sys.exit(main())
