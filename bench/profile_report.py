"""Profile report: what `aotc profile` measures on the e2e models, per model and precision.

Compiles ResNet-50 and BERT-base (random weights, aotc/bench/models/real.py) in
fp32 and fp16 (on request GPT-2 small and ViT-B/16, pre-LN models whose LayerNorms
code generation folds into their GEMMs' weights: `gpt2_small:fp16`, `vit_b16:fp16`)
for sm_80 and sm_90 and prints per model: launches, the modelled-byte-weighted global load/store efficiency, the memory-bound launches
(aotc/profile/model.py's `bound`) under 90% efficiency, bank conflicts in
GEMM/conv/attention kernels, the launches with local memory (spills or local
arrays), the launches under 25% theoretical occupancy on sm_90, and the
predicted H200 time against the roofline floor.
--kernels prints each launch's row.

By default the models are reduced so that the serial profiling emulation runs
every block in minutes (ResNet-50 at 64x64, BERT-base and GPT-2 with 2 layers at seq 32, ViT at
64x64 with 2 layers;
the kernels are the full models' templates at smaller grids), at batch 1.
--full profiles the full sizes (ResNet-50 and ViT-B/16 at 224x224, BERT-base and GPT-2 with 12 layers
at seq 128) and --batch B any batch; both run only --sample-blocks N blocks per
launch (default 8; aotc/profile/sampling.py), scaling the counts to the grid.

    python -m bench.profile_report [--kernels] [--full] [--batch B] [--sample-blocks N] [--save DIR]
                                  [model[:precision] ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from aotc.bench.models.real import bert_base, gpt2_small, resnet50, vit_b16


def build_model(name: str, batch: int, full: bool):
    """The model and its example inputs at the report's size."""
    if name == "resnet50":
        return resnet50(batch=batch, size=224 if full else 64)
    if name == "bert_base":
        return bert_base(batch=batch, seq=128, layers=12) if full else bert_base(batch=batch, seq=32, layers=2)
    if name == "gpt2_small":
        return gpt2_small(batch=batch, seq=128, layers=12) if full else gpt2_small(batch=batch, seq=32, layers=2)
    if name == "vit_b16":
        return vit_b16(batch=batch, size=224, layers=12) if full else vit_b16(batch=batch, size=64, layers=2)
    raise SystemExit(f"profile_report: unknown model {name!r} (resnet50, bert_base, gpt2_small, vit_b16)")


HEAVY = ("dot", "conv", "attention", "depthwise")


def summary(name: str, p: dict) -> str:
    ks = p["kernels"]
    ld = sum(k["global"]["modelled_bytes"] for k in ks)

    def weighted(key: str) -> float:
        pairs = [(k["global"][key], k["global"]["modelled_bytes"]) for k in ks if k["global"][key] is not None]
        total = sum(w for _, w in pairs)
        return sum(e * w for e, w in pairs) / total if total else 1.0
    low = [k for k in ks if k.get("bound") == "memory"
           and min(e for e in (k["global"]["load_efficiency"], k["global"]["store_efficiency"], 1.0)
                   if e is not None) < 0.9]
    conflicts = sum(k["shared"]["bank_conflicts"] for k in ks if k["kind"].startswith(HEAVY))
    heavy_acc = sum(k["shared"]["accesses"] for k in ks if k["kind"].startswith(HEAVY))
    spills = sum(1 for k in ks if any(v for v in k["spill_bytes"].values()))
    low_occ = sum(1 for k in ks if k["occupancy"].get("sm_90", {}).get("occupancy", 1.0) < 0.25)
    pred, floor = p["predicted_us"]["sm_90"], p["roofline_floor_us"]["sm_90"]
    return (f"{name:<18} {len(ks):>4} launches  modelled {ld / 1e6:8.2f} MB  "
            f"load eff {100 * weighted('load_efficiency'):5.1f}%  "
            f"store eff {100 * weighted('store_efficiency'):5.1f}%  mem-bound <90%: {len(low):>3}  "
            f"GEMM/conv/attn conflicts {conflicts} of {heavy_acc} smem requests  local memory in {spills}  "
            f"occ<25% {low_occ}  predicted {pred:9.2f} us  floor {floor:9.2f} us ({pred / max(floor, 1e-9):.2f}x)")


def main(argv: list[str]) -> None:
    import aotc
    from aotc.profile.engine_profile import format_profile, profile_engine, to_json
    ap = argparse.ArgumentParser(prog="python -m bench.profile_report")
    ap.add_argument("models", nargs="*", metavar="model[:precision]")
    ap.add_argument("--kernels", action="store_true", help="print each launch's row")
    ap.add_argument("--full", action="store_true", help="full-size models (sampled)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--sample-blocks", type=int, default=None, metavar="N",
                    help="blocks per launch (default: 8 with --full or --batch > 1, else every block)")
    ap.add_argument("--save", metavar="DIR", help="also write each profile's JSON to DIR")
    args = ap.parse_args(argv)
    sample = args.sample_blocks
    if sample is None and (args.full or args.batch > 1):
        sample = 8
    wanted = args.models or [f"{m}:{p}" for m in ("resnet50", "bert_base") for p in ("fp32", "fp16")]
    size = "full size" if args.full else "reduced"
    for item in wanted:
        model_name, _, precision = item.partition(":")
        precision = precision or "fp32"
        model, _ = build_model(model_name, args.batch, args.full)
        with tempfile.TemporaryDirectory(prefix="aotc-profile-report-") as tmp:
            t0 = time.perf_counter()
            path = f"{tmp}/{model_name}.engine"
            aotc.compile(model, path, arch=["sm_80", "sm_90"], precision=precision)
            t1 = time.perf_counter()
            with open(path, "rb") as f:
                p = profile_engine(f.read(), sample_blocks=sample)
            t2 = time.perf_counter()
        if args.kernels:
            print(format_profile(p))
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            with open(os.path.join(args.save, f"{model_name}_{precision}_b{args.batch}.json"), "w") as f:
                f.write(to_json(p))
        how = f"batch {args.batch}, {size}, " + (f"{sample} blocks/launch" if sample else "every block")
        print(summary(f"{model_name}:{precision}", p) + f"  ({how}; compile {t1 - t0:.0f} s, profile {t2 - t1:.0f} s)",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
