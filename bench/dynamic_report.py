"""Dynamic-shape report: one engine for a range of shapes against static engines at each shape.

For a BERT-class encoder (batch x sequence), a ResNet-class CNN (batch) and a LLaMA-style
decoder with a KV cache (prefill and decode), prints per shape:
- the modelled bytes and FLOPs of the launches the dynamic engine runs at that shape
  (its shape program picks the variants; sizes evaluated at the shape) against a static
  engine compiled at exactly that shape (the same graph specialized, aotc/ir/specialize.py);
  goal: within 10%;
- the kernels each runs;
then per model the compile time and engine size of the dynamic engine against one static
engine, and the host cost of a shape change on the runtime (set every input's shape and
evaluate the shape program, alternating two shapes; median). Goal: under 50 us.

    python -m bench.dynamic_report [--quick] [--arch sm_90] [bert|resnet|llama_kv ...]

No GPU is needed: bytes and FLOPs are the kernels' models, times are host times.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


from aotc.ir import dims as D
from aotc.package import plan as P


def _models(quick: bool):
    from aotc.bench.models.small import bert_encoder, resnet_bottleneck
    from aotc.bench.models.zoo import llama_kv, with_dynamic_axes
    seq = 128 if quick else 512
    bert = with_dynamic_axes(bert_encoder(batch=3, seq=7, max_pos=seq, layers=2, d=64, heads=4, ffn=128))[0]
    cnn = with_dynamic_axes(resnet_bottleneck(batch=2, size=32), axes=("batch",))[0]
    return {
        "bert": (bert, {"batch_size": (1, 64), "sequence_length": (1, seq)},
                 [(1, 1), (1, 128), (3, 7), (17, 128), (64, seq - 1), (64, seq)]),
        "resnet": (cnn, {"batch": (1, 32)}, [(1,), (3,), (17,), (32,)]),
        "llama_kv": (llama_kv(), {"batch": (1, 8), "sequence": (1, 256), "past_sequence": (0, 512)},
                     [(1, 37, 0), (1, 1, 37), (4, 1, 300), (8, 256, 0), (8, 1, 511)]),
    }


def dynamic_cost(plan: P.EnginePlan, env: dict) -> tuple[int, int, int]:
    """(bytes, flops, launches) of what `plan` runs at dims `env`: predicates and grids evaluated."""
    regs = P.evaluate_program(plan, env)

    def val(x):
        return regs[x.index] if isinstance(x, P.Reg) else x

    nbytes = flops = n = 0
    for ln in plan.launches:
        if (ln.when is not None and not val(ln.when)) or 0 in [val(g) for g in ln.grid]:
            continue
        n += 1
        nbytes += D.evaluate(ln.bytes_expr, env) if ln.bytes_expr is not None else ln.bytes
        flops += D.evaluate(ln.flops_expr, env) if ln.flops_expr is not None else ln.flops
    return nbytes, flops, n


def _env(ranges: dict, shape: tuple) -> dict:
    return dict(zip(ranges, shape))


def shape_change_us(engine_bytes: bytes, plan: P.EnginePlan, shapes: list[dict], reps: int = 2000) -> float:
    """Median host microseconds to switch a context between shapes (set every input, evaluate)."""
    from aotc.package.runtime_binding import Engine
    eng = Engine(engine_bytes)
    ctx = eng.create_context("cpu")
    per_shape = []
    for env in shapes:
        per_shape.append({t.name: tuple(env[plan.dims[d.index].name] if isinstance(d, P.Reg) else d
                                        for d in t.shape) for t in plan.inputs})
    times = []
    for i in range(reps):
        shp = per_shape[i % len(per_shape)]
        t0 = time.perf_counter()
        for name, dims in shp.items():
            ctx.set_input_shape(name, dims)
        ctx.output_shape(plan.outputs[0].name)         # evaluates the shape program
        times.append(time.perf_counter() - t0)
    ctx.close()
    return statistics.median(times) * 1e6


def _cold_compile(model, **kw):
    """(CompileResult, seconds) with an empty kernel cache, so neither engine reuses the other's kernels."""
    import os
    import tempfile

    import aotc
    old = os.environ.get("AOTC_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="aotc-report-cache-") as tmp:
        os.environ["AOTC_CACHE_DIR"] = tmp
        try:
            t0 = time.perf_counter()
            result = aotc.compile(model, **kw)
            return result, time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("AOTC_CACHE_DIR", None)
            else:
                os.environ["AOTC_CACHE_DIR"] = old


def report(name: str, model, ranges: dict, shapes: list, arch: str) -> None:
    import aotc
    from aotc.compiler import load_graph
    from aotc.ir.specialize import specialize
    from aotc.package.engine_format import engine_bytes
    dyn, t_dyn = _cold_compile(model, arch=arch, dynamic=ranges)
    dyn_bytes = engine_bytes(dyn.plan)
    imported = load_graph(model, dynamic=ranges)
    print(f"\n{name}: dims " + ", ".join(f"{k} {lo}..{hi}" for k, (lo, hi) in ranges.items())
          + f"; arena at max {dyn.plan.arena_size / 2**20:.2f} MiB")
    print(f"  {'shape':<16} {'dyn MB':>9} {'static MB':>10} {'ratio':>6} {'dyn MFLOP':>10} {'static':>10} "
          f"{'ratio':>6} {'launches':>9}")
    ratios, static_time, static_size = [], None, None
    for shape in shapes:
        env = _env(ranges, shape)
        nb, fl, n = dynamic_cost(dyn.plan, env)
        with D.dim_ranges(imported.dims):
            fixed = specialize(imported, env)
        fixed.dims = {}
        if static_time is None:       # the first shape's static engine: compiled cold, as the dynamic one
            st, static_time = _cold_compile(fixed, arch=arch)
            static_size = len(engine_bytes(st.plan))
        else:
            st = aotc.compile(fixed, arch=arch)
        sb = sum(ln.bytes for ln in st.plan.launches)
        sf = sum(ln.flops for ln in st.plan.launches)
        rb, rf = nb / max(sb, 1), fl / max(sf, 1)
        ratios.append(rb)
        print(f"  {'x'.join(map(str, shape)):<16} {nb / 1e6:>9.3f} {sb / 1e6:>10.3f} {rb:>6.2f} {fl / 1e6:>10.2f} "
              f"{sf / 1e6:>10.2f} {rf:>6.2f} {n:>4}/{len(st.plan.launches):<4}")
    worst = max(ratios)
    print(f"  worst bytes ratio {worst:.3f} (goal <= 1.10: {'met' if worst <= 1.10 else 'NOT met'})")
    print(f"  compile (cold cache): dynamic {t_dyn:.1f} s vs one static {static_time:.1f} s; engine {len(dyn_bytes) / 2**20:.2f} MiB "
          f"vs {static_size / 2**20:.2f} MiB; kernels {len(dyn.plan.kernels)} distinct")
    try:
        us = shape_change_us(dyn_bytes, dyn.plan, [_env(ranges, shapes[0]), _env(ranges, shapes[-1])])
        print(f"  shape change (host, cpu context): median {us:.1f} us (goal < 50 us)")
    except Exception as e:  # noqa: BLE001 - a report line, not a crash
        print(f"  shape change: could not measure ({e})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=["bert", "resnet", "llama_kv"])
    ap.add_argument("--quick", action="store_true", help="shorter sequences (CI-sized)")
    ap.add_argument("--arch", default="sm_90", help="device targets (compile time includes them)")
    args = ap.parse_args(argv)
    models = _models(args.quick)
    for name in args.models:
        if name not in models:
            print(f"unknown model {name!r}; choose from {sorted(models)}", file=sys.stderr)
            return 2
        report(name, *models[name], arch=args.arch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
