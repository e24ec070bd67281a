"""Graphs and checks shared by the pass tests."""
from __future__ import annotations

import numpy as np

from aotc.ir import dtypes
from aotc.ir.graph import Graph, GraphBuilder, TensorType, Value
from aotc.ir.interpreter import interpret


def shape_chain(batch: int = 2) -> Graph:
    """An ONNX-style Shape chain next to the activation it reshapes.

    shape(i64[3]) -> gather([0]) -> concatenate with [12] -> convert i32 (output)
                                                           -> convert f32 -> add
    x (B,3,4) -> reshape (B,12) -> reduce sum (B,) -------------------------^
    """
    b = GraphBuilder("shape_chain")
    x = b.input("x", (batch, 3, 4))
    shape = b.constant(np.array([batch, 3, 4], np.int64), "shape")
    idx = b.constant(np.array([0], np.int64), "idx")
    dim0 = b.add("gather", shape, idx, axis=0)
    rest = b.constant(np.array([12], np.int64), "rest")
    target = b.add("concatenate", dim0, rest, dimension=0)
    target_i32 = b.add("convert", target, dtype="i32")
    target_f32 = b.add("convert", target, dtype="f32")
    r = b.add("reshape", x, shape=(batch, 12))
    s = b.add("reduce", r, axes=(1,), kind="sum")
    s2 = b.add("slice", s, start=(0,), limit=(2,), stride=(1,))
    z = b.add("add", s2, target_f32)
    return b.build([z, target_i32])


def scalar_constant(b: GraphBuilder, value: float, name: str = "s", dtype=dtypes.f32) -> Value:
    """A 0-d constant. GraphBuilder.constant turns scalars into shape (1,) (np.ascontiguousarray)."""
    v = Value(b.fresh(name), TensorType((), dtype))
    b.constants[v] = np.array(value, dtype.np)
    return v


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs, never zero: floats in ±[0.5, 1.5], integers in [1, 9]."""
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        if v.dtype.is_float:
            mag = rng.uniform(0.5, 1.5, v.shape) * rng.choice([-1.0, 1.0], v.shape)
            out[v.name] = mag.astype(v.dtype.np)
        elif v.dtype.np == np.bool_:
            out[v.name] = rng.integers(0, 2, v.shape).astype(bool)
        else:
            out[v.name] = rng.integers(1, 10, v.shape).astype(v.dtype.np)
    return out


def assert_same_results(before: Graph, after: Graph, seeds=(1, 2, 3)):
    for seed in seeds:
        feeds = random_inputs(before, seed)
        want, got = interpret(before, feeds), interpret(after, feeds)
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and w.shape == g.shape
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-6)


def snapshot(graph: Graph) -> tuple:
    """Everything a pass must not touch in its input graph, by identity."""
    return (list(graph.nodes), dict(graph.constants), list(graph.inputs), list(graph.outputs),
            {v: a.copy() for v, a in graph.constants.items()})


def assert_unchanged(graph: Graph, snap: tuple):
    nodes, consts, inputs, outputs, arrays = snap
    assert len(graph.nodes) == len(nodes)
    assert all(a is b for a, b in zip(graph.nodes, nodes))
    assert list(graph.constants) == list(consts)
    assert all(graph.constants[v] is consts[v] for v in consts)
    assert all(np.array_equal(graph.constants[v], arrays[v]) for v in arrays)
    assert graph.inputs == inputs and graph.outputs == outputs


def counts(graph: Graph) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in graph.nodes:
        out[n.op] = out.get(n.op, 0) + 1
    return out


def assert_same_fresh(before: Graph, after: Graph, rtol=1e-6, atol=0.0, draws=2):
    """interpret(before) == interpret(after) on fresh random inputs (seed in the message)."""
    from tests.helpers.rng import fresh_rng
    for _ in range(draws):
        rng, seed = fresh_rng()
        feeds = {}
        for v in before.inputs:
            if v.dtype.is_float:
                a = rng.uniform(0.5, 1.5, v.shape) * rng.choice([-1.0, 1.0], v.shape)
                feeds[v.name] = a.astype(v.dtype.np)
            else:
                feeds[v.name] = rng.integers(1, 10, v.shape).astype(v.dtype.np)
        want, got = interpret(before, feeds), interpret(after, feeds)
        assert len(want) == len(got)
        for i, (w, g) in enumerate(zip(want, got)):
            assert w.dtype == g.dtype and w.shape == g.shape, f"output {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"output {i}, seed {seed}")
