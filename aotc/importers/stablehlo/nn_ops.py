"""StableHLO converters for reductions, pooling, dot_general and convolution.

`reduce` and `reduce_window` carry their combiner as a region; the IR has
named kinds instead, so the body must be one binary op of the block arguments
(add/mul/max/min, and/or for bools). A non-identity init value is applied
after the reduction. The two-input reduce jax emits for argmax/argmin (a
compare/select body over values and iota indices) becomes max, an equality
mask and a min over the indices.

Convolution has general dimension numbers: operands are transposed to
NC+spatial / OI+spatial around the IR's convolution; lhs dilation (transposed
convolution) is interior padding of the input, negative padding a slice,
window reversal a reversed kernel.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import register
from aotc.importers.expr import Ex
from aotc.importers.stablehlo.ops import bcast, convert, dilate, full, pad, reverse, transpose
from aotc.ir import dims as D
from aotc.ir import dtypes

_KINDS = {"stablehlo.add": "sum", "stablehlo.multiply": "prod", "stablehlo.maximum": "max",
          "stablehlo.minimum": "min", "stablehlo.and": "min", "stablehlo.or": "max"}
_COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


def _body(op, i=0):
    return list(op.regions[i].blocks[0].operations)


def _simple_kinds(op, blk=None) -> list[str] | None:
    """Per input, the reduction kind if the body (op's region, or `blk`) is independent binary ops of its args."""
    blk = op.regions[0].blocks[0] if blk is None else blk
    args = list(blk.arguments)
    ops = list(blk.operations)
    n = len(args) // 2
    ret = ops[-1]
    if len(list(ret.operands)) != n:
        return None
    producers = {r: o for o in ops[:-1] for r in o.results}
    kinds = []
    for i, r in enumerate(ret.operands):
        o = producers.get(r)
        if o is None or o.operation.name not in _KINDS or len(ops) != n + 1:
            return None
        if {v for v in o.operands} != {args[i], args[n + i]} and list(o.operands) != [args[i], args[i]]:
            return None
        kinds.append(_KINDS[o.operation.name])
    return kinds


def _arg_kind(op) -> str | None:
    """'max' / 'min' for jax's argmax / argmin variadic reduce body, else None."""
    blk = op.regions[0].blocks[0]
    args = list(blk.arguments)
    if len(args) != 4:
        return None
    ops = _body(op)
    allowed = {"stablehlo.compare", "stablehlo.or", "stablehlo.and", "stablehlo.select", "stablehlo.return"}
    if any(o.operation.name not in allowed for o in ops):
        return None
    for o in ops:
        if o.operation.name == "stablehlo.compare" and list(o.operands) == [args[0], args[2]]:
            d = M.enum_text(o.attributes["comparison_direction"])
            return {"GT": "max", "GE": "max", "LT": "min", "LE": "min"}.get(d)
    return None


def _reduce_check(op):
    n = len(op.operands) // 2
    kinds = _simple_kinds(op)
    if kinds is None:
        if n == 2 and _arg_kind(op):
            return None
        names = [o.operation.name for o in _body(op)]
        return f"reduce body {names} is not a supported combiner (add, multiply, maximum, minimum, and, or, argmax/argmin)"
    for v, k in zip(op.operands[:n], kinds):
        _, dt = M.tensor_type(v.type, "operand")
        if dt == dtypes.boolean and k not in ("max", "min"):
            return f"reduce of bool with {k}"
    return None


def identity(kind: str, dt) -> float | int | bool:
    if dt == dtypes.boolean:
        return kind == "min"
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if dt.is_float:
        return float("-inf") if kind == "max" else float("inf")
    info = np.iinfo(dt.np)
    return int(info.min if kind == "max" else info.max)


def reduce_one(cx, x, init, axes, kind):
    """reduce(x) over axes combined with the init value (skipped when it is the identity)."""
    dt = x.dtype
    if dt == dtypes.boolean:   # the IR does not reduce bools: and/or are min/max over i32
        r = reduce_one(cx, convert(cx, x, dtypes.i32), convert(cx, init, dtypes.i32), axes, kind)
        return convert(cx, r, dtypes.boolean)
    r = cx.add("reduce", x, axes=tuple(sorted(axes)), kind=kind) if axes else x
    s = cx.static(init)
    if s is not None and np.all(s.astype(np.float64) == float(identity(kind, dt))):
        return r
    return cx.add(_COMBINE[kind], r, bcast(cx, init, r.shape, ()))


@register("stablehlo.reduce", check=_reduce_check)
def _reduce(cx, ins):
    n = len(ins) // 2
    axes = M.ints(cx.op, "dimensions")
    kinds = _simple_kinds(cx.op)
    if kinds is not None:
        return [reduce_one(cx, x, init, axes, k) for x, init, k in zip(ins[:n], ins[n:], kinds)]
    kind = _arg_kind(cx.op)
    x, idx = ins[0], ins[1]
    m = cx.add("reduce", x, axes=tuple(sorted(axes)), kind=kind)
    keep = tuple(d for d in range(x.type.rank) if d not in axes)
    hit = cx.add("compare", x, bcast(cx, m, x.shape, keep), direction="EQ")
    big = bcast(cx, cx.scalar(identity("min", idx.dtype), idx.dtype), idx.shape, ())
    pos = cx.add("reduce", cx.add("select", hit, idx, big), axes=tuple(sorted(axes)), kind="min")
    return [m, pos]


# ----------------------------------------------------------------- reduce_window

def _window_check(op):
    if len(op.operands) != 2:
        return "reduce_window with several inputs"
    kinds = _simple_kinds(op)
    if kinds is None or kinds[0] not in ("sum", "max", "min", "prod"):
        return f"reduce_window body {[o.operation.name for o in _body(op)]} (supported: add, maximum, minimum, multiply)"
    if any(d != 1 for d in M.ints(op, "base_dilations", ())):
        return "reduce_window with base dilations"
    _, dt = M.tensor_type(op.operands[0].type, "operand")
    if kinds[0] in ("min", "prod") and not dt.is_float:
        return f"integer {'min pooling' if kinds[0] == 'min' else 'window product'}"
    return None


@register("stablehlo.reduce_window", check=_window_check)
def _reduce_window(cx, ins):
    x, init = ins
    r = x.type.rank
    pads = M.int_matrix(cx.op, "padding")
    pads = [(0, 0)] * r if pads is None else [(int(a), int(b)) for a, b in pads]
    return window_reduce(cx, x, init, _simple_kinds(cx.op)[0], M.ints(cx.op, "window_dimensions"),
                         M.ints(cx.op, "window_strides", (1,) * r), pads, M.ints(cx.op, "window_dilations", (1,) * r))


def window_reduce(cx, x, init, kind: str, win, strides, pads, dilations):
    """reduce_window of one input; window sizes and paddings may be dims (jax's cumsum over a dynamic axis)."""
    def negative(p):
        return D.is_static(p) and p < 0

    if any(negative(a) or negative(b) for a, b in pads):   # negative padding crops the input first
        x = pad(cx, x, init, [a if negative(a) else 0 for a, _ in pads], [b if negative(b) else 0 for _, b in pads])
        pads = [(0 if negative(a) else a, 0 if negative(b) else b) for a, b in pads]
    attrs = dict(window=tuple(win), strides=tuple(strides), padding=tuple(tuple(p) for p in pads),
                 dilations=tuple(dilations))
    if kind == "min":
        y = cx.add("neg", cx.add("reduce_window", cx.add("neg", x), kind="max", **attrs))
    elif kind == "prod":
        y = _window_product(cx, x, attrs)
    else:
        y = cx.add("reduce_window", x, kind=kind, **attrs)
    s = cx.static(init)
    if s is not None and float(s) == float(identity(kind, x.dtype)):
        return y
    if kind in ("sum", "prod") and any(not (D.is_static(a) and D.is_static(b) and a == b == 0) for a, b in pads):
        raise cx.fail(f"window {kind} with padding and an init value other than {identity(kind, x.dtype)}")
    return cx.add(_COMBINE[kind], y, bcast(cx, init, y.shape, ()))


def _window_product(cx, x, attrs):
    """A window product (jnp.cumprod) from window sums: exp(sum log|x|), negative when the window holds an
    odd number of negatives, 0 when it holds a zero (padding counts as 1: log 1 = 0, no sign, no zero)."""
    xe = Ex(cx, convert(cx, x, dtypes.f32))
    one, zero = full(cx, 1.0, xe.v), full(cx, 0.0, xe.v)

    def window_sum(v):
        return Ex(cx, cx.add("reduce_window", v.v if isinstance(v, Ex) else v, kind="sum", **attrs))

    def count(pred):
        return window_sum(cx.add("select", pred, one, zero))

    is_zero = xe.cmp("EQ", 0.0)
    magnitude = window_sum(Ex(cx, cx.add("select", is_zero, one, xe.abs().v)).log()).exp()
    negatives = count(xe.cmp("LT", 0.0))
    odd = (negatives - (negatives * 0.5).floor() * 2.0).cmp("GT", 0.5)
    signed = (-1.0 * magnitude).where(odd, magnitude)
    y = Ex(cx, full(cx, 0.0, signed.v)).where(count(is_zero).cmp("GT", 0.5), signed)
    return convert(cx, y.v, x.dtype)


# ----------------------------------------------------------------- dot / conv

def _float_operands(op):
    for v in list(op.operands) + list(op.results):
        _, dt = M.tensor_type(v.type, "operand")
        if not dt.is_float:
            return f"{dt} operands are not supported (float only)"
    return None


def _compute_operands(cx, a, b, out_dt):
    """Operands in the dtype the IR computes in: the wider of theirs and the result's."""
    dt = max((a.dtype, b.dtype, out_dt), key=lambda d: d.itemsize)
    return convert(cx, a, dt), convert(cx, b, dt)


@register("stablehlo.dot_general", check=_float_operands)
def _dot_general(cx, ins):
    from jaxlib.mlir.dialects import stablehlo
    dn = stablehlo.DotDimensionNumbers(cx.op.attributes["dot_dimension_numbers"])
    out_dt = cx.out_dtype()
    a, b = _compute_operands(cx, ins[0], ins[1], out_dt)
    y = cx.add("dot_general", a, b, lhs_batch=tuple(dn.lhs_batching_dimensions),
               rhs_batch=tuple(dn.rhs_batching_dimensions), lhs_contract=tuple(dn.lhs_contracting_dimensions),
               rhs_contract=tuple(dn.rhs_contracting_dimensions))
    return convert(cx, y, out_dt)


@register("stablehlo.dot", check=_float_operands)
def _dot(cx, ins):
    a, b = _compute_operands(cx, ins[0], ins[1], cx.out_dtype())
    y = cx.add("dot_general", a, b, lhs_batch=(), rhs_batch=(), lhs_contract=(a.type.rank - 1,),
               rhs_contract=(0,))
    return convert(cx, y, cx.out_dtype())


def _conv_check(op):
    bad = _float_operands(op)
    if bad:
        return bad
    if M.scalar(op, "batch_group_count", 1) != 1:
        return "batch_group_count > 1 is not supported"
    return None


@register("stablehlo.convolution", check=_conv_check)
def _convolution(cx, ins, pads=None):
    from jaxlib.mlir.dialects import stablehlo
    op = cx.op
    dn = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    out_dt = cx.out_dtype()
    x, w = _compute_operands(cx, ins[0], ins[1], out_dt)
    isp, ksp, osp = (list(dn.input_spatial_dimensions), list(dn.kernel_spatial_dimensions),
                     list(dn.output_spatial_dimensions))
    nsp = len(isp)
    x = transpose(cx, x, [dn.input_batch_dimension, dn.input_feature_dimension] + isp)
    w = transpose(cx, w, [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension] + ksp)
    zero = cx.scalar(0, x.dtype)
    for i, d in enumerate(M.ints(op, "lhs_dilation", (1,) * nsp)):
        x = dilate(cx, x, 2 + i, d - 1, zero)
    rev = [2 + i for i, r in enumerate(M.ints(op, "window_reversal", (0,) * nsp) or ()) if r]
    w = reverse(cx, w, rev)
    pads = M.int_matrix(op, "padding") if pads is None else pads
    pads = [(0, 0)] * nsp if pads is None else [(int(a), int(b)) for a, b in pads]
    if any(a < 0 or b < 0 for a, b in pads):
        x = pad(cx, x, zero, [0, 0] + [min(0, a) for a, _ in pads], [0, 0] + [min(0, b) for _, b in pads])
        pads = [(max(0, a), max(0, b)) for a, b in pads]
    y = cx.add("convolution", x, w, strides=M.ints(op, "window_strides", (1,) * nsp),
               dilations=M.ints(op, "rhs_dilation", (1,) * nsp), padding=tuple(pads),
               groups=M.scalar(op, "feature_group_count", 1))
    order = [dn.output_batch_dimension, dn.output_feature_dimension] + osp
    inv = [order.index(k) for k in range(len(order))]
    return convert(cx, transpose(cx, y, inv), out_dt)
