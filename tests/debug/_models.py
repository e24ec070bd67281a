"""Small ONNX models for the `aotc debug` tests, and the test-only hook that makes one kernel wrong.

Every model has named nodes, so a test can say which ONNX node a kernel must hold.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import aotc.kernels.codegen as codegen
from aotc.fusion.region import Region
from aotc.ir.graph import Node


def _model(nodes, inputs, outputs, inits, name):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _f32(name, array):
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


def mlp(seed: int = 0):
    """x(4,16) -> fc1 + bias1 -> relu1 -> fc2 + bias2 -> tanh2 -> scale3 (x0.5) -> probs (softmax): 7 nodes."""
    rng = np.random.default_rng(seed)
    inits = [_f32("W1", rng.standard_normal((16, 32)) / 4), _f32("b1", rng.standard_normal(32) * 0.1),
             _f32("W2", rng.standard_normal((32, 8)) / 6), _f32("b2", rng.standard_normal(8) * 0.1),
             _f32("half", 0.5)]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "W2"], ["o"], name="fc2"),
             helper.make_node("Add", ["o", "b2"], ["ob"], name="bias2"),
             helper.make_node("Tanh", ["ob"], ["t"], name="tanh2"),
             helper.make_node("Mul", ["t", "half"], ["s"], name="scale3"),
             helper.make_node("Softmax", ["s"], ["y"], name="probs", axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits, "mlp")


def overflow(seed: int = 1):
    """x(4,16) * 1e3 (scale_up), squared (square: ~1e6, past fp16's 65504), @ W (proj), * 1e-6 (scale_down),
    tanh (act): finite in f32, Inf in a tensor an fp16 engine stores."""
    rng = np.random.default_rng(seed)
    inits = [_f32("k_up", 1e3), _f32("W", rng.standard_normal((16, 8))), _f32("k_down", 1e-6)]
    nodes = [helper.make_node("Mul", ["x", "k_up"], ["a"], name="scale_up"),
             helper.make_node("Mul", ["a", "a"], ["sq"], name="square"),
             helper.make_node("MatMul", ["sq", "W"], ["p"], name="proj"),
             helper.make_node("Mul", ["p", "k_down"], ["q"], name="scale_down"),
             helper.make_node("Tanh", ["q"], ["y"], name="act")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits, "overflow")


def chain(blocks: int = 20, bad: int = 12, width: int = 16, seed: int = 3):
    """`blocks` x (matmul, add, relu, scale): 4 * blocks nodes; scale<bad> multiplies by 1e5, which fp16
    cannot hold (its weights and activations saturate or overflow); every other scale is x1."""
    rng = np.random.default_rng(seed)
    inits, nodes, x = [], [], "x"
    for i in range(blocks):
        inits += [_f32(f"W{i}", rng.standard_normal((width, width)) / np.sqrt(width)),
                  _f32(f"b{i}", rng.standard_normal(width) * 0.1), _f32(f"s{i}", 1e5 if i == bad else 1.0)]
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Mul", [f"r{i}", f"s{i}"], [f"y{i}"], name=f"scale{i}")]
        x = f"y{i}"
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, [8, width])], inits, "chain")


def break_kernel_of(monkeypatch, node_name: str, swap=("add", "sub")) -> None:
    """TEST-ONLY: the kernel of the region holding IR node `node_name` computes `swap[1]` where the
    node computes `swap[0]`, a wrong kernel as a code generator bug would make one. Every other
    region's kernel is generated as always."""
    original = codegen.generate

    def generate(graph, region, producer=None, split_k=True):
        target = next((n for n in region.nodes if n.name == node_name and n.op == swap[0]), None)
        if target is None:
            return original(graph, region, producer, split_k)
        wrong = Node(swap[1], target.inputs, target.outputs, dict(target.attrs), target.name)
        swapped = [wrong if n is target else n for n in region.nodes]
        bad = Region(region.kind, region.root, swapped, region.anchor,
                     [wrong if n is target else n for n in region.epilogue], list(region.inputs),
                     list(region.reasons), list(region.extra_roots), region.payload)
        producer = dict(producer if producer is not None else graph.producers())
        producer.update({v: wrong for v in wrong.outputs})
        return original(graph, bad, producer, split_k)

    monkeypatch.setattr(codegen, "generate", generate)
