"""The project's benchmark suite: the e2e models through `aotc bench`, one table.

Models: aotc/bench/models/small.py (mlp, cnn, transformer_block, resnet_bottleneck,
bert_encoder: small) and aotc/bench/models/real.py (ResNet-50, MobileNetV2,
BERT-base, GPT-2 small, ViT-B/16: full size), random weights, no downloads.
Each case (model, batch, precision) is built by its builder at that batch
(so masks and token ids stay valid) and benchmarked by aotc.bench.run_bench
against the chosen competitors; the reference is onnxruntime CPU fp32.

    python -m bench.suite                                   # cpu: small models, batch 1 and 32, fp32 and fp16
    python -m bench.suite --models resnet50 --batches 1 --iterations 3
    python -m bench.suite --device cuda --models all --against onnxruntime,tensorrt,torch

On the cpu device the engine runs the kernels' host emulation: the point
is agreement with onnxruntime, not speed. `--budget-s` skips the cases
left once the budget is spent (listed at the end), so the suite fits a
fixed slot of device time.
"""
from __future__ import annotations

import argparse
import sys
import time

from aotc.bench import onnx_source, parse_against, run_bench
from aotc.bench.report import format_suite, write_csv, write_json

SMALL = ("mlp", "cnn", "transformer_block", "resnet_bottleneck", "bert_encoder")
REAL = ("resnet50", "mobilenetv2", "bert_base", "gpt2_small", "vit_b16")


def builders() -> dict:
    from aotc.bench.models import real, small
    out = {name: getattr(small, name) for name in SMALL}
    out.update(real.REAL_MODELS)
    return out


def torch_source(name: str, batch: int):
    """(torch module factory, input names) for models with a known torch original, else None.

    Only torchvision's ResNet-50 and MobileNetV2 qualify, and only where
    torchvision is installed: the ONNX that aotc compiles is then exported
    from that very module, so torch's row times the same network.
    """
    tv = {"resnet50": "resnet50", "mobilenetv2": "mobilenet_v2"}.get(name)
    if tv is None:
        return None
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    import io

    import onnx

    def factory():
        torch.manual_seed(0)
        return getattr(torchvision.models, tv)(weights=None).eval()
    buf = io.BytesIO()
    example = torch.randn(batch, 3, 224, 224)
    torch.onnx.export(factory(), (example,), buf, input_names=["image"], output_names=["logits"],
                      opset_version=17, dynamo=False)
    model = onnx.load_from_string(buf.getvalue())
    return model, factory, ["image"], {"image": example.numpy()}


def run_suite(models, batches, precisions, device="cpu", against=("onnxruntime",), iterations=20, warmup=3,
              max_seconds=20.0, budget_s=None, arch=None, echo=print) -> tuple[list[dict], list[str]]:
    table = builders()
    results, skipped = [], []
    start = time.perf_counter()
    for name in models:
        for batch in batches:
            for precision in precisions:
                case = f"{name} batch {batch} {precision}"
                if budget_s is not None and time.perf_counter() - start > budget_s:
                    skipped.append(f"{case} (budget of {budget_s:.0f} s spent)")
                    continue
                echo(f"  .. {case}", file=sys.stderr)
                t0 = time.perf_counter()
                try:
                    src = None
                    if "torch" in against:
                        try:
                            got = torch_source(name, batch)
                        except Exception as e:  # noqa: BLE001 - fall back to the onnx.helper model
                            echo(f"  .. torch export of {name} failed ({e}); using the onnx.helper model",
                                 file=sys.stderr)
                            got = None
                        if got is not None:
                            model, factory, names, feeds = got
                            src = onnx_source(model, name)
                            src.torch_module, src.torch_input_names = factory, names
                    if src is None:
                        model, feeds = table[name](batch=batch)
                        src = onnx_source(model, name)
                    result = run_bench(src, device=device, against=list(against), precision=precision,
                                       iterations=iterations, warmup=warmup, max_seconds=max_seconds,
                                       base_inputs=feeds, arch=arch)
                except Exception as e:  # noqa: BLE001 - one failed case is a line, not the end of the suite
                    skipped.append(f"{case}: failed: {' '.join(str(e).split())[:200]}")
                    continue
                result["case_seconds"] = time.perf_counter() - t0
                results.append(result)
    return results, skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--models", default="small", help="comma-separated names, or small / real / all")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--against", default="onnxruntime")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=20.0, help="timing cap per system per case")
    ap.add_argument("--budget-s", type=float, default=None, help="skip the cases left after this many seconds")
    ap.add_argument("--arch", default=None, help="engine targets (default: none on cpu, sm_80,sm_90 on cuda)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    groups = {"small": SMALL, "real": REAL, "all": SMALL + REAL}
    models = [m for part in args.models.split(",") for m in groups.get(part, (part,))]
    unknown = [m for m in models if m not in builders()]
    if unknown:
        print(f"suite: unknown model(s) {unknown}; known: {', '.join(builders())}", file=sys.stderr)
        return 2
    results, skipped = run_suite(models, [int(b) for b in args.batches.split(",")], args.precisions.split(","),
                                 args.device, parse_against(args.against), args.iterations, args.warmup,
                                 args.max_seconds, args.budget_s, args.arch, echo=print)
    print(format_suite(results))
    for line in skipped:
        print(f"skipped: {line}")
    if args.json:
        write_json({"results": results, "skipped": skipped}, args.json)
    if args.csv:
        write_csv(results, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
