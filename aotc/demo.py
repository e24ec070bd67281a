"""`aotc demo`: the whole path on a small built-in model, no files needed.

Builds a tiny CNN + MLP head with onnx.helper (conv, batch norm, relu, max
pool, gemm, softmax), compiles it, runs the engine on the chosen device and
compares with the reference interpreter (and onnxruntime when installed).
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np


def demo_model(seed: int = 0):
    """A small CNN classifier as an onnx.ModelProto with random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [init("conv_w", 8, 3, 3, 3), init("conv_b", 8),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_scale"),
             init("bn_bias", 8), init("bn_mean", 8),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_var"),
             init("fc_w", 10, 8 * 4 * 4), init("fc_b", 10)]
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"],
                         name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(nodes, "aotc_demo_cnn",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def run_demo(keep: str | None = None, device: str = "cpu", echo=print) -> bool:
    from aotc.compiler import compile as aotc_compile
    from aotc.ir.interpreter import interpret
    from aotc.package.runtime_binding import Engine

    model = demo_model()
    echo("aotc demo: a small CNN (Conv, BatchNormalization, Relu, MaxPool, Flatten, Gemm, Softmax)")
    with tempfile.TemporaryDirectory() as tmp:
        path = keep or os.path.join(tmp, "demo.engine")
        t0 = time.perf_counter()
        result = aotc_compile(model, path)
        s = result.summary()
        echo(f"  compiled in {time.perf_counter() - t0:.2f}s: {s['nodes_imported']} ops -> "
             f"{s['nodes_optimized']} after passes -> {s['kernels_launched']} kernels; "
             f"targets {', '.join(s['archs'])} + PTX {s['ptx']} + host; engine {os.path.getsize(path)} bytes")
        x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
        engine = Engine(path)
        ctx = engine.create_context(device=device)
        t0 = time.perf_counter()
        got = ctx.run({"image": x})["probs"]
        echo(f"  ran the engine on the {device} device in {(time.perf_counter() - t0) * 1e3:.1f} ms")
        want = interpret(result.graph_imported, {"image": x})[0]
        err = float(np.max(np.abs(got - want) / (np.abs(want) + 1e-6)))
        ok = bool(np.all(np.isfinite(got))) and err <= 1e-4
        echo(f"  vs reference interpreter: max relative error {err:.2e} {'OK' if ok else 'MISMATCH'}")
        try:
            import onnxruntime as ort
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            ref = sess.run(None, {"image": x})[0]
            err_ort = float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-6)))
            ok = ok and err_ort <= 1e-4
            echo(f"  vs onnxruntime: max relative error {err_ort:.2e} {'OK' if err_ort <= 1e-4 else 'MISMATCH'}")
        except ImportError:
            echo("  onnxruntime not installed: compared with the interpreter only")
        if keep:
            echo(f"  engine kept at {keep}")
    return ok
