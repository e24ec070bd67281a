"""StableHLO converters for the less common math ops: shifts, bit counts, atan2, real/imag, batch norms.

- shift_left / shift_right_arithmetic map onto the IR's shifts (both saturate
  out-of-range amounts as StableHLO does: 0, or the sign fill); a logical
  right shift of a signed type is the arithmetic shift masked to the low
  `bits - n` bits (unsigned types shift logically already).
- popcnt / count_leading_zeros: one shift per bit position, summed (no
  bit-counting primitive; 32 or 64 fused elementwise steps).
- atan2 is atan(|y| / |x|) folded into the right quadrant by the sign BITS of
  x and y (so -0 and +0 give -pi/pi as IEEE says), with 0/0 and inf/inf fixed.
- real / imag of a float tensor are the tensor and zeros (complex element
  types are rejected by the pre-scan).
- batch_norm_inference / _training / _grad are the decompositions the spec
  gives, onto reduce and elementwise ops.
"""
from __future__ import annotations

import math

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.ops import bcast, full
from aotc.ir import dtypes


def _int_only(op):
    _, dt = M.tensor_type(op.results[0].type, "result")
    return None if not dt.is_float and dt != dtypes.boolean else f"{dt} operands are not supported (integers only)"


@register("stablehlo.shift_left", check=_int_only)
def _shift_left(cx, ins):
    return cx.add("shift_left", ins[0], ins[1])


@register("stablehlo.shift_right_arithmetic", check=_int_only)
def _shift_right_arithmetic(cx, ins):
    x, n = ins
    if x.dtype != dtypes.u8:
        return cx.add("shift_right", x, n)
    # unsigned: the top bit is the sign to fill with; ~(~x >> n) shifts ones in
    ones = full(cx, 255, x)
    filled = cx.add("xor", cx.add("shift_right", cx.add("xor", x, ones), n), ones)
    return cx.add("select", cx.add("compare", x, full(cx, 128, x), direction="GE"), filled,
                  cx.add("shift_right", x, n))


@register("stablehlo.shift_right_logical", check=_int_only)
def _shift_right_logical(cx, ins):
    x, n = ins
    if x.dtype == dtypes.u8:
        return cx.add("shift_right", x, n)
    bits = 8 * x.dtype.itemsize
    one = full(cx, 1, x)
    mask = cx.add("sub", cx.add("shift_left", one, cx.add("sub", full(cx, bits, n), n)), one)   # n = 0: -1
    y = cx.add("and", cx.add("shift_right", x, n), mask)
    inside = cx.add("and", cx.add("compare", n, full(cx, 0, n), direction="GE"),
                    cx.add("compare", n, full(cx, bits, n), direction="LT"))
    return cx.add("select", inside, y, full(cx, 0, x))


@register("stablehlo.popcnt", check=_int_only)
def _popcnt(cx, ins):
    """Sum of bit b = (x >> b) & 1 over the bits (the sign fill of >> never reaches bit 0 after the mask)."""
    x = ins[0]
    one, total = full(cx, 1, x), full(cx, 0, x)
    for b in range(8 * x.dtype.itemsize):
        total = cx.add("add", total, cx.add("and", cx.add("shift_right", x, full(cx, b, x)), one))
    return total


@register("stablehlo.count_leading_zeros", check=_int_only)
def _count_leading_zeros(cx, ins):
    """Number of b with x >> b == 0: the zero bits above the highest set bit (a negative x has none)."""
    x = ins[0]
    total = full(cx, 0, x)
    for b in range(8 * x.dtype.itemsize):
        zero = cx.add("compare", cx.add("shift_right", x, full(cx, b, x)), full(cx, 0, x), direction="EQ")
        total = cx.add("add", total, cx.add("convert", zero, dtype=x.dtype.name))
    return total


def _float_only(op):
    _, dt = M.tensor_type(op.results[0].type, "result")
    return None if dt.is_float else f"{dt} operands are not supported (float only)"


def _sign_bit(cx, v: Ex):
    """v < 0, counting -0 (1 / -0 = -inf)."""
    return cx.add("or", v.cmp("LT", 0.0), cx.add("and", v.cmp("EQ", 0.0), (1 / v).cmp("LT", 0.0)))


@register("stablehlo.atan2", check=_float_only)
def _atan2(cx, ins):
    y, x = Ex(cx, ins[0]), Ex(cx, ins[1])
    ay, ax = y.abs(), x.abs()
    inf = float("inf")
    both_zero = cx.add("and", ay.cmp("EQ", 0.0), ax.cmp("EQ", 0.0))
    both_inf = cx.add("and", ay.cmp("EQ", inf), ax.cmp("EQ", inf))
    t = Ex(cx, cx.add("select", both_zero, full(cx, 0.0, y.v), (ay / ax).atan().v))
    t = Ex(cx, cx.add("select", both_inf, full(cx, math.pi / 4, y.v), t.v))
    r = Ex(cx, cx.add("select", _sign_bit(cx, x), (math.pi - t).v, t.v))
    return cx.add("select", _sign_bit(cx, y), (-1 * r).v, r.v)


@register("stablehlo.real")
def _real(cx, ins):
    return ins[0]


@register("stablehlo.imag")
def _imag(cx, ins):
    return full(cx, 0, ins[0])


register("chlo.asin")(lambda cx, ins: cx.add("asin", ins[0]))
register("chlo.acos")(lambda cx, ins: cx.add("acos", ins[0]))
register("chlo.atan")(lambda cx, ins: cx.add("atan", ins[0]))


# ----------------------------------------------------------------- batch norm

def _bn(cx):
    """(feature_index, epsilon) of the current batch-norm op."""
    f = int(M.scalar(cx.op, "feature_index"))
    eps = float(M.scalar(cx.op, "epsilon"))
    return f, eps


def _per_feature(cx, x, f):
    """(broadcast of a (C,) vector to x's shape, sum over the non-feature dims, count per feature)."""
    others = tuple(d for d in range(x.type.rank) if d != f)
    n = int(np.prod([x.shape[d] for d in others]))
    return (lambda v: Ex(cx, bcast(cx, v.v if isinstance(v, Ex) else v, x.shape, (f,))),
            lambda v: Ex(cx, cx.add("reduce", v.v if isinstance(v, Ex) else v, axes=others, kind="sum")
                        if others else (v.v if isinstance(v, Ex) else v)), n)


@register("stablehlo.batch_norm_inference", check=_float_only)
def _batch_norm_inference(cx, ins):
    x, scale, offset, mean, var = ins
    f, eps = _bn(cx)
    b, _, _ = _per_feature(cx, x, f)
    return ((Ex(cx, x) - b(mean)) / (b(var) + eps).sqrt() * b(scale) + b(offset)).v


@register("stablehlo.batch_norm_training", check=_float_only)
def _batch_norm_training(cx, ins):
    x, scale, offset = ins
    f, eps = _bn(cx)
    b, total, n = _per_feature(cx, x, f)
    mean = total(x) / n
    centered = Ex(cx, x) - b(mean)
    var = total(centered * centered) / n
    y = centered / (b(var) + eps).sqrt() * b(scale) + b(offset)
    return [y.v, mean.v, var.v]


@register("stablehlo.batch_norm_grad", check=_float_only)
def _batch_norm_grad(cx, ins):
    x, scale, mean, var, dy = ins
    f, eps = _bn(cx)
    b, total, n = _per_feature(cx, x, f)
    centered = Ex(cx, x) - b(mean)
    var_eps = b(var) + eps
    stddev = var_eps.sqrt()
    g = Ex(cx, dy)
    i5 = b(total(g * centered)) * centered / var_eps
    grad_x = b(scale) / stddev / n * (g * n - b(total(g)) - i5)
    return [grad_x.v, total(g * (centered / stddev)).v, total(g).v]
