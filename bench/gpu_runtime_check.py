"""GPU check for the serving runtime: CUDA graph replay vs plain launches, and
multi-context throughput. Needs an NVIDIA GPU (run by bench/gpu_check.sh's
sibling: `python3 -m bench.gpu_runtime_check [--models transformer_block,bert_base]`).

Per model, one context per mode, inputs and outputs bound once as host
buffers (the context stages them; the graph holds only the kernels):
  submit us   host time of aotc_context_enqueue (median): the host overhead
  latency us  enqueue + synchronize, end to end (median)
  graph       whether the run replayed a captured CUDA graph
Then N contexts on N threads, each running back to back for a fixed time:
requests/s for N = 1, 2, 4, 8 (graphs on). Every mode's outputs must match
the first plain run bit for bit (same kernels, same order), and the plain
run must match the cpu device within 1e-3 relative; the exit status is 1
otherwise.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import aotc.compiler
from aotc.bench.gpu_report import Rows, rel_error, within
from aotc.package import runtime_binding as rb
from aotc.testing.fakecuda import active as stand_in


def builders():
    from aotc.bench.models.small import MODELS
    out = dict(MODELS)
    try:
        from aotc.bench.models.real import REAL_MODELS
        out.update(REAL_MODELS)
    except ImportError:
        pass
    return out


class Bound:
    """A context with host buffers bound once, driven through the C API directly."""

    def __init__(self, engine, feeds, graphs: bool):
        self.ctx = engine.create_context("cuda", use_cuda_graph=graphs)
        self.lib = rb._load()
        self.keep = []
        for spec in engine.inputs:
            a = np.ascontiguousarray(feeds[spec.name])
            self.keep.append(a)
            rb._check(self.lib.aotc_context_bind_host_input(self.ctx._ptr, spec.name.encode(), a.ctypes.data, a.nbytes))
        self.outs = {}
        for spec in engine.outputs:
            a = np.empty(spec.shape, rb._np_dtype(spec.dtype))
            self.outs[spec.name] = a
            rb._check(self.lib.aotc_context_bind_host_output(self.ctx._ptr, spec.name.encode(), a.ctypes.data, a.nbytes))
        self.ptr = ctypes.c_void_p(self.ctx._ptr)

    def run(self):
        t0 = time.perf_counter_ns()
        st = self.lib.aotc_context_enqueue(self.ptr, None)
        t1 = time.perf_counter_ns()
        rb._check(st)
        rb._check(self.lib.aotc_context_synchronize(self.ptr))
        return t1 - t0, time.perf_counter_ns() - t0


def time_mode(engine, feeds, graphs: bool, iters: int):
    b = Bound(engine, feeds, graphs)
    for _ in range(10):                     # warm up; the second run captures the graph
        b.run()
    submit, latency = [], []
    for _ in range(iters):
        s, l = b.run()
        submit.append(s)
        latency.append(l)
    uses = b.ctx.uses_cuda_graph
    return statistics.median(submit) / 1e3, statistics.median(latency) / 1e3, uses, \
        {k: v.copy() for k, v in b.outs.items()}


def throughput(engine, feeds, n: int, seconds: float) -> float:
    bound = [Bound(engine, feeds, True) for _ in range(n)]
    for b in bound:
        b.run()
        b.run()
    counts = [0] * n
    stop = time.perf_counter() + seconds

    def work(i):
        while time.perf_counter() < stop:
            bound[i].run()
            counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def check_model(rows, name, build, tmp, args, tput):
    model, feeds = build()
    path = Path(tmp) / f"{name}.engine"
    t0 = time.perf_counter()
    # the host build for the cpu comparison of the small models (and whenever the stand-in runs cuda)
    aotc.compiler.compile(model, path, host=name in ("transformer_block", "mlp", "cnn") or stand_in())
    compile_s = time.perf_counter() - t0
    engine = rb.Engine(path)
    ok, why = rb.check_engine(path, "cuda")
    print(f"{name}: compiled in {compile_s:.1f} s; {why}; {len(engine.outputs)} outputs, "
          f"device memory for 8 contexts {engine.device_memory_size(8) / 2**20:.1f} MiB")
    ref = None
    for graphs in (False, True):
        sub, lat, uses, outs = time_mode(engine, feeds, graphs, args.iters)
        if ref is None:
            ref = outs
        same = all(np.array_equal(outs[k], ref[k]) for k in ref)
        finite = all(np.isfinite(v).all() for v in outs.values())
        rows.add(name, "fp32", same and finite and uses == graphs, mode="graph" if graphs else "plain",
                 submit_us=sub, latency_us=lat, graph=uses, identical=same, finite=finite)
        print(f"{name:<18} {'graph' if graphs else 'plain':<7} {sub:>10.1f} {lat:>11.1f} "
              f"{str(uses):>6}  {'identical' if same else 'DIFFERENT'}{'' if finite else ' NON-FINITE'}")
    if rb.check_engine(path, "cpu")[0]:
        cpu = engine.create_context("cpu").run(feeds)
        d = rel_error([ref[k] for k in cpu], [cpu[k] for k in cpu])
        rows.add(name, "fp32", within(d, 1e-3), mode="cuda-vs-cpu", rel_err=d)
        print(f"{name:<18} cuda vs cpu max rel diff {d:.2e}")
    for n in (1, 2, 4, 8):
        tput.append((name, n, throughput(engine, feeds, n, args.seconds)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="transformer_block,bert_base")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json", default=None, help="write the rows here (bench/gpu_all.sh merges them)")
    args = ap.parse_args()
    all_models = builders()
    rows = Rows("gpu_runtime_check", args.json)
    print(f"runtime {rb.runtime_version()}")
    print(f"{'model':<18} {'mode':<7} {'submit us':>10} {'latency us':>11} {'graph':>6}  check")
    tput = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            if name not in all_models:
                print(f"{name}: unknown model (have {', '.join(sorted(all_models))})")
                rows.add(name, None, False, detail="unknown model")
                continue
            with rows.guard(name):
                check_model(rows, name, all_models[name], tmp, args, tput)
    print(f"\n{'model':<18} {'contexts':>8} {'requests/s':>11}")
    for name, n, r in tput:
        print(f"{name:<18} {n:>8} {r:>11.0f}")
        rows.add(name, "fp32", True, mode=f"throughput x{n}", requests_per_s=r)
    rows.write(stand_in=stand_in())
    return 1 if rows.failed else 0


if __name__ == "__main__":
    sys.exit(main())
