"""Recognise dequantized values in an imported graph: the matcher behind the `quantize` pass.

The ONNX importer lowers DequantizeLinear to plain float math,
`(convert(q) - Z) * S`, with Z and S computed from constants (a per-tensor,
per-axis or blocked scale broadcast to q's shape). This module reads that
math back: `DQView` says that a float Value equals `(q - zero) * scale`
elementwise, where `q` is a narrow Value (i8/u8, i16/u16, or a float8) and
`zero` / `scale` are arrays broadcastable to q's shape. Any such value is a
dequantization, whichever tool wrote it; a weight quantized at compile time
(ModelOpt's float weight behind Q -> DQ) has a constant q, evaluated here once,
so the weight Q is folded into an 8-bit constant.

In a graph with dynamic dims the scale reaches the activation through a
broadcast; `Consts.broadcastable` reads the broadcast's constant source.

A dequantization with f16/bf16 scales computes in f32 and narrows the
result; the view looks through that convert (the rewrite computes in f32 and
narrows once, at the end). Index ops commute with an elementwise dequantization: transpose(DQ(w)) is
DQ(transpose(w)) with the scale transposed the same way, so views look
through transpose and reshape of a constant q (Gemm's transB, a MatMul weight
reshaped by the importer).

`Consts` evaluates any Value computed from constants alone (the scale and
zero point chains, a weight's Q) with the reference ops, memoized.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph, Node, Value

MAX_CONST_ELEMENTS = 1 << 24   # evaluate constant chains up to this size (weights), never activations


def is_quantized_dtype(dt) -> bool:
    """Types a dequantization reads: integers up to 16 bits and float8 (only the 8-bit ones run integer)."""
    return dt in (dtypes.i8, dtypes.u8, dtypes.i16, dtypes.u16) or dt.is_float8


class Consts:
    """The array of every Value computed from constants alone; None for the others."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producer: dict[Value, Node] = graph.producers()
        self.memo: dict[Value, np.ndarray | None] = dict(graph.constants)
        # one forward sweep: which values depend on constants alone (so `get` never walks up an activation)
        self.derivable = set(graph.constants)
        for n in graph.nodes:
            if all(v in self.derivable for v in n.inputs) and all(o.type.is_static for o in n.outputs):
                self.derivable.update(n.outputs)

    def get(self, v: Value) -> np.ndarray | None:
        if v in self.memo:
            return self.memo[v]
        if v not in self.derivable:
            return None
        n = self.producer.get(v)
        out = None
        if n is not None and v.type.size <= MAX_CONST_ELEMENTS:
            arrays = [self.get(x) for x in n.inputs]
            if all(a is not None for a in arrays):
                try:
                    results = ops.reference(n.op, n.attrs, *arrays)
                except Exception:      # an op failing at compile time belongs to run time: not a constant
                    results = None
                if results is not None:
                    for o, r in zip(n.outputs, results):
                        self.memo[o] = np.asarray(r).astype(o.dtype.np, copy=False)
                    return self.memo[v]
        self.memo[v] = out
        return out

    def broadcastable(self, v: Value) -> np.ndarray | None:
        """The constant array of `v`, or of what `v` broadcasts (size-1 dims where it is broadcast).

        A scale broadcast to a dynamic activation has no array of the activation's
        shape; its source does, and numpy broadcasting gives the rest.
        """
        a = self.get(v)
        if a is not None:
            return a
        n = self.producer.get(v)
        if n is None:
            return None
        if n.op == "convert":
            inner = self.broadcastable(n.inputs[0])
            return None if inner is None else inner.astype(v.dtype.np)
        if n.op == "broadcast_in_dim":
            inner = self.broadcastable(n.inputs[0])
            dims = tuple(n.attrs["broadcast_dimensions"])
            if inner is None or list(dims) != sorted(dims):
                return None
            shape = [1] * v.type.rank
            for i, d in enumerate(dims):
                if inner.shape[i] != 1 and inner.shape[i] != v.shape[d]:
                    return None          # varies along a dynamic dim: no scale does that
                shape[d] = inner.shape[i]
            return inner.reshape(shape)
        return None


def concrete(shape: tuple) -> tuple:
    """`shape` with each dynamic dim as 1 (scales and zero points never vary along one)."""
    return tuple(d if isinstance(d, int) else 1 for d in shape)


@dataclass
class DQView:
    """A float Value that equals `(q - zero) * scale` elementwise.

    `q` is the 8-bit Value in the graph, `data` its array when constant (then
    `q` may be None: an index op of a constant weight has no Value yet);
    `scale` and `zero` are float64 arrays broadcastable to the value's shape.
    """
    q: Value | None
    data: np.ndarray | None
    scale: np.ndarray
    zero: np.ndarray
    shape: tuple
    qdtype: object

    def full(self, which: str) -> np.ndarray:
        return np.broadcast_to(getattr(self, which), concrete(self.shape))


def _convert_source(v: Value, producer) -> Value | None:
    """q when `v` is convert(q) to a float from an 8-bit type."""
    n = producer.get(v)
    if n is None or n.op != "convert" or not v.dtype.is_float:
        return None
    q = n.inputs[0]
    return q if is_quantized_dtype(q.dtype) else None


def dq_view(v: Value, consts: Consts, depth: int = 0) -> DQView | None:
    """The DQView of float Value `v`, or None when `v` is not a dequantization."""
    producer = consts.producer
    n = producer.get(v)
    if n is None or depth > 8:
        return None
    if n.op == "convert" and v.dtype.is_float and n.inputs[0].dtype == dtypes.f32:
        return dq_view(n.inputs[0], consts, depth + 1)    # DQ with f16/bf16 scales: f32 math, then narrowed
    if n.op in ("transpose", "reshape"):
        inner = dq_view(n.inputs[0], consts, depth + 1)
        if inner is None or inner.data is None:
            return None
        move = lambda a: ops.reference(n.op, n.attrs, np.ascontiguousarray(a))[0]   # noqa: E731
        return DQView(None, move(inner.data), move(inner.full("scale")), move(inner.full("zero")),
                      tuple(v.shape), inner.qdtype)
    if n.op != "mul":
        return None
    for a, s in (n.inputs, n.inputs[::-1]):
        scale = consts.broadcastable(s)
        if scale is None:
            continue
        q, zero = _convert_source(a, producer), np.zeros(())
        if q is None:
            an = producer.get(a)
            if an is None or an.op != "sub":
                continue
            q, z = _convert_source(an.inputs[0], producer), consts.broadcastable(an.inputs[1])
            if q is None or z is None or not np.all(np.isfinite(z)) or not np.all(z == np.round(z)):
                continue
            zero = z.astype(np.float64)
        data = consts.get(q)
        return DQView(q, data, scale.astype(np.float64), zero, tuple(v.shape), q.dtype)
    return None


def along(arr: np.ndarray, shape: tuple, keep: tuple) -> np.ndarray | None:
    """`arr` (broadcastable to `shape`) as an array over dims `keep` (in that order).

    None when it varies along a dim outside `keep`: then it cannot factor out
    of a sum over those dims.
    """
    shape = concrete(shape)
    full = np.broadcast_to(arr, shape)
    drop = tuple(d for d in range(len(shape)) if d not in keep)
    moved = np.transpose(full, tuple(keep) + drop)
    first = moved[(Ellipsis,) + (slice(0, 1),) * len(drop)]
    if not np.array_equal(moved, np.broadcast_to(first, moved.shape)):
        return None
    return first.reshape(moved.shape[:len(keep)])
