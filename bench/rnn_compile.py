"""RNN compile report: ONNX LSTM/GRU unrolled over T steps, what that costs to compile and launch.

aotc unrolls recurrences at import time. An LSTM step is one launch: the cell runs in
the recurrent GEMM's epilogue, which also writes c_t for the next step. A GRU step is
two: its reset gate multiplies h before the second GEMM, so r * h runs in the first
GEMM's epilogue (which also writes the update gate's block) and the new h in the
second's. PyTorch exports a GRU with linear_before_reset=1, where one GEMM gives all three
gate blocks: that step is one launch. Every step reads x[t] as a
slice view (a pointer into x), so the steps share their kernels: distinct kernels stay
flat in T and so does the NVRTC time. Prints, per
model: launches per inference, distinct kernels, cold compile time (fresh kernel
cache, default targets) with its stages, and the cpu device's max relative
difference from onnxruntime.

    python -m bench.rnn_compile [--steps 50,200] [--hidden 64]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def rnn_model(op: str, steps: int, hidden: int, inputs: int = 32, batch: int = 1, seed: int = 0):
    """One ONNX LSTM or GRU layer (forward), Y and Y_h as outputs, random weights.

    op "GRUlbr" is a GRU with linear_before_reset=1, the form PyTorch's exporter writes."""
    attrs = {"linear_before_reset": 1} if op == "GRUlbr" else {}
    op = "GRU" if op == "GRUlbr" else op
    from onnx import TensorProto, helper, numpy_helper
    gates = {"LSTM": 4, "GRU": 3}[op]
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((1, gates * hidden, inputs)) * 0.1).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, gates * hidden, hidden)) * 0.1).astype(np.float32), "R")
    node = helper.make_node(op, ["x", "W", "R"], ["Y", "Y_h"], hidden_size=hidden, **attrs)
    g = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [steps, batch, inputs])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [steps, 1, batch, hidden]),
                           helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, batch, hidden])],
                          initializer=[w, r])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((steps, batch, inputs)).astype(np.float32)}


def main(argv=None) -> int:
    import onnxruntime as ort

    import aotc.compiler
    from aotc.package.engine_format import engine_bytes
    from aotc.package.runtime_binding import Engine
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="50,200")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ops", default="LSTM,GRU,GRUlbr")
    args = ap.parse_args(argv)
    print(f"{'model':<12} {'launches':>8} {'distinct':>8} {'cold s':>7}  {'rel err':>8}  stages")
    bad = 0
    for op in args.ops.split(","):
        for steps in (int(s) for s in args.steps.split(",")):
            model, feeds = rnn_model(op, steps, args.hidden)
            with tempfile.TemporaryDirectory() as cache:
                os.environ["AOTC_CACHE_DIR"] = cache
                t0 = time.perf_counter()
                res = aotc.compiler.compile_model(model)
                cold = time.perf_counter() - t0
            want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
            got = Engine(engine_bytes(res.plan)).create_context(device="cpu").run(feeds)
            err = max(float(np.abs(got[n] - w).max() / np.abs(w).max()) for n, w in zip(("Y", "Y_h"), want))
            bad += err > 1e-4
            stages = " ".join(f"{k}={v:.1f}" for k, v in res.stage_seconds.items())
            print(f"{op + 'x' + str(steps):<12} {len(res.plan.launches):>8} {len(res.plan.kernels):>8} {cold:>7.1f}  {err:>8.1e}  "
                  f"{stages}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
