"""More ONNX neural-network converters: GroupNormalization, LRN, MVN, LpPool, Einsum, Upsample, integer matmul.

Same conventions as ops.py, decompositions onto primitives:
GroupNormalization normalizes an (N, G, C/G * spatial) view; LRN is a
channel-window sum of squares (reduce_window); LpPool a window sum of |x|^p;
Einsum removes repeated labels (diagonals), sums labels used by one operand
only, then contracts operand pairs with dot_general and transposes to the
output order. MatMulInteger / ConvInteger / QLinear* are written as float
math on dequantized operands, `(convert(q) - zero_point) * scale` (scale 1
for the *Integer ops), the result converted back (QLinear*: requantized):
the `quantize` pass turns that into an integer dot/conv, as it does for Q/DQ
models; where it cannot (a weight zero point on a conv), f32 is exact while
partial sums stay below 2**24.
"""
from __future__ import annotations

import string

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.nn_ops import _conv, _count, _matmul, _moments, _window
from aotc.importers.onnx.ops import broadcast_to, convert, norm_axis, register, reshape, scalar
from aotc.importers.onnx.resize import _resize
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.graph import Value


@register("GroupNormalization")
def _group_norm(ctx, ins, at):
    x, scale, bias = ins
    g = at["num_groups"]
    n, c = x.shape[:2]
    xc = convert(ctx, x, dtypes.f32) if at.get("stash_type", 1) == 1 else x
    xg = reshape(ctx, xc, (n, g, D.prod(x.shape[1:]) // g))
    _, _, y = _moments(ctx, xg, (2,), at.get("epsilon", 1e-5))
    y = convert(ctx, reshape(ctx, y.v, x.shape), x.dtype)

    def per_channel(v: Value) -> Value:
        if v.shape[0] != c:   # opset 18: one value per group
            v = ctx.add("gather", v, ctx.const(np.arange(c, dtype=np.int64) // (c // g)), axis=0)
        return ctx.add("broadcast_in_dim", convert(ctx, v, x.dtype), shape=x.shape, broadcast_dimensions=(1,))
    return (Ex(ctx, y) * per_channel(scale) + per_channel(bias)).v


@register("MeanVarianceNormalization")
def _mvn(ctx, ins, at):
    x = ins[0]
    axes = tuple(sorted(norm_axis(ctx, a, x.type.rank) for a in at.get("axes", [0, 2, 3])))
    mean, _, _ = _moments(ctx, x, axes, 0.0)
    keep = tuple(i for i in range(x.type.rank) if i not in axes)
    d = Ex(ctx, x) - ctx.add("broadcast_in_dim", mean.v, shape=x.shape, broadcast_dimensions=keep)
    var = Ex(ctx, ctx.add("reduce", (d * d).v, axes=axes, kind="sum")) / _count([x.shape[a] for a in axes])
    std = (var.un("sqrt") + 1e-9)
    return (d / ctx.add("broadcast_in_dim", std.v, shape=x.shape, broadcast_dimensions=keep)).v


@register("LRN")
def _lrn(ctx, ins, at):
    x = ins[0]
    size = at["size"]
    alpha, beta, bias = at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0)
    r = x.type.rank
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = (Ex(ctx, x) * x).v
    s = ctx.add("reduce_window", sq, kind="sum", window=(1, size) + (1,) * (r - 2), strides=(1,) * r,
                padding=((0, 0), (lo, hi)) + ((0, 0),) * (r - 2), dilations=(1,) * r)
    den = Ex(ctx, s) * (alpha / size) + bias
    return (Ex(ctx, x) / Ex(ctx, ctx.add("pow", den.v, scalar(ctx, beta, x.dtype, x.shape)))).v


def _lp(ctx, x: Value, p: float):
    return (Ex(ctx, x) * x) if p == 2 else Ex(ctx, ctx.add("pow", Ex(ctx, x).un("abs").v,
                                                           scalar(ctx, p, x.dtype, x.shape)))


def _root(ctx, y: Ex, p: float) -> Value:
    return y.un("sqrt").v if p == 2 else ctx.add("pow", y.v, scalar(ctx, 1.0 / p, y.v.dtype, y.v.shape))


@register("LpPool")
def _lp_pool(ctx, ins, at):
    p = float(at.get("p", 2))
    y, _ = _window(ctx, _lp(ctx, ins[0], p).v, at, "sum")
    return _root(ctx, Ex(ctx, y), p)


@register("GlobalLpPool")
def _global_lp_pool(ctx, ins, at):
    x, p = ins[0], float(at.get("p", 2))
    axes = tuple(range(2, x.type.rank))
    s = ctx.add("reduce", _lp(ctx, x, p).v, axes=axes, kind="sum")
    return reshape(ctx, _root(ctx, Ex(ctx, s), p), x.shape[:2] + (1,) * len(axes))


@register("Upsample")
def _upsample(ctx, ins, at):
    x = ins[0]
    scales = ctx.const(np.asarray(at["scales"], np.float32)) if "scales" in at else ins[1]
    mode = at.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise ctx.fail(f"mode={mode!r} (supported: nearest, linear)")
    rat = {"mode": "nearest" if mode == "nearest" else "linear",
           "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return _resize(ctx, [x, None, scales], rat)


# ------------------------------------------------------------------ einsum

def _parse_einsum(eq: str, ranks: list[int]):
    eq = eq.replace(" ", "")
    lhs, out = (eq.split("->") + [None])[:2]
    terms = lhs.split(",")
    free = [ch for ch in string.ascii_uppercase + string.ascii_lowercase if ch not in eq]
    ell_n = max((r - (len(t) - 3) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(free[:ell_n])
    labels = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - (len(t) - 3)
            t = t.replace("...", ell[ell_n - k:])
        labels.append(t)
    if out is None:
        counts = {c: "".join(labels).count(c) for c in "".join(labels)}
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return labels, out


def _diagonal(ctx, v: Value, lab: str) -> tuple[Value, str]:
    """Remove repeated labels by taking the diagonal (mask and sum the second occurrence)."""
    while len(set(lab)) < len(lab):
        c = next(ch for ch in lab if lab.count(ch) > 1)
        p = lab.index(c)
        q = lab.index(c, p + 1)
        eq = ctx.add("compare", ctx.add("iota", shape=v.shape, dimension=p, dtype="i64"),
                     ctx.add("iota", shape=v.shape, dimension=q, dtype="i64"), direction="EQ")
        v = ctx.add("reduce", ctx.add("select", eq, v, scalar(ctx, 0, v.dtype, v.shape)), axes=(q,), kind="sum")
        lab = lab[:q] + lab[q + 1:]
    return v, lab


@register("Einsum")
def _einsum(ctx, ins, at):
    labels, out = _parse_einsum(at["equation"], [v.type.rank for v in ins])
    ops_ = []
    for v, lab in zip(ins, labels):
        ops_.append(list(_diagonal(ctx, v, lab)))
    for i, (v, lab) in enumerate(ops_):   # sum labels nobody else needs
        others = out + "".join(l for j, (_, l) in enumerate(ops_) if j != i)
        drop = [k for k, ch in enumerate(lab) if ch not in others]
        if drop:
            ops_[i] = [ctx.add("reduce", v, axes=tuple(drop), kind="sum"), "".join(ch for ch in lab if ch in others)]
    v, lab = ops_[0]
    for j in range(1, len(ops_)):
        w, wl = ops_[j]
        later = out + "".join(l for _, l in ops_[j + 1:])
        batch = [ch for ch in lab if ch in wl and ch in later]
        contract = [ch for ch in lab if ch in wl and ch not in later]
        v = ctx.add("dot_general", v, w, lhs_batch=tuple(lab.index(c) for c in batch),
                    rhs_batch=tuple(wl.index(c) for c in batch),
                    lhs_contract=tuple(lab.index(c) for c in contract),
                    rhs_contract=tuple(wl.index(c) for c in contract))
        lab = "".join(batch) + "".join(c for c in lab if c not in batch and c not in contract) + \
            "".join(c for c in wl if c not in batch and c not in contract)
    drop = tuple(k for k, ch in enumerate(lab) if ch not in out)
    if drop:
        v = ctx.add("reduce", v, axes=drop, kind="sum")
        lab = "".join(ch for ch in lab if ch in out)
    perm = tuple(lab.index(c) for c in out)
    return v if perm == tuple(range(len(perm))) else ctx.add("transpose", v, permutation=perm)


# ------------------------------------------------------------------ integer / quantized matmul and conv

def _minus_zp(ctx, x: Value, zp: Value | None, axis: int | None = None) -> Value:
    """(x - zp) * 1 in f32: a dequantization with scale 1, the form the quantize pass reads."""
    xf = convert(ctx, x, dtypes.f32)
    if zp is None:
        return (Ex(ctx, xf) * 1.0).v
    z = convert(ctx, zp, dtypes.f32)
    if z.type.size == 1:
        z = broadcast_to(ctx, reshape(ctx, z, ()), x.shape)
    elif axis is not None:
        z = ctx.add("broadcast_in_dim", reshape(ctx, z, (z.type.size,)), shape=x.shape, broadcast_dimensions=(axis,))
    else:
        z = broadcast_to(ctx, z, x.shape)
    return ((Ex(ctx, xf) - z) * 1.0).v


def _opt(ins, i):
    return ins[i] if len(ins) > i and ins[i] is not None else None


@register("MatMulInteger")
def _matmul_integer(ctx, ins, at):
    a, b = ins[:2]
    za, zb = _opt(ins, 2), _opt(ins, 3)
    af = _minus_zp(ctx, a, za, a.type.rank - 2 if za is not None and za.type.size > 1 else None)
    bf = _minus_zp(ctx, b, zb, b.type.rank - 1 if zb is not None and zb.type.size > 1 else None)
    return convert(ctx, _matmul(ctx, [af, bf], {}), dtypes.i32)


@register("ConvInteger")
def _conv_integer(ctx, ins, at):
    x, w = ins[:2]
    xf = _minus_zp(ctx, x, _opt(ins, 2))
    wf = _minus_zp(ctx, w, _opt(ins, 3), 0)
    return convert(ctx, _conv(ctx, [xf, wf], at), dtypes.i32)


def _requantize(ctx, y: Value, scale: Value, zp: Value, axis=None) -> Value:
    from aotc.importers.onnx.math_ops import _quantize
    return _quantize(ctx, [y, scale, zp], {"axis": y.type.rank - 1 if axis is None else axis})


def _dequant(ctx, x: Value, scale: Value, zp: Value, axis: int) -> Value:
    from aotc.importers.onnx.math_ops import _dequantize
    return convert(ctx, _dequantize(ctx, [x, scale, zp], {"axis": axis}), dtypes.f32)


@register("QLinearMatMul")
def _qlinear_matmul(ctx, ins, at):
    a, sa, za, b, sb, zb, sy, zy = ins
    af = _dequant(ctx, a, sa, za, max(a.type.rank - 2, 0))
    bf = _dequant(ctx, b, sb, zb, b.type.rank - 1)
    y = _matmul(ctx, [af, bf], {})
    return _requantize(ctx, convert(ctx, y, sy.dtype) if sy.dtype != dtypes.f32 else y, sy, zy)


@register("QLinearConv")
def _qlinear_conv(ctx, ins, at):
    x, sx, zx, w, sw, zw, sy, zy = ins[:8]
    xf = _dequant(ctx, x, sx, zx, 1)
    wf = _dequant(ctx, w, sw, zw, 0)
    cin = [xf, wf]
    if len(ins) > 8 and ins[8] is not None:   # int32 bias, scale sx * sw
        bscale = Ex(ctx, convert(ctx, broadcast_to(ctx, reshape(ctx, sx, ()), sw.shape) if sx.type.size == 1 else sx,
                                 dtypes.f32)) * convert(ctx, sw, dtypes.f32)
        bias = Ex(ctx, convert(ctx, ins[8], dtypes.f32)) * broadcast_to(ctx, bscale.v, ins[8].shape)
        cin.append(bias.v)
    y = _conv(ctx, cin, at)
    return _requantize(ctx, y, sy, zy, 1)


@register("DynamicQuantizeLinear")
def _dynamic_quantize(ctx, ins, at):
    x = ins[0]
    axes = tuple(range(x.type.rank))
    lo = Ex(ctx, ctx.add("reduce", x, axes=axes, kind="min")).min(0.0)
    hi = Ex(ctx, ctx.add("reduce", x, axes=axes, kind="max")).max(0.0)
    scale = (hi - lo) / 255.0
    zp = ((Ex(ctx, scalar(ctx, 0.0, x.dtype)) - lo) / scale).un("round_even").max(0.0).min(255.0)
    q = (Ex(ctx, x) / broadcast_to(ctx, scale.v, x.shape)).un("round_even") + broadcast_to(ctx, zp.v, x.shape)
    y = convert(ctx, q.max(0.0).min(255.0).v, dtypes.u8)
    return [y, scale.v, convert(ctx, zp.v, dtypes.u8)]
