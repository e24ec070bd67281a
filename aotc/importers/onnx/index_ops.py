"""ONNX converters for indexing ops: GatherND, ScatterElements/ScatterND, TopK, CumSum, Compress, ...

Same conventions as ops.py. aotc has no scatter or sort primitive; these
ops are decompositions onto compare / select / reduce / gather, whose
reductions fuse the comparison grid into the reduce kernel's loads (nothing
of size N x M is materialized):

- Scatter*: every output element j looks for the updates that target it:
  the last one wins (reduction='none'), or they are combined (add/mul/max/min).
  Work is O(data size x updates size).
- TopK: each element's rank is the number of elements that beat it (ties go
  to the lower index, as ONNX requires); output slot r gathers the element of
  rank r. Work is O(n^2) per row of the reduced axis.
- CumSum / CumProd: a masked sum / product over the axis, O(n^2) per row.
- TensorScatter (KV-cache update): each cache element computes which update
  row lands on it and gathers it; O(cache size).

These are exact and fine for the sizes where ONNX models use them (small
axes, index updates); a dedicated kernel family would do better on long axes.
Ops whose output shape depends on data (Compress, NonZero) need that data to
be a constant at compile time.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import broadcast_to, convert, norm_axis, register, reshape, scalar
from aotc.importers.onnx.shape_ops import _gather_elements
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.graph import Value


def _iota(ctx, shape, dim) -> Value:
    return ctx.add("iota", shape=tuple(shape), dimension=dim, dtype="i64")


def _norm_index(ctx, idx: Value, n: int) -> Ex:
    i = Ex(ctx, convert(ctx, idx, dtypes.i64))
    return i.where(i.cmp("GE", 0), i + n)


def _strides(shape) -> list[int]:
    return [D.prod(shape[i + 1:]) for i in range(len(shape))]


def _to_last(ctx, x: Value, axis: int) -> tuple[Value, tuple]:
    r = x.type.rank
    perm = tuple(i for i in range(r) if i != axis) + (axis,)
    return (x if axis == r - 1 else ctx.add("transpose", x, permutation=perm)), perm


def _from_last(ctx, y: Value, perm: tuple) -> Value:
    if perm == tuple(range(len(perm))):
        return y
    inv = tuple(int(i) for i in np.argsort(perm))
    return ctx.add("transpose", y, permutation=inv)


# ------------------------------------------------------------------ GatherND

@register("GatherND")
def _gather_nd(ctx, ins, at):
    data, idx = ins
    b = at.get("batch_dims", 0)
    k = idx.shape[-1]
    inner = data.shape[b:b + k]
    rest = data.shape[b + k:]
    lead = idx.shape[:-1]
    lin = None
    for j, st in enumerate(_strides(inner)):
        start, limit = [0] * idx.type.rank, list(idx.shape)
        start[-1], limit[-1] = j, j + 1
        col = reshape(ctx, ctx.add("slice", idx, start=tuple(start), limit=tuple(limit),
                                   stride=(1,) * idx.type.rank), lead)
        term = _norm_index(ctx, col, inner[j]) * st
        lin = term if lin is None else lin + term
    if lin is None:
        lin = Ex(ctx, scalar(ctx, 0, dtypes.i64, lead))
    kk = D.prod(inner)
    for d, st in enumerate(_strides(data.shape[:b])):
        lin = lin + Ex(ctx, _iota(ctx, lead, d)) * (st * kk)
    flat = reshape(ctx, data, (D.prod(data.shape[:b + k]),) + rest)
    return ctx.add("gather", flat, lin.v, axis=0)


# ------------------------------------------------------------------ scatter

_SCATTER_REDUCE = ("none", "add", "mul", "max", "min")


def _scatter_check(at, node, opset, dtype_of):
    if at.get("reduction", "none") not in _SCATTER_REDUCE:
        return f"reduction={at['reduction']!r} (supported: {', '.join(_SCATTER_REDUCE)})"


def _scatter_flat(ctx, data: Value, target: Ex, updates: Value, reduction: str) -> Value:
    """data with flat positions `target` (i64, updates' shape) set / combined with `updates`."""
    n, m = data.type.size, updates.type.size
    df = reshape(ctx, data, (n,))
    uf = reshape(ctx, updates, (m,))
    tf = reshape(ctx, target.v, (m,))
    grid = (n, m)
    hit = ctx.add("compare", ctx.add("broadcast_in_dim", tf, shape=grid, broadcast_dimensions=(1,)),
                  _iota(ctx, grid, 0), direction="EQ")
    if reduction == "none":
        pos = Ex(ctx, _iota(ctx, grid, 1)).where(hit, -1)
        last = Ex(ctx, ctx.add("reduce", pos.v, axes=(1,), kind="max"))
        val = ctx.add("gather", uf, last.max(0).v, axis=0)
        out = ctx.add("select", last.cmp("GE", 0), val, df)
    else:
        dt = data.dtype
        wide = dt if dt != dtypes.boolean else dtypes.u8
        ub = ctx.add("broadcast_in_dim", convert(ctx, uf, wide), shape=grid, broadcast_dimensions=(1,))
        if reduction == "add":
            ident, kind, comb = 0, "sum", "add"
        elif reduction == "mul":
            ident, kind, comb = 1, "prod", "mul"
        else:
            info = np.finfo(np.float32) if wide.is_float else np.iinfo(wide.np)
            big = np.inf if wide.is_float else info.max
            ident = -big if reduction == "max" else big
            kind = comb = reduction
        part = ctx.add("reduce", ctx.add("select", hit, ub, scalar(ctx, ident, wide, grid)), axes=(1,), kind=kind)
        out = convert(ctx, ctx.add(comb, convert(ctx, df, wide), part), dt)
    return reshape(ctx, out, data.shape)


@register("ScatterElements", "Scatter", check=_scatter_check)
def _scatter_elements(ctx, ins, at):
    data, idx, upd = ins
    axis = norm_axis(ctx, at.get("axis", 0), data.type.rank)
    lin = None
    for d, st in enumerate(_strides(data.shape)):
        term = (_norm_index(ctx, idx, data.shape[d]) if d == axis else Ex(ctx, _iota(ctx, idx.shape, d))) * st
        lin = term if lin is None else lin + term
    return _scatter_flat(ctx, data, lin, upd, at.get("reduction", "none"))


@register("ScatterND", check=_scatter_check)
def _scatter_nd(ctx, ins, at):
    data, idx, upd = ins
    k = idx.shape[-1]
    lead = idx.shape[:-1]
    rest = data.shape[k:]
    rsize = D.prod(rest)
    lin = Ex(ctx, scalar(ctx, 0, dtypes.i64, lead))
    for j, st in enumerate(_strides(data.shape[:k])):
        start, limit = [0] * idx.type.rank, list(idx.shape)
        start[-1], limit[-1] = j, j + 1
        col = reshape(ctx, ctx.add("slice", idx, start=tuple(start), limit=tuple(limit),
                                   stride=(1,) * idx.type.rank), lead)
        lin = lin + _norm_index(ctx, col, data.shape[j]) * (st * rsize)
    full = lead + rest
    target = Ex(ctx, ctx.add("broadcast_in_dim", lin.v, shape=full, broadcast_dimensions=tuple(range(len(lead)))))
    if rest:
        target = target + ctx.add("broadcast_in_dim", ctx.const(np.arange(rsize, dtype=np.int64).reshape(rest)),
                                  shape=full, broadcast_dimensions=tuple(range(len(lead), len(full))))
    return _scatter_flat(ctx, data, target, upd, at.get("reduction", "none"))


# ------------------------------------------------------------------ TopK / CumSum

@register("TopK")
def _top_k(ctx, ins, at):
    x = ins[0]
    k = int(np.asarray(ctx.static(ins[1], "K")).reshape(-1)[0]) if ctx.opset >= 10 else at["k"]
    axis = norm_axis(ctx, at.get("axis", -1), x.type.rank)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ctx.model_error(f"K={k} out of range for axis of size {n}")
    xl, perm = _to_last(ctx, x, axis)
    lead = xl.shape[:-1]
    grid = lead + (n, n)                      # [..., i, j]: does element j beat element i?
    r = len(lead)
    xi = Ex(ctx, ctx.add("broadcast_in_dim", xl, shape=grid, broadcast_dimensions=tuple(range(r)) + (r,)))
    xj = Ex(ctx, ctx.add("broadcast_in_dim", xl, shape=grid, broadcast_dimensions=tuple(range(r)) + (r + 1,)))
    better = xj.cmp("GT" if at.get("largest", 1) else "LT", xi.v)
    tie = ctx.add("and", xj.cmp("EQ", xi.v), Ex(ctx, _iota(ctx, grid, r + 1)).cmp("LT", _iota(ctx, grid, r)))
    beats = convert(ctx, ctx.add("or", better, tie), dtypes.i64)
    rank = ctx.add("reduce", beats, axes=(r + 1,), kind="sum")                # lead + (n,)
    sel = lead + (k, n)                                                       # [..., slot, i]
    rank_b = Ex(ctx, ctx.add("broadcast_in_dim", rank, shape=sel, broadcast_dimensions=tuple(range(r)) + (r + 1,)))
    who = Ex(ctx, _iota(ctx, sel, r + 1)).where(rank_b.cmp("EQ", _iota(ctx, sel, r)), -1)
    idx = ctx.add("reduce", who.v, axes=(r + 1,), kind="max")                 # lead + (k,)
    vals = _gather_elements(ctx, [xl, idx], {"axis": r})
    return [_from_last(ctx, vals, perm), _from_last(ctx, idx, perm)]


@register("CumSum")
def _cumsum(ctx, ins, at):
    return _cumulative(ctx, ins, at, "sum", 0)


@register("CumProd")
def _cumprod(ctx, ins, at):
    return _cumulative(ctx, ins, at, "prod", 1)


def _cumulative(ctx, ins, at, kind: str, identity):
    """A masked reduction over the axis (mask[i, j] = j contributes to i), O(n^2) per row."""
    x = ins[0]
    axis = norm_axis(ctx, int(np.asarray(ctx.static(ins[1], "axis")).reshape(-1)[0]), x.type.rank)
    n = x.shape[axis]
    xl, perm = _to_last(ctx, x, axis)
    lead = xl.shape[:-1]
    r = len(lead)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    rev, exc = at.get("reverse", 0), at.get("exclusive", 0)
    mask = (j >= i if rev else j <= i) & ((j != i) if exc else True)
    grid = lead + (n, n)
    xb = ctx.add("broadcast_in_dim", xl, shape=grid, broadcast_dimensions=tuple(range(r)) + (r + 1,))
    m = ctx.add("broadcast_in_dim", ctx.const(mask), shape=grid, broadcast_dimensions=(r, r + 1))
    y = ctx.add("reduce", ctx.add("select", m, xb, scalar(ctx, identity, x.dtype, grid)), axes=(r + 1,),
                kind=kind)
    return _from_last(ctx, y, perm)


# ------------------------------------------------------------------ data-dependent shapes (constant only)

@register("Compress")
def _compress(ctx, ins, at):
    x, cond = ins
    c = np.asarray(ctx.static(cond, "condition")).reshape(-1).astype(bool)
    if "axis" not in at:
        x, axis = reshape(ctx, x, (x.type.size,)), 0
    else:
        axis = norm_axis(ctx, at["axis"], x.type.rank)
    keep = np.nonzero(c[:x.shape[axis]])[0].astype(np.int64)
    return ctx.add("gather", x, ctx.const(keep), axis=axis)


@register("NonZero")
def _nonzero(ctx, ins, at):
    v = ctx.maybe_static(ins[0])
    if v is None:
        raise ctx.fail("the output shape depends on the input's values; aotc shapes are static, so "
                       "NonZero is supported only on constants")
    return ctx.const(np.array(np.nonzero(v), dtype=np.int64))


@register("ReverseSequence")
def _reverse_sequence(ctx, ins, at):
    x = ins[0]
    lens = np.asarray(ctx.static(ins[1], "sequence_lens")).astype(np.int64)
    ta, ba = at.get("time_axis", 0), at.get("batch_axis", 1)
    t = np.arange(x.shape[ta])[:, None]
    ln = lens[None, :]
    src = np.where(t < ln, ln - 1 - t, t)                       # (T, B)
    if ta > ba:
        src = src.T
    shape = [1] * x.type.rank
    shape[ta], shape[ba] = x.shape[ta], x.shape[ba]
    idx = np.broadcast_to(src.reshape(shape), x.shape).astype(np.int64)
    return _gather_elements(ctx, [x, ctx.const(np.ascontiguousarray(idx))], {"axis": ta})


@register("CenterCropPad")
def _center_crop_pad(ctx, ins, at):
    x = ins[0]
    r = x.type.rank
    target = ctx.static_ints(ins[1], "shape")
    axes = [norm_axis(ctx, a, r) for a in at.get("axes", range(r))]
    start, limit = [0] * r, list(x.shape)
    lo, hi = [0] * r, [0] * r
    for a, t in zip(axes, target):
        d = x.shape[a]
        if t < d:
            start[a] = (d - t) // 2
            limit[a] = start[a] + t
        elif t > d:
            lo[a] = (t - d) // 2
            hi[a] = t - d - lo[a]
    if (start, limit) != ([0] * r, list(x.shape)):
        x = ctx.add("slice", x, start=tuple(start), limit=tuple(limit), stride=(1,) * r)
    if any(lo) or any(hi):
        x = ctx.add("pad", x, scalar(ctx, 0, x.dtype), low=tuple(lo), high=tuple(hi))
    return x


@register("MaxUnpool")
def _max_unpool(ctx, ins, at):
    """Zeros of the unpooled shape with X scattered to the flat positions I (MaxPool's Indices).

    I indexes the default unpooled shape (from kernel, strides, pads); an explicit
    output_shape keeps each element's coordinates and re-linearizes them.
    """
    x, idx = ins[0], ins[1]
    nsp = x.type.rank - 2
    k, st = at["kernel_shape"], at.get("strides", [1] * nsp)
    pads = at.get("pads", [0] * 2 * nsp)
    default = x.shape[:2] + tuple((d - 1) * s + kk - pads[i] - pads[i + nsp]
                                  for i, (d, s, kk) in enumerate(zip(x.shape[2:], st, k)))
    shape = default
    target = Ex(ctx, idx)
    if len(ins) > 2 and ins[2] is not None:
        shape = tuple(int(d) for d in np.asarray(ctx.static(ins[2], "output_shape")).reshape(-1))
        if shape != default:
            lin = None
            for d, (dd, sd, so) in enumerate(zip(default, _strides(default), _strides(shape))):
                coord = ctx.add("rem", ctx.add("div", idx, scalar(ctx, sd, idx.dtype, idx.shape)),
                                scalar(ctx, dd, idx.dtype, idx.shape))
                term = ctx.add("mul", coord, scalar(ctx, so, idx.dtype, idx.shape))
                lin = term if lin is None else ctx.add("add", lin, term)
            target = Ex(ctx, lin)
    return _scatter_flat(ctx, scalar(ctx, 0, x.dtype, shape), target, x, "none")


# ------------------------------------------------------------------ TensorScatter (KV-cache update)

def _tensor_scatter_check(at, node, opset, dtype_of):
    if at.get("mode", "linear") not in ("linear", "circular"):
        return f"mode={at['mode']!r} (supported: 'linear', 'circular')"


@register("TensorScatter", check=_tensor_scatter_check)
def _tensor_scatter(ctx, ins, at):
    """present[b, .., s, ..] = update[b, .., s - w[b], ..] where 0 <= s - w[b] < S, else past.

    s - w[b] is taken modulo the cache length in circular mode. Every cache
    element computes which update element (if any) lands on it and reads it
    through one flat gather, so the work is O(cache size) whatever S is.
    """
    past, upd = ins[0], ins[1]
    r = past.type.rank
    axis = norm_axis(ctx, at.get("axis", -2), r)
    if axis == 0:
        raise ctx.model_error("axis 0 is the batch axis; the sequence axis must come after it")
    shape = past.shape
    if upd.type.rank != r or any(u != p for i, (u, p) in enumerate(zip(upd.shape, shape)) if i != axis) \
            or upd.shape[axis] > shape[axis]:
        raise ctx.model_error(f"update {upd.type} does not fit past_cache {past.type} along axis {axis}")
    b, q = shape[0], D.prod(shape[1:axis])
    m, s, rest = shape[axis], upd.shape[axis], D.prod(shape[axis + 1:])
    grid = (b, q, m, rest)
    if len(ins) > 2 and ins[2] is not None:
        w = ctx.add("broadcast_in_dim", convert(ctx, reshape(ctx, ins[2], (b,)), dtypes.i64), shape=grid,
                    broadcast_dimensions=(0,))
    else:
        w = scalar(ctx, 0, dtypes.i64, grid)
    k = Ex(ctx, _iota(ctx, grid, 2)) - w                        # the update row landing on cache row s
    if at.get("mode", "linear") == "circular":
        k = Ex(ctx, ctx.add("rem", (Ex(ctx, ctx.add("rem", k.v, scalar(ctx, m, dtypes.i64, grid))) + m).v,
                            scalar(ctx, m, dtypes.i64, grid)))
    hit = ctx.add("and", k.cmp("GE", 0), k.cmp("LT", s))
    row = Ex(ctx, ctx.add("clamp", scalar(ctx, 0, dtypes.i64, grid), k.v, scalar(ctx, s - 1, dtypes.i64, grid)))
    flat = ((Ex(ctx, _iota(ctx, grid, 0)) * q + _iota(ctx, grid, 1)) * s + row) * rest + _iota(ctx, grid, 3)
    taken = ctx.add("gather", reshape(ctx, upd, (upd.type.size,)), flat.v, axis=0)
    return reshape(ctx, ctx.add("select", hit, taken, reshape(ctx, past, grid)), shape)
