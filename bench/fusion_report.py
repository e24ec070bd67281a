"""Fusion report: what aotc makes of the real e2e architectures (no GPU needed).

For ResNet-50, MobileNetV2, BERT-base, GPT-2 small and ViT-B/16 (random
weights, aotc/bench/models/real.py) prints: ONNX nodes, kernels launched per
inference, distinct kernels, modelled bytes moved vs the minimum (weights +
inputs + outputs, each touched once), compile time per stage with the default
targets, cold (fresh kernel cache) and warm (median of 3), how many GEMM/conv launches fill
less than half the H200's SMs, and the split-K launches with their partials.

    python -m bench.fusion_report [model ...]
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

from aotc.bench.models.real import REAL_MODELS


def minimum_bytes(plan) -> int:
    return len(plan.weights) + sum(t.nbytes for t in plan.inputs) + sum(t.nbytes for t in plan.outputs)


H200_SMS = 132


def underfilled(plan) -> tuple[int, int]:
    """(GEMM/conv launches with fewer blocks than half the H200's SMs, all GEMM/conv launches).

    Such a launch leaves most of the chip idle (batch-1 CNN tails, seq-128 transformer
    projections); split-K (aotc/kernels/split_k.py) exists to fill it.
    """
    heavy = [l for l in plan.launches if l.kernel.startswith(("aotc_dot", "aotc_conv", "aotc_depthwise"))]
    few = [l for l in heavy if 2 * l.grid[0] * l.grid[1] * l.grid[2] < H200_SMS]
    return len(few), len(heavy)


def main(names) -> None:
    import aotc.compiler
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["AOTC_CACHE_DIR"] = cache          # cold compile first, then warm
        for name in names:
            model, _ = REAL_MODELS[name]()
            t0 = time.perf_counter()
            cold = aotc.compiler.compile_model(model)
            t_cold = time.perf_counter() - t0
            warm = []
            for _ in range(3):                 # this machine is shared: the median of three
                t0 = time.perf_counter()
                aotc.compiler.compile_model(model)
                warm.append(time.perf_counter() - t0)
            t_warm = sorted(warm)[1]
            plan = cold.plan
            moved = sum(l.bytes for l in plan.launches)
            few, heavy = underfilled(plan)
            split = [k for k in cold.kernels if k.splits > 1]
            partials = sum(k.workspace for k in split) / 2**20
            rows.append((name, len(model.graph.node), len(plan.launches), len(plan.kernels),
                         moved / 2**20, minimum_bytes(plan) / 2**20, moved / minimum_bytes(plan), t_cold, t_warm,
                         f"{few}/{heavy}", f"{len(split)}/{partials:.1f}", cold.stage_seconds))
    print(f"{'model':<13} {'onnx':>5} {'kernels':>7} {'distinct':>8} {'moved MiB':>10} {'min MiB':>8} "
          f"{'ratio':>6} {'cold s':>7} {'warm s':>7} {'<1/2 wave':>9} {'split/MiB':>9}  stages (cold)")
    for name, nodes, launches, distinct, moved, least, ratio, tc, tw, waves, split, stages in rows:
        st = " ".join(f"{k}={v:.1f}" for k, v in stages.items())
        print(f"{name:<13} {nodes:>5} {launches:>7} {distinct:>8} {moved:>10.1f} {least:>8.1f} {ratio:>6.2f} "
              f"{tc:>7.1f} {tw:>7.1f} {waves:>9} {split:>9}  {st}")
    print(f"<1/2 wave: GEMM/conv launches with fewer thread blocks than half the H200's {H200_SMS} SMs / all;"
          " split/MiB: split-K launches / their f32 partials (L2-resident, not in 'moved')")


if __name__ == "__main__":
    main(sys.argv[1:] or list(REAL_MODELS))
