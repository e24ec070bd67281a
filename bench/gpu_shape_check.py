"""A dynamic engine on a GPU: alternating shapes under CUDA-graph replay against plain launches.

    python -m bench.gpu_shape_check model.engine --shape batch=1,seq=7 --shape batch=8,seq=64 [--iterations 50]

For each round, every shape runs in turn on two cuda contexts, one replaying
CUDA graphs (one per shape, from the context's cache) and one launching
plainly, with fresh random inputs each time: their outputs must be equal bit
for bit (the same kernels and arguments, whatever the order of shapes). The
cpu device, where the engine has a host build, gives the max abs difference
per shape for reference. Then the median latency of `ctx.run` per shape with
graphs (host copies included). Exit status 1 if any replay differs. Runs on
the stand-in driver too (AOTC_LIBCUDA), where the timings mean nothing.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from aotc.package.dim_values import choose_dims, concrete_spec, parse_dim_values
from aotc.package.runtime_binding import Engine


def random_inputs(engine: Engine, values: dict, rng) -> dict:
    out = {}
    for spec in engine.inputs:
        shape = concrete_spec(spec, engine.dims, values).shape
        if spec.dtype in ("f32", "f16", "bf16"):
            out[spec.name] = rng.standard_normal(shape).astype(np.float32).astype(_dtype(spec.dtype))
        elif spec.dtype == "bool":
            out[spec.name] = rng.random(shape) < 0.5
        else:
            out[spec.name] = rng.integers(0, 2, shape).astype(_dtype(spec.dtype))
    return out


def _dtype(name: str):
    from aotc.package.runtime_binding import _np_dtype
    return _np_dtype(name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine")
    ap.add_argument("--shape", action="append", required=True, metavar="DIM=V,...",
                    help="one shape: dim values, e.g. batch=1,seq=7 (repeat for each shape)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    engine = Engine(args.engine)
    shapes = [choose_dims(engine.dims, parse_dim_values(s.split(","))) for s in args.shape]
    rng = np.random.default_rng(args.seed)
    graphs, plain = engine.create_context("cuda"), engine.create_context("cuda", use_cuda_graph=False)
    try:
        cpu = engine.create_context("cpu")
    except Exception as e:  # noqa: BLE001 - an engine without a host build has no cpu reference
        cpu, why = None, str(e)
    same, diffs = True, {i: 0.0 for i in range(len(shapes))}
    for _ in range(args.rounds):
        for i, values in enumerate(shapes):
            feeds = random_inputs(engine, values, rng)
            a, b = graphs.run(feeds), plain.run(feeds)
            same &= all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
            if cpu is not None:
                c = cpu.run(feeds)
                diffs[i] = max([diffs[i]] + [float(np.abs(a[k].astype(np.float64) - c[k]).max())
                                             for k in a if a[k].size])
    print(f"engine {args.engine}: {len(shapes)} shapes x {args.rounds} rounds, graphs vs plain launches: "
          f"{'identical' if same else 'DIFFERENT'}; replaying now: {graphs.uses_cuda_graph}")
    print(f"{'shape':<40} {'median ms':>10} {'max |cuda - cpu|':>18}")
    for i, values in enumerate(shapes):
        feeds = random_inputs(engine, values, rng)
        times = []
        for _ in range(args.iterations):
            t0 = time.perf_counter()
            graphs.run(feeds)
            times.append(time.perf_counter() - t0)
        label = ", ".join(f"{k}={v}" for k, v in values.items())
        ref = f"{diffs[i]:.3g}" if cpu is not None else "n/a"
        print(f"{label:<40} {statistics.median(times) * 1e3:>10.3f} {ref:>18}")
    if cpu is None:
        print(f"(no cpu reference: {why})")
    return 0 if same else 1


def _main() -> int:
    from aotc.errors import AotcError
    try:
        return main()
    except AotcError as e:
        print(f"gpu_shape_check: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main())
