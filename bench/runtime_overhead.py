"""Runtime numbers on the cpu device: library size, engine load time, per-run host overhead.

    python -m bench.runtime_overhead [--runs 2000]

Prints one table (medians). "empty-ish" is an engine with one launch of a
one-thread kernel that copies 4 bytes: its run time is the runtime's own
overhead (binding lookups, argument resolution, one host-kernel call). The
run is timed three ways: the C call alone (aotc_context_run through ctypes,
minus the cost of a no-op ctypes call into the same library), the same
without the subtraction, and the full Python `ctx.run` (validation, numpy
output allocation, binding by name). Load times are for whole engine files
(read, checksum, parse); the first context on a device also dlopens the
host build, timed separately.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from aotc.bench.measure import median_us
from aotc.package import runtime_binding as rb
from aotc.package.engine_format import write_engine
from aotc.package.plan import BufferRef, EnginePlan, Launch, TensorSpec

COPY_SRC = r"""
const char *aotc_host_abi(void) { return "aotc-host-1"; }
int aotc_host_launch_copy1(const unsigned *g, const unsigned *b, unsigned smem, void **params) {
  (void)g; (void)b; (void)smem;
  **(float **)params[1] = **(const float **)params[0];
  return 0;
}
"""


def empty_engine(tmp: Path) -> Path:
    (tmp / "k.c").write_text(COPY_SRC)
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", "-o", str(tmp / "k.so"),
                    str(tmp / "k.c")], check=True)
    plan = EnginePlan(inputs=[TensorSpec("x", "f32", (1,))], outputs=[TensorSpec("y", "f32", (1,))],
                      arena_size=0, weights=b"",
                      launches=[Launch("copy1", (1, 1, 1), (1, 1, 1), 0,
                                       [BufferRef("input", 0), BufferRef("output", 0)])],
                      host_lib=(tmp / "k.so").read_bytes())
    write_engine(plan, tmp / "empty.engine")
    return tmp / "empty.engine"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    args = ap.parse_args()
    lib_path = rb.library_path()
    lib = rb._load()
    rows = [("runtime library", f"{os.path.getsize(lib_path)} bytes", os.path.basename(lib_path))]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        engines = {"empty-ish": empty_engine(tmp)}
        try:
            import aotc.compiler
            from aotc.bench.models.small import MODELS
            for name, build in MODELS.items():
                model, _ = build()
                engines[name] = tmp / f"{name}.engine"
                aotc.compiler.compile(model, engines[name], arch="none")
        except ImportError as e:       # serving-only install: no onnx
            print(f"(e2e models skipped: {e})")
        for name, path in engines.items():
            load = median_us(lambda: rb.Engine(path), 50)
            rows.append((f"load {name}", f"{load:.1f} us", f"{path.stat().st_size} B file"))
        ctx_us = median_us(lambda: rb.Engine(engines["empty-ish"]).create_context(), 30)
        rows.append(("load empty-ish + first cpu context", f"{ctx_us:.1f} us", "includes dlopen of the host build"))

        engine = rb.Engine(engines["empty-ish"])
        ctx = engine.create_context("cpu")
        x, y = np.array([1.5], np.float32), np.zeros(1, np.float32)
        rb._check(lib.aotc_context_bind_input(ctx._ptr, b"x", x.ctypes.data, 4))
        rb._check(lib.aotc_context_bind_output(ctx._ptr, b"y", y.ctypes.data, 4))
        run = lib.aotc_context_run
        ptr = ctypes.c_void_p(ctx._ptr)
        noop = lib.aotc_context_uses_cuda_graph
        for _ in range(200):
            run(ptr)
        base = median_us(lambda: noop(ptr), args.runs)
        c_run = median_us(lambda: run(ptr), args.runs)
        assert y[0] == 1.5
        py_run = median_us(lambda: ctx.run({"x": x}), max(200, args.runs // 4))
        rows += [("cpu run, C call (minus ctypes)", f"{max(c_run - base, 0.0):.2f} us", "empty-ish engine"),
                 ("cpu run, C call via ctypes", f"{c_run:.2f} us", f"ctypes no-op call {base:.2f} us"),
                 ("cpu run, Python ctx.run", f"{py_run:.2f} us", "validate + allocate + bind + run")]
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  {'median':>14}  note")
    for what, value, note in rows:
        print(f"{what:<{width}}  {value:>14}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
