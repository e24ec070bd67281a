"""Fusion report: what aotc makes of the real e2e architectures (no GPU needed).

For ResNet-50, MobileNetV2, BERT-base, GPT-2 small and ViT-B/16 (random
weights, aotc/bench/models/real.py) prints: ONNX nodes, kernels launched per
inference, distinct kernels, modelled bytes moved vs the minimum (weights +
inputs + outputs, each touched once), compile time per stage with the default
targets, cold (fresh kernel cache) and warm (median of 3), how many GEMM/conv launches keep
less than half the H200's SM partitions busy, and the split-K launches with their partials.

    python -m bench.fusion_report [model ...]

With --exported, prints per architecture (GPT-2, BERT, ViT, LLaMA, T5, Qwen3, BLOOM,
CodeGen, Gemma2, Phi at their real sizes; the last five have no builder) the builder's
graph beside the graphs exporters write for the same
`transformers` config (aotc/bench/models/exported.py: TorchScript and dynamo
torch.onnx.export, ORT's transformer optimizer): kernels launched, per layer,
distinct kernels, modelled bytes moved and the cold compile time. --fast skips the
NVRTC and host builds (counts and bytes are the same; the time is passes + fusion +
codegen only); --small uses the 2-layer test configs.

    python -m bench.fusion_report --exported [--fast] [--small] [arch ...]

Both views print the bytes target (aotc/bench/byte_floor.py): modelled bytes (the
kernels' own, plus split-K partials written and read back and norm-prologue
re-reads) against the floor of the model's own fusion plan (each boundary tensor
written once and read once per consuming kernel), target <= 1.05x, beside it the
HBM ratio (the same less the excess that stays in L2: split-K partials and
norm-prologue re-reads), and each kernel above 1.1x of its compulsory traffic
with the reason, (L2) marking the L2-resident ones (--all-kernels: every one,
not the worst five). --fast works in the builder view too (no warm compiles then).
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
SPLIT = "split-K partials"           # byte_floor's name for that excess


def underfilled(plan) -> tuple[int, int]:
    """(GEMM/conv launches keeping fewer than half the H200's SM partitions busy, all GEMM/conv launches).

    A launch of B blocks of W warps keeps B x min(W, 4) of the 4 x 132 partitions busy (each has its
    own FMA pipes and tensor core; aotc/profile/model.py's sm_fill); below half it leaves most of the
    chip idle (batch-1 CNN tails, seq-128 transformer projections); the tile and split-K choice
    (aotc/kernels/split_k.py) exists to fill it.
    """
    heavy = [l for l in plan.launches if l.kernel.startswith(("aotc_dot", "aotc_conv", "aotc_depthwise"))]
    few = [l for l in heavy if 2 * _partitions(l) < 4 * H200_SMS]
    return len(few), len(heavy)


def _partitions(launch) -> int:
    warps = -(-launch.block[0] * launch.block[1] * launch.block[2] // 32)
    return launch.grid[0] * launch.grid[1] * launch.grid[2] * min(warps, 4)


def main(names, fast: bool = False, all_kernels: bool = False) -> None:
    import aotc.compiler
    from aotc.bench.byte_floor import plan_traffic
    rows, over = [], []
    opts = dict(arch="none", host=False) if fast else {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["AOTC_CACHE_DIR"] = cache          # cold compile first, then warm
        for name in names:
            model, _ = REAL_MODELS[name]()
            t0 = time.perf_counter()
            cold = aotc.compiler.compile_model(model, **opts)
            t_cold = time.perf_counter() - t0
            warm = []
            for _ in range(0 if fast else 3):         # this machine is shared: the median of three
                t0 = time.perf_counter()
                aotc.compiler.compile_model(model)
                warm.append(time.perf_counter() - t0)
            t_warm = sorted(warm)[1] if warm else float("nan")
            plan = cold.plan
            moved = sum(l.bytes for l in plan.launches)
            few, heavy = underfilled(plan)
            split = [k for k in cold.kernels if k.splits > 1]
            partials = sum(k.workspace for k in split) / 2**20
            traffic = plan_traffic(cold.kernels, cold.graph_optimized.constants)
            over.append((name, traffic))
            rows.append((name, len(model.graph.node), len(plan.launches), len(plan.kernels),
                         moved / 2**20, minimum_bytes(plan) / 2**20, moved / minimum_bytes(plan),
                         traffic, t_cold, t_warm, f"{few}/{heavy}", f"{len(split)}/{partials:.1f}",
                         cold.stage_seconds))
    print(f"{'model':<13} {'onnx':>5} {'kernels':>7} {'distinct':>8} {'moved MiB':>10} {'min MiB':>8} "
          f"{'ratio':>6} {'model MiB':>10} {'floor MiB':>10} {'x floor':>7} {'HBM x':>6} {'no split':>8} {'>1.1x':>5} "
          f"{'cold s' + (' (fast)' if fast else ''):>13} {'warm s':>7} {'<1/2 wave':>9} {'split/MiB':>9}"
          "  stages (cold)")
    for name, nodes, launches, distinct, moved, least, ratio, traffic, tc, tw, waves, split, stages in rows:
        st = " ".join(f"{k}={v:.1f}" for k, v in stages.items())
        print(f"{name:<13} {nodes:>5} {launches:>7} {distinct:>8} {moved:>10.1f} {least:>8.1f} {ratio:>6.2f} "
              f"{traffic.modelled / 2**20:>10.1f} {traffic.floor / 2**20:>10.1f} {traffic.ratio:>7.3f} "
              f"{traffic.hbm_ratio:>6.3f} {traffic.ratio_without(SPLIT):>8.3f} {len(traffic.over()):>5} {tc:>13.1f} "
              f"{tw:>7.1f} {waves:>9} {split:>9}  {st}")
    print(f"<1/2 wave: GEMM/conv launches keeping fewer than half the H200's 4 x {H200_SMS} SM partitions busy"
          " (blocks x min(warps, 4)) / all;"
          " split/MiB: split-K launches / their f32 partials (L2-resident, not in 'moved');"
          " HBM x: x floor without the excess that stays in L2 (split-K partials, norm-prologue re-reads);"
          " no split: x floor without the split-K partials")
    _print_bytes_target(over, all_kernels)


def _print_bytes_target(per_model, all_kernels: bool) -> None:
    """The kernels above their own bound, per model, with the reasons (aotc/bench/byte_floor.py)."""
    from aotc.bench.byte_floor import KERNEL_BOUND, MODEL_BOUND, format_kernels, reasons_count
    print(f"bytes target: model MiB (modelled: 'moved' + split-K partials written and read + norm-prologue "
          f"re-reads) <= {MODEL_BOUND}x floor MiB (each boundary tensor written once, read once per consuming "
          f"kernel); every kernel <= {KERNEL_BOUND}x its compulsory traffic. HBM: the modelled bytes less the "
          f"excess that stays in L2, marked (L2). Kernels above, worst first:")
    for name, traffic in per_model:
        verdict = "meets" if traffic.ratio <= MODEL_BOUND else "MISSES"
        hbm = "meets" if traffic.hbm_ratio <= MODEL_BOUND else "MISSES"
        print(f"  {name}: {traffic.ratio:.3f}x floor ({verdict} {MODEL_BOUND}x), HBM {traffic.hbm_ratio:.3f}x ({hbm}); "
              f"{len(traffic.over())}/{len(traffic.kernels)} kernels above {KERNEL_BOUND}x: {reasons_count(traffic)}")
        for line in format_kernels(traffic, limit=0 if all_kernels else 5):
            print(line)


def _builders(size: str) -> dict:
    """The builder's graph per architecture at the exported configs' shapes (None: no builder of that size)."""
    from aotc.bench.models.exported import ARCHS
    from aotc.bench.models.real import bert_base, gpt2_small, vit_b16
    from aotc.bench.models.zoo import llama

    def cfg(arch):
        return ARCHS[arch][size]

    g, gs = cfg("gpt2")
    b, bs = cfg("bert")
    v, _ = cfg("vit")
    ll, ls = cfg("llama")
    return {
        "gpt2": lambda: gpt2_small(batch=gs["batch"], seq=gs["seq"], layers=g["n_layer"], d=g["n_embd"],
                                   heads=g["n_head"], vocab=g["vocab_size"]),
        "bert": lambda: bert_base(batch=bs["batch"], seq=bs["seq"], layers=b["num_hidden_layers"],
                                  d=b["hidden_size"], heads=b["num_attention_heads"], ffn=b["intermediate_size"],
                                  vocab=b["vocab_size"]),
        "vit": lambda: vit_b16(size=v["image_size"], layers=v["num_hidden_layers"], d=v["hidden_size"],
                               heads=v["num_attention_heads"], classes=v["num_labels"])
        if v["patch_size"] == 16 else None,
        "llama": lambda: llama(batch=ls["batch"], seq=ls["seq"], vocab=ll["vocab_size"], d=ll["hidden_size"],
                               heads=ll["num_attention_heads"], kv_heads=ll["num_key_value_heads"],
                               ffn=ll["intermediate_size"], layers=ll["num_hidden_layers"]),
        "t5": lambda: None,            # the zoo builder is one T5 layer, not an encoder stack
        **{arch: (lambda: None) for arch in ("qwen3", "bloom", "codegen", "gemma2", "phi")},   # exporter forms only
    }


def _layers(config) -> int:
    return config.get("n_layer") or config.get("num_hidden_layers") or config["num_layers"]


def _measure(model, fast: bool):
    """(kernels, distinct, modelled MiB moved, cold compile seconds, byte_floor.PlanTraffic), fresh kernel cache."""
    from aotc.bench.byte_floor import plan_traffic
    import aotc.compiler
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("AOTC_CACHE_DIR")
        os.environ["AOTC_CACHE_DIR"] = cache
        try:
            t0 = time.perf_counter()
            r = aotc.compiler.compile_model(model, **(dict(arch="none", host=False) if fast else {}))
            seconds = time.perf_counter() - t0
        finally:
            if old is None:
                del os.environ["AOTC_CACHE_DIR"]
            else:
                os.environ["AOTC_CACHE_DIR"] = old
    plan = r.plan
    traffic = plan_traffic(r.kernels, r.graph_optimized.constants)
    return len(plan.launches), len(plan.kernels), sum(l.bytes for l in plan.launches) / 2**20, seconds, traffic


def main_exported(archs, fast: bool, size: str, all_kernels: bool = False) -> None:
    """Builder vs exporter forms, side by side per architecture."""
    from aotc.bench.models.exported import ARCHS, FORMS, exported
    builders = _builders(size)
    per_model = []
    print(f"{'arch':<8} {'form':<12} {'kernels':>7} {'/layer':>6} {'distinct':>8} {'moved MiB':>10} "
          f"{'model MiB':>10} {'floor MiB':>10} {'x floor':>7} {'HBM x':>6} {'no split':>8} {'>1.1x':>5} "
          f"{'cold s' + (' (fast)' if fast else ''):>13}")
    for arch in archs:
        config, _ = ARCHS[arch][size]
        layers = _layers(config)
        built = builders[arch]()
        forms = [("builder", built[0] if built else None)] + [(f, None) for f in FORMS]
        for form, model in forms:
            if form != "builder":
                model = exported(arch, form, size=size)[0]
            if model is None:
                print(f"{arch:<8} {form:<12} {'-':>7}  (no builder of this architecture and size)")
                continue
            kernels, distinct, moved, seconds, traffic = _measure(model, fast)
            per_model.append((f"{arch} {form}", traffic))
            print(f"{arch:<8} {form:<12} {kernels:>7} {kernels / layers:>6.2f} {distinct:>8} {moved:>10.1f} "
                  f"{traffic.modelled / 2**20:>10.1f} {traffic.floor / 2**20:>10.1f} {traffic.ratio:>7.3f} "
                  f"{traffic.hbm_ratio:>6.3f} {traffic.ratio_without(SPLIT):>8.3f} {len(traffic.over()):>5} "
                  f"{seconds:>13.1f}", flush=True)
    _print_bytes_target(per_model, all_kernels)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--help" in args or "-h" in args:
        print(__doc__)
    elif "--exported" in args:
        rest = [a for a in args if not a.startswith("--")]
        from aotc.bench.models.exported import ARCHS
        main_exported(rest or list(ARCHS), "--fast" in args,
                      "small" if "--small" in args else "real", "--all-kernels" in args)
    else:
        rest = [a for a in args if not a.startswith("--")]
        main(rest or list(REAL_MODELS), "--fast" in args, "--all-kernels" in args)
