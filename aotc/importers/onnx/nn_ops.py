"""ONNX converters for the neural-network ops: matmul, conv, pooling, norms, softmax, reductions.

Same conventions as ops.py (which holds the table and the helpers).
Composite ops are decompositions onto primitives: Softmax is max/sub/exp/sum/
div, LayerNormalization is two reductions and elementwise ops, BatchNormalization
with constant statistics folds into one multiply-add, AveragePool is a window
sum divided by a count tensor computed here with numpy.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import CHECKS, broadcast_to, convert, norm_axis, register, reshape, reverse, scalar
from aotc.ir import dims as D
from aotc.ir import dtypes, ops
from aotc.ir.graph import Value


def _float_only(at, node, opset, dtype_of):
    dt = dtype_of(node.input[0])
    if dt is not None and not dt.is_float:
        return f"integer {dt} operands are not supported (float only)"


def _channel(ctx, v: Value, like: Value) -> Value:
    """A per-channel (C,) vector broadcast along dim 1 of an (N, C, ...) tensor."""
    return ctx.add("broadcast_in_dim", convert(ctx, v, like.dtype), shape=like.shape, broadcast_dimensions=(1,))


def _rebroadcast(ctx, r: Value, shape, axes) -> Value:
    """Broadcast a reduction result back over the reduced `axes` of `shape`."""
    keep = tuple(i for i in range(len(shape)) if i not in axes)
    return ctx.add("broadcast_in_dim", r, shape=tuple(shape), broadcast_dimensions=keep)


def _reduce(ctx, x: Value, axes, kind: str) -> Value:
    return ctx.add("reduce", x, axes=tuple(sorted(axes)), kind=kind)


# ------------------------------------------------------------------ matmul / gemm

@register("MatMul", check=_float_only)
def _matmul(ctx, ins, at):
    a, b = ins
    va, vb = a.type.rank == 1, b.type.rank == 1
    a = reshape(ctx, a, (1,) + a.shape) if va else a
    b = reshape(ctx, b, b.shape + (1,)) if vb else b
    if b.type.rank == 2:   # weights: no batch dims, contract a's last dim
        out = ctx.add("dot_general", a, b, lhs_batch=(), rhs_batch=(),
                      lhs_contract=(a.type.rank - 1,), rhs_contract=(0,))
        batch = a.shape[:-2]
    else:
        try:
            batch = D.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ctx.model_error(f"batch dims of {a.type} and {b.type} do not broadcast") from None
        a, b = broadcast_to(ctx, a, batch + a.shape[-2:]), broadcast_to(ctx, b, batch + b.shape[-2:])
        nb = len(batch)
        out = ctx.add("dot_general", a, b, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
                      lhs_contract=(nb + 1,), rhs_contract=(nb,))
    shape = tuple(batch) + (() if va else (a.shape[-2],)) + (() if vb else (b.shape[-1],))
    return reshape(ctx, out, shape)


@register("Gemm", check=_float_only)
def _gemm(ctx, ins, at):
    a, b = ins[:2]
    y = ctx.add("dot_general", a, b, lhs_batch=(), rhs_batch=(),
                lhs_contract=(0 if at.get("transA", 0) else 1,), rhs_contract=(1 if at.get("transB", 0) else 0,))
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    y = Ex(ctx, y) * alpha if alpha != 1.0 else Ex(ctx, y)
    if len(ins) > 2 and ins[2] is not None:
        c = Ex(ctx, broadcast_to(ctx, ins[2], y.v.shape))
        y = y + (c * beta if beta != 1.0 else c)
    return y.v


# ------------------------------------------------------------------ conv and pooling

def _pads(ctx, at, in_sp, k_sp, strides, dils, ceil_mode=False):
    """Per spatial dim (lo, hi) padding from auto_pad/pads, widened on the high side for ceil_mode."""
    n = len(in_sp)
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i, k, s, d in zip(in_sp, k_sp, strides, dils):
            total = max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads.append((lo, total - lo))
    elif auto == "VALID":
        pads = [(0, 0)] * n
    else:
        p = at.get("pads", [0] * 2 * n)
        pads = list(zip(p[:n], p[n:]))
    if ceil_mode:
        out = []
        for (lo, hi), i, k, s, d in zip(pads, in_sp, k_sp, strides, dils):
            span = (k - 1) * d + 1
            o = -(-(i + lo + hi - span) // s) + 1
            if (o - 1) * s >= i + lo:   # the last window must start inside the input or low padding
                o -= 1
            out.append((lo, max(hi, (o - 1) * s + span - i - lo)))
        pads = out
    return [(int(lo), int(hi)) for lo, hi in pads]


@register("Conv", check=_float_only)
def _conv(ctx, ins, at):
    x, w = ins[:2]
    nsp = x.type.rank - 2
    strides, dils = tuple(at.get("strides", [1] * nsp)), tuple(at.get("dilations", [1] * nsp))
    pads = _pads(ctx, at, x.shape[2:], w.shape[2:], strides, dils)
    y = ctx.add("convolution", x, w, strides=strides, dilations=dils, padding=tuple(pads),
                groups=at.get("group", 1))
    if len(ins) > 2 and ins[2] is not None:
        y = ctx.add("add", y, _channel(ctx, ins[2], y))
    return y


def _conv_transpose_check(at, node, opset, dtype_of):
    return _float_only(at, node, opset, dtype_of)


def _conv_transpose_pads(at, in_sp, ks, strides, dils, out_pad):
    """Explicit (lo, hi) pads per spatial dim, from pads or from output_shape / auto_pad as ONNX defines."""
    nsp = len(in_sp)
    auto = at.get("auto_pad", "NOTSET")
    out_shape = at.get("output_shape")
    if out_shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [d * s for d, s in zip(in_sp, strides)]
    if out_shape is None:
        if auto == "VALID":
            return [(0, 0)] * nsp
        p = at.get("pads", [0] * 2 * nsp)
        return list(zip(p[:nsp], p[nsp:]))
    out_shape = list(out_shape)[-nsp:]
    pads = []
    for d, k, s, dl, op, o in zip(in_sp, ks, strides, dils, out_pad, out_shape):
        total = s * (d - 1) + op + (k - 1) * dl + 1 - o
        half = total // 2
        pads.append((half, total - half) if auto == "SAME_UPPER" else (total - half, half))
    return pads


def _dilate(ctx, x: Value, axis: int, s: int) -> Value:
    """Insert s-1 zeros between elements along `axis` (x: (..., D, ...) -> (..., (D-1)*s+1, ...))."""
    if s == 1:
        return x
    shape, r = x.shape, x.type.rank
    y = reshape(ctx, x, shape[:axis + 1] + (1,) + shape[axis + 1:])
    high = [0] * (r + 1)
    high[axis + 1] = s - 1
    y = ctx.add("pad", y, scalar(ctx, 0, x.dtype), low=(0,) * (r + 1), high=tuple(high))
    y = reshape(ctx, y, shape[:axis] + (shape[axis] * s,) + shape[axis + 1:])
    limit = list(y.shape)
    limit[axis] = (shape[axis] - 1) * s + 1
    return ctx.add("slice", y, start=(0,) * r, limit=tuple(limit), stride=(1,) * r)


@register("ConvTranspose", check=_conv_transpose_check)
def _conv_transpose(ctx, ins, at):
    """A stride-1 convolution of the zero-dilated input with the flipped, transposed kernel."""
    x, w = ins[:2]
    nsp, g = x.type.rank - 2, at.get("group", 1)
    strides, dils = at.get("strides", [1] * nsp), at.get("dilations", [1] * nsp)
    out_pad = at.get("output_padding", [0] * nsp)
    pads = _conv_transpose_pads(at, x.shape[2:], w.shape[2:], strides, dils, out_pad)
    for i, s in enumerate(strides):
        x = _dilate(ctx, x, 2 + i, s)
    c, og, ks = w.shape[0], w.shape[1], w.shape[2:]   # w: (C, O/g, *K) -> (O, C/g, *K), flipped
    wt = reshape(ctx, w, (g, c // g, og) + ks)
    wt = ctx.add("transpose", wt, permutation=(0, 2, 1) + tuple(range(3, 3 + nsp)))
    wt = reshape(ctx, wt, (g * og, c // g) + ks)
    for i in range(nsp):
        wt = reverse(ctx, wt, 2 + i)
    conv_pads, crop = [], False
    for (lo, hi), k, d, op in zip(pads, ks, dils, out_pad):
        plo, phi = d * (k - 1) - lo, d * (k - 1) - hi + op
        conv_pads.append((plo, phi))
        crop |= plo < 0 or phi < 0
    if crop:   # padding larger than the kernel reach: pad by 0 there, then crop the result
        y = ctx.add("convolution", x, wt, strides=(1,) * nsp, dilations=tuple(dils),
                    padding=tuple((max(lo, 0), max(hi, 0)) for lo, hi in conv_pads), groups=g)
        start = (0, 0) + tuple(-min(lo, 0) for lo, _ in conv_pads)
        limit = y.shape[:2] + tuple(d + min(hi, 0) for d, (_, hi) in zip(y.shape[2:], conv_pads))
        y = ctx.add("slice", y, start=start, limit=limit, stride=(1,) * y.type.rank)
    else:
        y = ctx.add("convolution", x, wt, strides=(1,) * nsp, dilations=tuple(dils),
                    padding=tuple(conv_pads), groups=g)
    if len(ins) > 2 and ins[2] is not None:
        y = ctx.add("add", y, _channel(ctx, ins[2], y))
    return y


def _pool_check(at, node, opset, dtype_of):
    if node.op_type == "AveragePool":
        return _float_only(at, node, opset, dtype_of)


def _window(ctx, x: Value, at, kind: str):
    """reduce_window over the spatial dims; returns (result, window attrs)."""
    nsp = x.type.rank - 2
    k = tuple(at["kernel_shape"])
    strides, dils = tuple(at.get("strides", [1] * nsp)), tuple(at.get("dilations", [1] * nsp))
    pads = _pads(ctx, at, x.shape[2:], k, strides, dils, bool(at.get("ceil_mode", 0)))
    attrs = dict(kind=kind, window=(1, 1) + k, strides=(1, 1) + strides,
                 padding=((0, 0), (0, 0)) + tuple(pads), dilations=(1, 1) + dils)
    return ctx.add("reduce_window", x, **attrs), attrs


@register("MaxPool", check=_pool_check)
def _max_pool(ctx, ins, at):
    y, attrs = _window(ctx, ins[0], at, "max")
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return y, _max_pool_indices(ctx, ins[0], y, attrs, at.get("storage_order", 0))
    return y


def _max_pool_indices(ctx, x: Value, y: Value, attrs, storage_order: int) -> Value:
    """MaxPool's Indices: the flat input index of the first window element equal to the max.

    One strided slice of the (-inf padded) input per window offset; elementwise
    compare/select keep the first match in row-major window order, so the whole
    thing fuses into one loop kernel with the indices computed by iota math.
    """
    n, c, sp = x.shape[0], x.shape[1], x.shape[2:]
    nsp = len(sp)
    win, st, dil = attrs["window"][2:], attrs["strides"][2:], attrs["dilations"][2:]
    lows = [p[0] for p in attrs["padding"][2:]]
    out_sp = y.shape[2:]
    need = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out_sp, st, win, dil)]
    highs = [max(0, nd - lo - d) for nd, lo, d in zip(need, lows, sp)]
    xp = ctx.add("pad", x, scalar(ctx, -np.inf, x.dtype), low=(0, 0) + tuple(lows), high=(0, 0) + tuple(highs))
    # flat index strides of the input, spatial order per storage_order (0 row-major, 1 column-major)
    sp_strides = [D.prod(sp[i + 1:]) for i in range(nsp)] if storage_order == 0 else \
        [D.prod(sp[:i]) for i in range(nsp)]
    plane = D.prod(sp)
    i64 = dtypes.i64
    base = ctx.add("add", ctx.add("mul", ctx.add("iota", shape=y.shape, dimension=0, dtype="i64"),
                                  scalar(ctx, c * plane, i64, y.shape)),
                   ctx.add("mul", ctx.add("iota", shape=y.shape, dimension=1, dtype="i64"),
                           scalar(ctx, plane, i64, y.shape)))
    idx = scalar(ctx, -1, i64, y.shape)
    for pos in np.ndindex(*win):
        start = tuple(p * d for p, d in zip(pos, dil))
        cand = ctx.add("slice", xp, start=(0, 0) + start,
                       limit=(n, c) + tuple(s0 + (o - 1) * s + 1 for s0, o, s in zip(start, out_sp, st)),
                       stride=(1, 1) + tuple(st))
        offs = np.zeros(out_sp, np.int64)
        for i in range(nsp):
            q = np.arange(out_sp[i]) * st[i] - lows[i] + pos[i] * dil[i]
            offs = offs + (q * sp_strides[i]).reshape([-1 if j == i else 1 for j in range(nsp)])
        flat = ctx.add("add", base, ctx.add("broadcast_in_dim", ctx.const(offs, i64), shape=y.shape,
                                            broadcast_dimensions=tuple(range(2, 2 + nsp))))
        first = ctx.add("and", ctx.add("compare", cand, y, direction="EQ"),
                        ctx.add("compare", idx, scalar(ctx, -1, i64, y.shape), direction="EQ"))
        idx = ctx.add("select", first, flat, idx)
    return idx


@register("AveragePool", check=_pool_check)
def _avg_pool(ctx, ins, at):
    x = ins[0]
    y, attrs = _window(ctx, x, at, "sum")
    declared = _pads(ctx, at, x.shape[2:], at["kernel_shape"], attrs["strides"][2:], attrs["dilations"][2:])
    sp = x.shape[2:]
    if at.get("count_include_pad", 0):   # count the declared padding, not the ceil_mode extension
        ones = np.ones((1, 1) + tuple(d + lo + hi for d, (lo, hi) in zip(sp, declared)), np.float32)
        pad = ((0, 0), (0, 0)) + tuple((0, hi - dhi) for (_, hi), (_, dhi) in zip(attrs["padding"][2:], declared))
    else:
        ones, pad = np.ones((1, 1) + sp, np.float32), attrs["padding"]
    (count,) = ops.reference("reduce_window", dict(attrs, padding=pad), ones)
    return (Ex(ctx, y) / broadcast_to(ctx, ctx.const(count.astype(x.dtype.np), x.dtype), y.shape)).v


@register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, ins, at):
    x = ins[0]
    axes = tuple(range(2, x.type.rank))
    r = _reduce(ctx, x, axes, "max" if ctx.op_type == "GlobalMaxPool" else "sum")
    r = reshape(ctx, r, x.shape[:2] + (1,) * len(axes))
    if ctx.op_type == "GlobalMaxPool":
        return r
    return (Ex(ctx, r) / _count(x.shape[2:])).v


def _count(dims):
    """How many elements a mean divides by: a float, or the size itself when it is dynamic (the kernel
    computes it from its dim arguments)."""
    n = D.prod(dims)
    return float(n) if D.is_static(n) else n


# ------------------------------------------------------------------ normalization

def _moments(ctx, x: Value, axes, eps: float):
    """(mean, 1/sqrt(var + eps), normalized x) over `axes`; mean and inv are reduced."""
    n = _count([x.shape[a] for a in axes])
    mean = Ex(ctx, _reduce(ctx, x, axes, "sum")) / n
    d = Ex(ctx, x) - _rebroadcast(ctx, mean.v, x.shape, axes)
    var = Ex(ctx, _reduce(ctx, (d * d).v, axes, "sum")) / n
    inv = (var + eps).un("rsqrt")
    return mean, inv, d * _rebroadcast(ctx, inv.v, x.shape, axes)


def _normalize(ctx, x: Value, axes, eps: float) -> Ex:
    return _moments(ctx, x, axes, eps)[2]


def _batch_norm_check(at, node, opset, dtype_of):
    if at.get("training_mode", 0):
        return "training_mode=1 is not supported (inference only)"
    if opset < 9 and at.get("spatial", 1) == 0:
        return "spatial=0 is not supported"
    if len([o for o in node.output if o]) > 1:
        return "only the first output (Y) is supported"


@register("BatchNormalization", check=_batch_norm_check)
def _batch_norm(ctx, ins, at):
    x, scale, bias, mean, var = ins[:5]
    eps = at.get("epsilon", 1e-5)
    stats = [ctx.maybe_static(v) for v in (scale, bias, mean, var)]
    if all(s is not None for s in stats):   # fold into y = x * s + t
        sc, b, m, v = (np.asarray(s, np.float64) for s in stats)
        s = sc / np.sqrt(v + eps)
        mul, add = ctx.const(s.astype(x.dtype.np), x.dtype), ctx.const((b - m * s).astype(x.dtype.np), x.dtype)
        return (Ex(ctx, x) * _channel(ctx, mul, x) + _channel(ctx, add, x)).v
    xs = Ex(ctx, x) - _channel(ctx, mean, x)
    inv = (Ex(ctx, _channel(ctx, var, x)) + eps).un("rsqrt")
    return (xs * inv * _channel(ctx, scale, x) + _channel(ctx, bias, x)).v


@register("InstanceNormalization")
def _instance_norm(ctx, ins, at):
    x, scale, bias = ins
    y = _normalize(ctx, x, tuple(range(2, x.type.rank)), at.get("epsilon", 1e-5))
    return (y * _channel(ctx, scale, x) + _channel(ctx, bias, x)).v


@register("LayerNormalization", "RMSNormalization")
def _layer_norm(ctx, ins, at):
    x = ins[0]
    r = x.type.rank
    axes = tuple(range(norm_axis(ctx, at.get("axis", -1), r), r))
    xc = convert(ctx, x, dtypes.f32) if at.get("stash_type", 1) == 1 else x
    eps = at.get("epsilon", 1e-5)
    if ctx.op_type == "RMSNormalization":
        ms = Ex(ctx, _reduce(ctx, (Ex(ctx, xc) * xc).v, axes, "sum")) / _count(xc.shape[axes[0]:])
        y = Ex(ctx, xc) * _rebroadcast(ctx, (ms + eps).un("rsqrt").v, x.shape, axes)
        mean = inv = None
    else:
        mean, inv, y = _moments(ctx, xc, axes, eps)
    y = Ex(ctx, convert(ctx, y.v, x.dtype)) * broadcast_to(ctx, ins[1], x.shape)
    if len(ins) > 2 and ins[2] is not None:
        y = y + broadcast_to(ctx, ins[2], x.shape)
    if mean is None:
        return y.v
    keep = x.shape[:axes[0]] + (1,) * len(axes)
    return [y.v, reshape(ctx, mean.v, keep), reshape(ctx, inv.v, keep)]


@register("LpNormalization")
def _lp_norm(ctx, ins, at):
    x = ins[0]
    axis = norm_axis(ctx, at.get("axis", -1), x.type.rank)
    v = Ex(ctx, x).un("abs") if at.get("p", 2) == 1 else Ex(ctx, x) * x
    norm = Ex(ctx, _reduce(ctx, v.v, (axis,), "sum"))
    norm = norm if at.get("p", 2) == 1 else norm.un("sqrt")
    norm = norm.where(norm.cmp("NE", 0), 1.0)   # an all-zero slice stays zero
    return (Ex(ctx, x) / _rebroadcast(ctx, norm.v, x.shape, (axis,))).v


CHECKS["LpNormalization"] = lambda at, node, opset, dtype_of: (
    f"p={at['p']} (supported: 1, 2)" if at.get("p", 2) not in (1, 2) else None)


# ------------------------------------------------------------------ softmax

@register("Softmax", "LogSoftmax")
def _softmax(ctx, ins, at):
    x = ins[0]
    r = x.type.rank
    if ctx.opset < 13:   # coerced to 2-D at `axis`: normalise over all trailing dims
        axes = tuple(range(norm_axis(ctx, at.get("axis", 1), r), r))
    else:
        axes = (norm_axis(ctx, at.get("axis", -1), r),)
    m = _rebroadcast(ctx, _reduce(ctx, x, axes, "max"), x.shape, axes)
    z = Ex(ctx, x) - m    # subtract the max: exp never overflows
    e = z.un("exp")
    s = _rebroadcast(ctx, _reduce(ctx, e.v, axes, "sum"), x.shape, axes)
    if ctx.op_type == "LogSoftmax":
        return (z - Ex(ctx, s).un("log")).v
    return (e / s).v


# ------------------------------------------------------------------ reductions

_REDUCE = {"ReduceSum": "sum", "ReduceMean": "sum", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
           "ReduceL1": "sum", "ReduceL2": "sum", "ReduceSumSquare": "sum", "ReduceLogSum": "sum",
           "ReduceLogSumExp": "sum"}


@register(*_REDUCE)
def _reduce_op(ctx, ins, at):
    x, op = ins[0], ctx.op_type
    r = x.type.rank
    if ctx.opset < (13 if op == "ReduceSum" else 18):
        axes = at.get("axes")
    else:
        axes = ctx.static_ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            return x
        axes = range(r)
    axes = tuple(sorted({norm_axis(ctx, a, r) for a in axes}))
    if x.dtype == dtypes.boolean and op in ("ReduceMax", "ReduceMin"):   # any / all
        at = dict(at, noop_with_empty_axes=0, axes=list(axes))
        return convert(ctx, _reduce_op(ctx, [convert(ctx, x, dtypes.u8), ins[1] if len(ins) > 1 else None], at),
                       dtypes.boolean)
    v, m = Ex(ctx, x), None
    if op in ("ReduceL1", "ReduceL2", "ReduceSumSquare"):
        v = v.un("abs") if op == "ReduceL1" else v * v
    elif op == "ReduceLogSumExp":
        m = _reduce(ctx, x, axes, "max")
        v = (v - _rebroadcast(ctx, m, x.shape, axes)).un("exp")
    out = Ex(ctx, _reduce(ctx, v.v, axes, _REDUCE[op]))
    if op == "ReduceMean":
        out = out / _count([x.shape[a] for a in axes])
    elif op == "ReduceL2":
        out = out.un("sqrt")
    elif op == "ReduceLogSum":
        out = out.un("log")
    elif op == "ReduceLogSumExp":
        out = out.un("log") + m
    if at.get("keepdims", 1):
        return reshape(ctx, out.v, [1 if i in axes else d for i, d in enumerate(x.shape)])
    return out.v


def _arg_index(ctx, x: Value, axis: int, kind: str, last: bool) -> Value:
    """Index of the first (last) extremum along `axis`: iota where x hits it, then min (max)."""
    ext = _rebroadcast(ctx, _reduce(ctx, x, (axis,), kind), x.shape, (axis,))
    hit = ctx.add("compare", x, ext, direction="EQ")
    iota = Ex(ctx, ctx.add("iota", shape=x.shape, dimension=axis, dtype="i64"))
    return _reduce(ctx, iota.where(hit, -1 if last else x.shape[axis]).v, (axis,), "max" if last else "min")


@register("ArgMax", "ArgMin")
def _arg_reduce(ctx, ins, at):
    x = ins[0]
    axis = norm_axis(ctx, at.get("axis", 0), x.type.rank)
    idx = _arg_index(ctx, x, axis, "max" if ctx.op_type == "ArgMax" else "min", at.get("select_last_index", 0))
    if at.get("keepdims", 1):
        return reshape(ctx, idx, x.shape[:axis] + (1,) + x.shape[axis + 1:])
    return idx


@register("Hardmax")
def _hardmax(ctx, ins, at):
    x = ins[0]
    r = x.type.rank
    if ctx.opset < 13:   # coerced to 2-D at `axis`
        axis = norm_axis(ctx, at.get("axis", 1), r)
        x2 = reshape(ctx, x, (D.prod(x.shape[:axis]), D.prod(x.shape[axis:])))
        return reshape(ctx, _hardmax_1(ctx, x2, 1), x.shape)
    return _hardmax_1(ctx, x, norm_axis(ctx, at.get("axis", -1), r))


def _hardmax_1(ctx, x: Value, axis: int) -> Value:
    idx = _rebroadcast(ctx, _arg_index(ctx, x, axis, "max", False), x.shape, (axis,))
    hit = Ex(ctx, ctx.add("iota", shape=x.shape, dimension=axis, dtype="i64")).cmp("EQ", idx)
    return ctx.add("select", hit, scalar(ctx, 1, x.dtype, x.shape), scalar(ctx, 0, x.dtype, x.shape))


CHECKS.setdefault("GlobalAveragePool", _float_only)
