"""GPU kernel benchmark: aotc's GEMM, conv, attention and elementwise kernels vs torch on one GPU.

One single-op ONNX model per case, compiled by aotc for the GPU (sm_90 by
default) and timed device-resident through aotc.bench (inputs and outputs stay
on the GPU), beside torch eager (cuBLAS / cuDNN / SDPA, the same math written
in torch) and onnxruntime's CUDA provider where installed; a missing system is
a "not installed" row, never a crash. Each row shows p50/p99, the error
against the numpy interpreter, and % of aotc's H200 roofline floor.

    python -m bench.gpu_kernels [--cases gemm,conv,attention,elementwise] [--precisions fp32,tf32,fp16]
    python -m bench.gpu_kernels --device cpu --small --against onnxruntime     (smoke run, no GPU)

Needs an NVIDIA GPU (bench/gpu_bench.sh is the whole-model sibling).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aotc.bench.driver import run_bench
from aotc.bench.gpu_report import Rows, within
from aotc.bench.report import format_suite
from aotc.bench.source import Source

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "kernel", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
                          initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def gemm(m=4096, k=4096, n=4096):
    """y = x @ W + b, relu: the GEMM kernel with a fused epilogue (cuBLAS + a second kernel in torch)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
                    helper.make_node("Relu", ["u"], ["y"])], [("x", [m, k])], [("y", [m, n])],
                   [("w", w), ("b", b)])

    def torch_module():
        import torch

        class Gemm(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w, self.b = torch.nn.Parameter(torch.from_numpy(w)), torch.nn.Parameter(torch.from_numpy(b))

            def forward(self, x):
                return torch.relu(x @ self.w + self.b)
        return Gemm()
    return f"gemm {m}x{k}x{n}", model, torch_module, ["x"]


def conv(batch=32, size=56, cin=64, cout=64, k=3):
    """NCHW conv 3x3 + bias + relu (aotc: NHWC implicit GEMM with the layout change fused)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    p = k // 2
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[p] * 4),
                    helper.make_node("Relu", ["c"], ["y"])],
                   [("x", [batch, cin, size, size])], [("y", [batch, cout, size, size])], [("w", w), ("b", b)])

    def torch_module():
        import torch
        m = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, k, padding=p), torch.nn.ReLU())
        with torch.no_grad():
            m[0].weight.copy_(torch.from_numpy(w))
            m[0].bias.copy_(torch.from_numpy(b))
        return m
    return f"conv {batch}x{cin}x{size}x{size} k{k} -> {cout}", model, torch_module, ["x"]


def attention(batch=8, heads=12, seq=1024, dim=64):
    """softmax(Q K^T / sqrt(d)) V: aotc's flash-attention kernel vs torch SDPA."""
    shape = [batch, heads, seq, dim]
    scale = np.array(1 / np.sqrt(dim), np.float32)
    model = _model([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                    helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
                    helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])],
                   [("q", shape), ("k", shape), ("v", shape)], [("y", shape)], [("scale", scale)])

    def torch_module():
        import torch

        class Sdpa(torch.nn.Module):
            def forward(self, q, k, v):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return Sdpa()
    return f"attention b{batch} h{heads} s{seq} d{dim}", model, torch_module, ["q", "k", "v"]


def elementwise(n=64 * 1024 * 1024):
    """y = x * sigmoid(x) + z: one fused loop kernel, 3 x n x 4 bytes moved."""
    model = _model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["t"]),
                    helper.make_node("Add", ["t", "z"], ["y"])], [("x", [n]), ("z", [n])], [("y", [n])])

    def torch_module():
        import torch

        class Silu(torch.nn.Module):
            def forward(self, x, z):
                return x * torch.sigmoid(x) + z
        return Silu()
    return f"elementwise silu+add n={n}", model, torch_module, ["x", "z"]


CASES = {"gemm": gemm, "conv": conv, "attention": attention, "elementwise": elementwise}
SMALL = {"gemm": dict(m=70, k=48, n=50), "conv": dict(batch=2, size=9, cin=8, cout=12),   # --small: a cpu smoke run
         "attention": dict(batch=1, heads=2, seq=40, dim=16), "elementwise": dict(n=5000)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--precisions", default="fp32,tf32,fp16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--against", default="torch,onnxruntime")
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--max-seconds", type=float, default=3.0)
    ap.add_argument("--small", action="store_true", help="tiny shapes (a smoke run of the script on the cpu device)")
    ap.add_argument("--json", default=None, help="write the rows here (bench/gpu_all.sh merges them)")
    args = ap.parse_args(argv)
    results = []
    rows = Rows("gpu_kernels", args.json)
    tols = {"fp16": 2e-2, "tf32": 1e-2}
    for name in args.cases.split(","):
        with rows.guard(name):
            label, model, torch_module, torch_inputs = CASES[name](**(SMALL[name] if args.small else {}))
            onnx.checker.check_model(model)
            for prec in args.precisions.split(","):
                with rows.guard(name, prec):
                    src = Source("onnx", label, model=model, torch_module=torch_module,
                                 torch_input_names=torch_inputs)
                    print(f"-- {label} {prec}", flush=True)
                    r = run_bench(src, device=args.device, against=args.against.split(","), precision=prec,
                                  iterations=args.iterations, warmup=5, input_count=2,
                                  max_seconds=args.max_seconds, arch=args.arch if args.device == "cuda" else "none")
                    results.append(r)
                    aotc = next(row for row in r["rows"] if row["system"] == "aotc")
                    # a missing error (no reference, a failed run) or a NaN never passes
                    rows.add(name, prec, within(aotc.get("max_rel_err"), tols.get(prec, 1e-3)),
                             case=label, p50_ms=aotc.get("p50_ms"), max_rel_err=aotc.get("max_rel_err"),
                             cuda_graph=aotc.get("cuda_graph"),
                             **{f"{row['system']}_p50_ms": row.get("p50_ms") for row in r["rows"]
                                if row["system"] != "aotc"})
    print(format_suite(results))
    bad = [f"{row['model']} {row['precision']}" for row in rows.rows if row["status"] != "pass"]
    if bad:
        print("aotc disagrees with the reference or failed: " + ", ".join(bad))
    rows.write()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
