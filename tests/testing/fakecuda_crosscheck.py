"""Runs engines on the cuda device under the stand-in driver and on the cpu device; compares.

Run in a child process whose environment names the stand-in (AOTC_LIBCUDA):
the runtime picks its driver once per process. Reads a JSON list of
{"name", "engine", "feeds" (an .npz), "feeds2"}; prints one JSON object per
engine: whether every cuda run matched the cpu device bit for bit, with CUDA
graphs off and on (several runs, new input values between them), with
several contexts on several threads, and the stand-in's counters.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import threading

import numpy as np

from aotc.package.runtime_binding import Engine


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=False) for k in a)


def check(engine_path: str, feeds: dict, feeds2: dict, fake, light: bool = False) -> dict:
    """`light` (full-size models): one run per step and two threads, the same checks."""
    repeats, workers = (1, 2) if light else (3, 4)
    engine = Engine(engine_path)
    cpu = engine.create_context("cpu")
    want, want2 = cpu.run(feeds), cpu.run(feeds2)
    out = {"graph_launches": -fake.aotcFakeCudaCounter(b"graph_launches")}
    for graphs in (False, True):
        ctx = engine.create_context("cuda", use_cuda_graph=graphs)
        ok = [_same(ctx.run(feeds), want) for _ in range(repeats)]
        ok.append(_same(ctx.run(feeds2), want2))  # same buffers, new values: a replay must see them
        ok.append(_same(ctx.run(feeds), want))
        out["graphs" if graphs else "plain"] = all(ok)
        out["uses_graph" if graphs else "plain_uses_graph"] = ctx.uses_cuda_graph
        del ctx
    results = []

    def worker(i):
        ctx = engine.create_context("cuda", use_cuda_graph=i % 2 == 0)
        for j in range(repeats):
            f, w = (feeds, want) if (i + j) % 2 == 0 else (feeds2, want2)
            results.append(_same(ctx.run(f), w))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["threads"] = len(results) == repeats * workers and all(results)
    out["graph_launches"] += fake.aotcFakeCudaCounter(b"graph_launches")
    del engine, cpu
    gc.collect()
    out["live_allocations"] = fake.aotcFakeCudaCounter(b"live_allocations")
    return out


def main(spec_path: str) -> int:
    fake = ctypes.CDLL(os.environ["AOTC_LIBCUDA"])  # the very library the runtime loads
    fake.aotcFakeCudaCounter.restype = ctypes.c_ulonglong
    fake.aotcFakeCudaCounter.argtypes = [ctypes.c_char_p]
    with open(spec_path) as f:
        specs = json.load(f)
    for s in specs:
        feeds, feeds2 = dict(np.load(s["feeds"])), dict(np.load(s["feeds2"]))
        try:
            res = check(s["engine"], feeds, feeds2, fake, s.get("light", False))
        except Exception as e:  # noqa: BLE001 - reported per engine to the parent test
            res = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps({"name": s["name"], **res}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
