"""quantize: dot/conv of dequantized operands become integer (or fp8) dot/conv with a scale epilogue.

Q/DQ models (onnxruntime's quantize_static, NVIDIA ModelOpt) describe int8
inference as fake quantization: `conv(DQ(x), DQ(w))` in float. This pass
computes it the way the hardware does: with `x = (qx - zx) * sx` and
`w = (qw - zw) * sw`, a sum over the contracted dims k is

    sum_k x*w = sx*sw * (acc - zx*colsum(qw) - zw*rowsum(qx) + K*zx*zw),
    acc = sum_k qx*qw   (dot_general/convolution with out_dtype='i32', exact)

when the scales and zero points do not vary along k (per-tensor
activations, per-output-channel weights). The terms are per-channel
constants for a constant weight (folded into one bias) and small reductions
of the quantized activation otherwise. A convolution pads with the zero point
(`pad_value=zx`), so that padding still dequantizes to 0. 1-byte float
operands (fp8) use out_dtype='f32' and carry no zero point. What follows the
anchor (bias, residual add, activation, the next QuantizeLinear's divide,
round, clamp and convert) is left as ordinary elementwise ops: fusion puts it
in the anchor's epilogue, so DQ -> conv -> bias -> add -> relu -> Q is one
kernel that reads and writes 8-bit data.

Weight quantization is folded: a weight's q (int8 initializer, or ModelOpt's
float weight behind Q) is evaluated once into an 8-bit constant.

Guarantees: each rewritten anchor's result Value keeps its identity and
equals the float original up to f32 rounding of the scale epilogue (the
integer sum is exact). Leaves alone, with the reason `decisions` reports
(and `aotc compile --explain` prints): an anchor with an operand that is not
dequantized, scales or zero points that vary along the contracted dims,
a non-constant convolution weight or a weight zero point on a convolution,
an activation zero point that is not one integer on a convolution, mixed
integer and fp8 operands. Those run in float on the dequantized values.

Runs first in the pipeline, before constant folding turns dequantized
weights into float constants.
"""
from __future__ import annotations

import numpy as np

from aotc.hlo_passes.qdq_match import Consts, DQView, along, concrete, dq_view
from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph, Node, Value

ANCHORS = ("dot_general", "convolution")


class Refused(Exception):
    """Why an anchor stays in float (its message is the one-line reason)."""


def _math(a: DQView, b: DQView) -> str:
    for v in (a, b):
        if v.qdtype.itemsize != 1:
            raise Refused(f"operand dequantized from {v.qdtype.name} (supported: i8, u8 and float8)")
    ints = [v.qdtype in (dtypes.i8, dtypes.u8) for v in (a, b)]
    if all(ints):
        return "int8"
    if any(ints):
        raise Refused(f"mixed quantized operands {a.qdtype.name} x {b.qdtype.name} (supported: i8/u8 x i8/u8, "
                      "one fp8 type x the same)")
    if a.qdtype != b.qdtype:
        raise Refused(f"fp8 operands of different types {a.qdtype.name} x {b.qdtype.name}")
    if np.any(a.zero) or np.any(b.zero):
        raise Refused("fp8 operand with a non-zero zero point")
    return "fp8"


def _views(n: Node, consts: Consts) -> tuple[DQView, DQView]:
    if not n.outputs[0].dtype.is_float or n.outputs[0].dtype.itemsize < 2 or n.attrs.get("out_dtype"):
        raise Refused(f"result is {n.outputs[0].dtype.name} (the integer form needs a dequantized float result)")
    views = [dq_view(v, consts) for v in n.inputs[:2]]
    missing = [name for name, vw in zip(("lhs", "rhs") if n.op == "dot_general" else ("input", "weight"), views)
               if vw is None]
    if missing:
        raise Refused(f"{' and '.join(missing)} not dequantized (no DequantizeLinear feeds it)")
    return views[0], views[1]


def _reduced(view: DQView, which: str, shape, keep, contract, what: str) -> np.ndarray:
    arr = along(getattr(view, which), shape, tuple(keep))
    if arr is None:
        dims = ",".join(map(str, contract))
        raise Refused(f"{what} {'scale' if which == 'scale' else 'zero point'} varies along the contracted "
                      f"dim(s) {dims} (supported: per-tensor, or per output channel)")
    return arr


class _Emit:
    """Adds the integer anchor's epilogue to a Rewriter: constants broadcast only along the dims they vary."""

    def __init__(self, rw: Rewriter, out_shape: tuple, name: str):
        self.rw, self.shape, self.name = rw, out_shape, name

    def const(self, arr: np.ndarray, hint: str) -> Value:
        shape = concrete(self.shape)
        full = np.broadcast_to(np.asarray(arr, np.float64), shape)
        varying = tuple(d for d in range(len(shape))
                        if not np.array_equal(full, np.broadcast_to(np.take(full, [0], axis=d), shape)))
        small = full[tuple(slice(None) if d in varying else 0 for d in range(len(shape)))]
        c = self.rw.constant(np.array(small, np.float32), f"{self.name}.{hint}", dtypes.f32)
        return self.rw.add("broadcast_in_dim", c, shape=self.shape, broadcast_dimensions=varying,
                           hint=f"{self.name}.{hint}")

    def op(self, op: str, *ins, out=None, **attrs) -> Value:
        return self.rw.add(op, *ins, hint=self.name, out=out, **attrs)


def _operand(rw: Rewriter, view: DQView, hint: str) -> Value:
    if view.q is not None and (view.data is None or view.q in rw.graph.constants):
        return view.q
    return rw.constant(np.ascontiguousarray(view.data), f"{hint}.q", view.qdtype)


def _finish(e: _Emit, acc: Value, scale, bias, out: Value) -> Value:
    """out = convert(acc, f32) * scale (+ bias), written to the anchor's original result Value (narrowed to
    f16/bf16 last when the model computes in those)."""
    f = acc if acc.dtype == dtypes.f32 else e.op("convert", acc, dtype="f32")
    has_bias = bias is not None and np.any(bias)
    narrow = out.dtype != dtypes.f32
    y = e.op("mul", f, e.const(scale, "scale"), out=None if has_bias or narrow else out)
    if has_bias:
        y = e.op("add", y, e.const(bias, "bias"), out=None if narrow else out)
    return e.op("convert", y, dtype=out.dtype.name, out=out) if narrow else y


def _dot(rw: Rewriter | None, n: Node, a: DQView, b: DQView, math: str) -> None:
    attrs = n.attrs
    lb, rb, lc, rc = (tuple(attrs[k]) for k in ("lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"))
    lf, rf = ops.dot_free_dims(attrs, len(a.shape), len(b.shape))
    out = n.outputs[0]
    nb = len(lb)

    def to_out(arr: np.ndarray, side: str) -> np.ndarray:   # (batch, free) of one side -> result rank
        if side == "lhs":
            return arr.reshape(arr.shape + (1,) * len(rf))
        return arr.reshape(arr.shape[:nb] + (1,) * len(lf) + arr.shape[nb:])

    if not all(isinstance(a.shape[d], int) for d in lc):
        raise Refused("contracted dims are dynamic (the zero-point sums need their size)")
    sa = to_out(_reduced(a, "scale", a.shape, lb + tuple(lf), lc, "lhs"), "lhs")
    sb = to_out(_reduced(b, "scale", b.shape, rb + tuple(rf), rc, "rhs"), "rhs")
    za = to_out(_reduced(a, "zero", a.shape, lb + tuple(lf), lc, "lhs"), "lhs")
    zb = to_out(_reduced(b, "zero", b.shape, rb + tuple(rf), rc, "rhs"), "rhs")
    if rw is None:
        return
    e = _Emit(rw, tuple(out.shape), n.name or out.name)
    qa, qb = _operand(rw, a, f"{e.name}.lhs"), _operand(rw, b, f"{e.name}.rhs")
    acc = rw.add("dot_general", qa, qb, name=n.name, hint=f"{e.name}.acc",
                 **dict(attrs, out_dtype="i32" if math == "int8" else "f32"))
    scale = sa * sb
    k = int(np.prod([a.shape[d] for d in lc]))
    const_corr = np.zeros(())
    if np.any(za):     # - za * colsum(qb): a constant for a constant weight
        if b.data is not None:
            colsum = np.transpose(b.data.astype(np.int64), rb + tuple(rf) + rc)
            colsum = colsum.reshape(colsum.shape[:nb + len(rf)] + (-1,)).sum(-1)
            const_corr = const_corr + za * to_out(colsum.astype(np.float64), "rhs")
        else:
            acc = _minus_sum(e, acc, qb, rc, rb + tuple(rf), [nb + len(lf) + i for i in range(len(rf))], za)
    if np.any(zb):     # - zb * rowsum(qa)
        if a.data is not None:
            rowsum = np.transpose(a.data.astype(np.int64), lb + tuple(lf) + lc)
            rowsum = rowsum.reshape(rowsum.shape[:nb + len(lf)] + (-1,)).sum(-1)
            const_corr = const_corr + zb * to_out(rowsum.astype(np.float64), "lhs")
        else:
            acc = _minus_sum(e, acc, qa, lc, lb + tuple(lf), [nb + i for i in range(len(lf))], zb)
    const_corr = const_corr - k * za * zb
    _finish(e, acc, scale, -const_corr * scale, out)


def _minus_sum(e: _Emit, acc: Value, q: Value, contract, keep, free_out, zero) -> Value:
    """acc (as f32) - zero * sum of q over `contract`, broadcast into the result (an activation's sums)."""
    wide = e.op("convert", q, dtype="i32")
    s = e.op("reduce", wide, axes=tuple(sorted(contract)), kind="sum")
    rest = [d for d in range(len(q.shape)) if d not in contract]          # s's dims, in q's order
    order = [rest.index(d) for d in keep]
    if order != sorted(order):
        s = e.op("transpose", s, permutation=tuple(order))
    nb = len(keep) - len(free_out)
    dims = tuple(range(nb)) + tuple(free_out)
    sf = e.op("convert", e.op("broadcast_in_dim", s, shape=e.shape, broadcast_dimensions=dims), dtype="f32")
    f = acc if acc.dtype == dtypes.f32 else e.op("convert", acc, dtype="f32")
    return e.op("sub", f, e.op("mul", sf, e.const(zero, "zero")))


def _conv(rw: Rewriter | None, n: Node, x: DQView, w: DQView, math: str) -> None:
    attrs = n.attrs
    out = n.outputs[0]
    last = attrs.get("layout", "NCHW") == "NHWC"
    c_axis = len(out.shape) - 1 if last else 1
    if w.data is None:
        raise Refused("weight is not a constant (supported: constant quantized weights)")
    sx = along(x.scale, x.shape, ())
    zx = along(x.zero, x.shape, ())
    if sx is None or zx is None:
        raise Refused("input scale or zero point is not per-tensor (supported: one scale and zero point "
                      "for the activation)")
    sw = _reduced(w, "scale", w.shape, (0,), tuple(range(1, len(w.shape))), "weight")
    if np.any(w.zero):
        raise Refused("weight has a non-zero zero point (supported: symmetric weights)")
    zx = float(zx)
    lo, hi = (-128, 127) if x.qdtype == dtypes.i8 else (0, 255)
    if math == "int8" and not lo <= zx <= hi:
        raise Refused(f"input zero point {zx:g} is outside {x.qdtype.name}")
    if rw is None:
        return
    e = _Emit(rw, tuple(out.shape), n.name or out.name)
    shape_c = [1] * len(out.shape)
    shape_c[c_axis] = -1
    scale = (float(sx) * sw).reshape(shape_c)
    extra = {"pad_value": int(zx)} if zx and any(p for pair in attrs["padding"] for p in pair) else {}
    acc = rw.add("convolution", _operand(rw, x, f"{e.name}.x"), _operand(rw, w, f"{e.name}.w"), name=n.name,
                 hint=f"{e.name}.acc", **dict(attrs, out_dtype="i32" if math == "int8" else "f32", **extra))
    wsum = w.data.astype(np.int64).reshape(w.data.shape[0], -1).sum(1).astype(np.float64)
    bias = (-zx * wsum).reshape(shape_c) * scale
    _finish(e, acc, scale, bias, out)


def _decide(n: Node, consts: Consts) -> tuple[str, DQView, DQView]:
    a, b = _views(n, consts)
    return _math(a, b), a, b


def decisions(graph: Graph) -> dict[str, str]:
    """Per dot_general/convolution with a dequantized operand: 'int8', 'fp8', or why it stays float."""
    consts = Consts(graph)
    out = {}
    for n in graph.nodes:
        if n.op not in ANCHORS or not any(dq_view(v, consts) for v in n.inputs[:2]):
            continue
        try:
            math, a, b = _decide(n, consts)
            (_dot if n.op == "dot_general" else _conv)(None, n, a, b, math)   # checks only
            out[n.name or n.outputs[0].name] = math
        except Refused as r:
            out[n.name or n.outputs[0].name] = f"float: {r}"
    return out


def run(graph: Graph) -> Graph:
    consts = Consts(graph)
    rw = Rewriter(graph)
    for n in graph.nodes:
        if n.op in ANCHORS:
            try:
                math, a, b = _decide(n, consts)
                rewrite = _dot if n.op == "dot_general" else _conv
                rewrite(None, n, a, b, math)        # every refusal is raised here, before anything is emitted
            except Refused:
                rw.keep(n)
                continue
            rewrite(rw, n, a, b, math)
            continue
        rw.keep(n)
    return rw.finish() if rw.changed else graph
