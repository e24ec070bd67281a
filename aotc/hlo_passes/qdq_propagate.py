"""qdq-propagate: move QuantizeLinear up through max pooling, reshape, transpose and concat, as TensorRT does.

Quantization `Q(x) = clamp(round(x / s) + z)` with one scale and zero point
is monotone and elementwise, so it commutes with the ops that only select or
move values:

    Q(maxpool(x)) == maxpool(Q(x))      Q(reshape(x)) == reshape(Q(x))
    Q(transpose(x)) == transpose(Q(x))  Q(concat(a, b)) == concat(Q(a), Q(b))

(a max pool pads with -inf, which Q maps to the type's minimum, the padding
of an integer max pool). Moving Q up lets it meet the conv/GEMM that
produced x, whose epilogue then writes 8-bit data, and the pooling or copy
reads and writes 8 bits instead of 32. When Q then meets a dequantization
with the same scale, zero point and type, `Q(DQ(q)) == q` and both vanish:
onnxruntime's DQ -> MaxPool -> Q with equal scales becomes a max pool on q.
For concat this holds only where each input's scale equals the output's
(otherwise that input keeps an elementwise requantize).

Guarantees: exact (the int results equal the float path's bit for bit, up
to the f32 rounding of x / s which both compute alike). Leaves alone:
per-axis quantization (the axis would have to move), a moved-through op whose
result has other users (it would be computed twice), and graph outputs.

Reads the importer's QuantizeLinear math:
`convert(min(max(round_even(x / S) [+ Z], lo), hi))` with splat S and Z.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aotc.hlo_passes.qdq_match import Consts, along, dq_view
from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import dtypes
from aotc.ir.graph import Graph, Value

MOVABLE = ("reshape", "transpose", "concatenate")


@dataclass(frozen=True)
class QSpec:
    x: Value          # the float value quantized
    scale: float
    zero: float
    dtype: object     # the 8-bit result type


def _splat(consts: Consts, v: Value):
    a = consts.broadcastable(v)
    if a is None or a.size == 0:
        return None
    first = a.reshape(-1)[0]
    return float(first) if (a == first).all() else None


def match_q(v: Value, consts: Consts) -> QSpec | None:
    """The QSpec when `v` is the importer's per-tensor QuantizeLinear to i8/u8, else None."""
    p = consts.producer
    n = p.get(v)
    if n is None or n.op != "convert" or v.dtype not in (dtypes.i8, dtypes.u8):
        return None
    chain = []
    cur = n.inputs[0]
    for op in ("min", "max"):
        m = p.get(cur)
        if m is None or m.op != op:
            return None
        bound, other = (m.inputs[1], m.inputs[0]) if _splat(consts, m.inputs[1]) is not None else \
            (m.inputs[0], m.inputs[1])
        chain.append(_splat(consts, bound))
        cur = other
    hi, lo = chain
    info = (-128, 127) if v.dtype == dtypes.i8 else (0, 255)
    if (lo, hi) != info:
        return None
    zero = 0.0
    m = p.get(cur)
    if m is not None and m.op == "add":
        zs = [_splat(consts, x) for x in m.inputs]
        k = 1 if zs[1] is not None else 0
        if zs[k] is None:
            return None
        zero, cur = zs[k], m.inputs[1 - k]
        m = p.get(cur)
    if m is None or m.op != "round_even":
        return None
    d = p.get(m.inputs[0])
    if d is None or d.op != "div":
        return None
    scale = _splat(consts, d.inputs[1])
    if scale is None or scale <= 0:
        return None
    return QSpec(d.inputs[0], scale, zero, v.dtype)


class _Propagate:
    def __init__(self, graph: Graph):
        self.rw = Rewriter(graph)
        self.consts = Consts(graph)
        self.users = graph.users()
        self.outputs = set(graph.outputs)

    def _single_use(self, v: Value) -> bool:
        return len(self.users.get(v, [])) == 1 and v not in self.outputs

    def quantized(self, y: Value, spec: QSpec, top: bool) -> Value | None:
        """An 8-bit Value equal to Q(y), moving Q above index ops and max pools; None: keep the Q as it is."""
        view = dq_view(y, self.consts)
        if view is not None and view.q is not None and view.qdtype == spec.dtype:
            s, z = along(view.scale, view.shape, ()), along(view.zero, view.shape, ())
            if s is not None and z is not None and float(s) == spec.scale and float(z) == spec.zero:
                return self.rw.get(view.q)
        n = self.consts.producer.get(y)
        movable = n is not None and self._single_use(y) and (
            n.op in MOVABLE or (n.op == "reduce_window" and n.attrs["kind"] == "max"))
        if not movable:
            return None if top else self._emit_q(y, spec)
        ins = [self.quantized(x, spec, False) for x in n.inputs]
        return self.rw.add(n.op, *ins, hint=f"{y.name}.q", **n.attrs)

    def _emit_q(self, y: Value, spec: QSpec) -> Value:
        rw, shape = self.rw, tuple(y.shape)

        def c(value):
            k = rw.constant(value, f"{y.name}.qc", dtypes.f32)
            return rw.add("broadcast_in_dim", k, shape=shape, broadcast_dimensions=(), hint=f"{y.name}.qc")
        t = rw.add("round_even", rw.add("div", y, c(np.array(spec.scale, np.float32)), hint=f"{y.name}.q"))
        if spec.zero:
            t = rw.add("add", t, c(np.array(spec.zero, np.float32)))
        lo, hi = (-128.0, 127.0) if spec.dtype == dtypes.i8 else (0.0, 255.0)
        t = rw.add("min", rw.add("max", t, c(np.array(lo, np.float32))), c(np.array(hi, np.float32)))
        return rw.add("convert", t, dtype=spec.dtype.name, hint=f"{y.name}.q")


def run(graph: Graph) -> Graph:
    prop = _Propagate(graph)
    rw = prop.rw
    for n in graph.nodes:
        spec = match_q(n.outputs[0], prop.consts) if n.op == "convert" else None
        new = prop.quantized(spec.x, spec, True) if spec is not None else None
        if new is None or not rw.can_replace(n.outputs[0], new):
            rw.keep(n)
            continue
        rw.replace(n.outputs[0], new)
    return rw.finish() if rw.changed else graph
