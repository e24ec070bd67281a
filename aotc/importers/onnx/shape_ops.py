"""ONNX converters for constants and shape / data-movement ops (Reshape, Slice, Gather, Pad, ...).

Same conventions as ops.py, which holds the table and the helpers. ONNX
passes shapes, axes and pads as tensors; these converters read them with
`ctx.static(...)`, since aotc shapes are static.
"""
from __future__ import annotations

import math

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import broadcast_to, convert, norm_axis, register, reshape, reverse, scalar
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.graph import Value


# ------------------------------------------------------------------ constants and shapes

def _constant_check(at, node, opset, dtype_of):
    bad = [k for k in at if k not in ("value", "value_float", "value_floats", "value_int", "value_ints")]
    if bad:
        return f"attribute '{bad[0]}' is not supported"


@register("Constant", check=_constant_check)
def _constant(ctx, ins, at):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    if "value" in at:
        a = at["value"]
        dt = dtypes.from_numpy(a.dtype) if a.dtype in [d.np for d in ONNX_DTYPES.values()] else None
        if dt is None:
            raise ctx.fail(f"constant of dtype {a.dtype} is not supported")
        return ctx.const(a, dt)
    kind = next(iter(at))
    dt = dtypes.f32 if "float" in kind else dtypes.i64
    return ctx.const(np.array(at[kind], dt.np), dt)


def _sizes(ctx, values) -> Value:
    """A 1-D i64 tensor of sizes: a constant, or `dim_values` where some are dynamic."""
    if all(D.is_static(x) for x in values):
        return ctx.const(np.array(values, np.int64), dtypes.i64)
    return ctx.add("dim_values", values=tuple(values))


@register("Shape")
def _shape(ctx, ins, at):
    shape = ins[0].shape
    return _sizes(ctx, list(shape[at.get("start", 0):at.get("end", len(shape))]))


@register("Size")
def _size(ctx, ins, at):
    size = ins[0].type.size
    if D.is_static(size):
        return ctx.const(np.array(size, np.int64), dtypes.i64)
    return reshape(ctx, _sizes(ctx, [size]), [])


@register("ConstantOfShape")
def _constant_of_shape(ctx, ins, at):
    shape = ctx.static_ints(ins[0], "shape")
    value = at.get("value", np.zeros(1, np.float32))
    return broadcast_to(ctx, ctx.const(value.reshape(())), shape)


@register("Range")
def _range(ctx, ins, at):
    start, limit, delta = (np.asarray(ctx.static(v, name)).item() for v, name in zip(ins, ("start", "limit", "delta")))
    dt = ins[0].dtype
    if all(D.is_static(x) for x in (start, limit, delta)):
        n = max(int(math.ceil((limit - start) / delta)), 0)
        return ctx.const((start + np.arange(n) * delta).astype(dt.np), dt)
    if not (D.is_static(delta) and delta > 0 and not dt.is_float):     # positions 0..seq, past..past+seq
        raise ctx.fail("a Range with dynamic bounds needs an integer type and a constant positive delta")
    n = D.dmax(D.ceildiv(limit - start, int(delta)), 0)
    ramp = Ex(ctx, ctx.add("iota", shape=(n,), dimension=0, dtype=dt.name)) * int(delta)
    if D.is_static(start) and start == 0:
        return ramp.v
    first = convert(ctx, reshape(ctx, _sizes(ctx, [start]), ()), dt)
    return (ramp + Ex(ctx, broadcast_to(ctx, first, (n,)))).v


@register("Reshape")
def _reshape(ctx, ins, at):
    x = ins[0]
    shape = list(at["shape"]) if ctx.opset < 5 else ctx.static_ints(ins[1], "shape")
    if not at.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if -1 in shape:
        known = D.prod([d for d in shape if not (D.is_static(d) and d == -1)])
        rest = D.mod(x.type.size, known) if not (D.is_static(known) and known == 0) else 1
        if not D.is_static(rest):
            raise ctx.fail(f"reshape of {x.type} to {shape}: whether the dims divide depends on the "
                           f"dynamic dims' values")
        if rest:
            raise ctx.model_error(f"cannot reshape {x.type} to {shape}")
        shape[shape.index(-1)] = D.floordiv(x.type.size, known)
    if D.prod(shape) != x.type.size:
        raise ctx.model_error(f"cannot reshape {x.type} to {shape}")
    return reshape(ctx, x, shape)


@register("Flatten")
def _flatten(ctx, ins, at):
    x = ins[0]
    axis = at.get("axis", 1)
    axis = axis + x.type.rank if axis < 0 else axis   # in [-r, r]
    return reshape(ctx, x, (D.prod(x.shape[:axis]), D.prod(x.shape[axis:])))


def _axes_arg(ctx, ins, at, since: int):
    """Axes given as an attribute before opset `since`, as an optional input after."""
    if ctx.opset < since:
        return at.get("axes")
    return ctx.static_ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None


@register("Squeeze")
def _squeeze(ctx, ins, at):
    x = ins[0]
    axes = _axes_arg(ctx, ins, at, 13)
    axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else [norm_axis(ctx, a, x.type.rank) for a in axes]
    if any(x.shape[a] != 1 for a in axes):
        raise ctx.model_error(f"cannot squeeze axes {axes} of {x.type}")
    return reshape(ctx, x, [d for i, d in enumerate(x.shape) if i not in axes])


@register("Unsqueeze")
def _unsqueeze(ctx, ins, at):
    x = ins[0]
    axes = _axes_arg(ctx, ins, at, 13) or []
    r = x.type.rank + len(axes)
    axes = sorted(norm_axis(ctx, a, r) for a in axes)
    dims = iter(x.shape)
    return reshape(ctx, x, [1 if i in axes else next(dims) for i in range(r)])


@register("Transpose")
def _transpose(ctx, ins, at):
    x = ins[0]
    perm = tuple(at.get("perm", range(x.type.rank - 1, -1, -1)))
    return x if perm == tuple(range(x.type.rank)) else ctx.add("transpose", x, permutation=perm)


@register("Concat")
def _concat(ctx, ins, at):
    xs = [v for v in ins if v is not None]
    axis = norm_axis(ctx, at["axis"], xs[0].type.rank)
    return xs[0] if len(xs) == 1 else ctx.add("concatenate", *xs, dimension=axis)


@register("Slice")
def _slice(ctx, ins, at):
    x = ins[0]
    r = x.type.rank
    if ctx.opset < 10:
        starts, ends = at["starts"], at["ends"]
        axes, steps = at.get("axes"), None
    else:
        starts, ends = ctx.static_ints(ins[1], "starts"), ctx.static_ints(ins[2], "ends")
        axes = ctx.static_ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
        steps = ctx.static_ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    start, limit, stride, rev = [0] * r, list(x.shape), [1] * r, []
    for s, e, a, k in zip(starts, ends, axes, steps):
        a = norm_axis(ctx, a, r)
        d = x.shape[a]
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if k == 0:
            raise ctx.model_error("slice step 0")
        if k > 0:
            s, e = D.dmin(D.dmax(s, 0), d), D.dmin(D.dmax(e, 0), d)
            start[a], limit[a], stride[a] = s, D.dmax(s, e), k
        else:   # negative step: slice the covered range ascending, then reverse it
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            n = (s - e - k - 1) // -k if s > e else 0
            start[a], limit[a], stride[a] = (s + (n - 1) * k, s + 1, -k) if n else (0, 0, 1)
            rev.append(a)
    out = x
    if (start, limit, stride) != ([0] * r, list(x.shape), [1] * r):
        out = ctx.add("slice", x, start=tuple(start), limit=tuple(limit), stride=tuple(stride))
    for a in rev:
        out = reverse(ctx, out, a)
    return out


@register("Gather")
def _gather(ctx, ins, at):
    data, idx = ins
    axis = norm_axis(ctx, at.get("axis", 0), data.type.rank)
    known, n = ctx.b.constants.get(idx), data.shape[axis]     # constant indices (computed ones: clamped)
    if known is not None and np.any((known < -n) | (known >= n)):   # ONNX: an error; kernels would clamp
        bad = int(np.asarray(known)[(known < -n) | (known >= n)].flat[0])
        raise ctx.model_error(f"index {bad} is out of range for axis {axis} of size {n}")
    return ctx.add("gather", data, idx, axis=axis)


def _iota(ctx, shape, axis: int) -> Ex:
    return Ex(ctx, ctx.add("iota", shape=tuple(shape), dimension=axis, dtype="i64"))


@register("GatherElements")
def _gather_elements(ctx, ins, at):
    """A gather on the flattened data at linear indices built from iotas and the given indices."""
    data, idx = ins
    axis = norm_axis(ctx, at.get("axis", 0), data.type.rank)
    n = data.shape[axis]
    i = Ex(ctx, convert(ctx, idx, dtypes.i64))
    i = i.where(i.cmp("GE", 0), i + n)
    strides = np.cumprod((data.shape[1:] + (1,))[::-1])[::-1]
    lin = None
    for d, st in enumerate(strides):
        term = (i if d == axis else _iota(ctx, idx.shape, d)) * int(st)
        lin = term if lin is None else lin + term
    flat = reshape(ctx, data, (data.type.size,))
    return ctx.add("gather", flat, lin.v, axis=0)


@register("Trilu")
def _trilu(ctx, ins, at):
    x = ins[0]
    h, w = x.shape[-2:]
    if D.is_static(h) and D.is_static(w):
        diag = ctx.const(np.arange(w)[None, :] - np.arange(h)[:, None], dtypes.i64)   # col - row
    else:      # a dynamic matrix: col - row from iotas
        diag = (Ex(ctx, ctx.add("iota", shape=(h, w), dimension=1, dtype="i64"))
                - Ex(ctx, ctx.add("iota", shape=(h, w), dimension=0, dtype="i64"))).v
    k = ins[1] if len(ins) > 1 and ins[1] is not None else ctx.const(np.array(0, np.int64), dtypes.i64)
    k = broadcast_to(ctx, reshape(ctx, convert(ctx, k, dtypes.i64), ()), (h, w))
    keep = ctx.add("compare", diag, k, direction="GE" if at.get("upper", 1) else "LE")
    keep = broadcast_to(ctx, keep, x.shape)
    return ctx.add("select", keep, x, scalar(ctx, 0, x.dtype, x.shape))


@register("OneHot")
def _one_hot(ctx, ins, at):
    idx, depth, values = ins
    d = int(np.asarray(ctx.static(depth, "depth")).item())
    axis = norm_axis(ctx, at.get("axis", -1), idx.type.rank + 1)
    shape = idx.shape[:axis] + (d,) + idx.shape[axis:]
    i = Ex(ctx, convert(ctx, idx, dtypes.i64))
    i = Ex(ctx, ctx.add("broadcast_in_dim", i.where(i.cmp("GE", 0), i + d).v, shape=shape,
                        broadcast_dimensions=tuple(a for a in range(len(shape)) if a != axis)))
    hit = i.cmp("EQ", _iota(ctx, shape, axis))
    off, on = (broadcast_to(ctx, reshape(ctx, ctx.add("slice", values, start=(k,), limit=(k + 1,), stride=(1,)), ()),
                            shape) for k in (0, 1))
    return ctx.add("select", hit, on, off)


@register("Expand")
def _expand(ctx, ins, at):
    x = ins[0]
    shape = ctx.static_ints(ins[1], "shape")
    try:
        out = D.broadcast_shapes(x.shape, tuple(shape))
    except D.DynamicDecisionError as e:
        raise ctx.fail(str(e)) from None
    except ValueError:
        raise ctx.model_error(f"cannot expand {x.type} to {shape}") from None
    return broadcast_to(ctx, x, out)


@register("Tile")
def _tile(ctx, ins, at):
    x = ins[0]
    reps = ctx.static_ints(ins[1], "repeats")
    big = tuple(v for r, d in zip(reps, x.shape) for v in (r, d))
    y = ctx.add("broadcast_in_dim", x, shape=big, broadcast_dimensions=tuple(range(1, 2 * x.type.rank, 2)))
    return reshape(ctx, y, [r * d for r, d in zip(reps, x.shape)])


@register("Split")
def _split(ctx, ins, at):
    x = ins[0]
    axis = norm_axis(ctx, at.get("axis", 0), x.type.rank)
    d = x.shape[axis]
    sizes = at.get("split") if ctx.opset < 13 else (
        ctx.static_ints(ins[1], "split") if len(ins) > 1 and ins[1] is not None else None)
    if sizes is None:
        n = at.get("num_outputs", len(ctx.node.output))
        chunk = -(-d // n)
        sizes = [min(chunk, d - i * chunk) for i in range(n)]
    if sum(sizes) != d:
        raise ctx.model_error(f"split sizes {sizes} do not add up to dim {axis} of {x.type}")
    outs, off = [], 0
    for s in sizes:
        start, limit = [0] * x.type.rank, list(x.shape)
        start[axis], limit[axis] = off, off + s
        outs.append(ctx.add("slice", x, start=tuple(start), limit=tuple(limit), stride=(1,) * x.type.rank))
        off += s
    return outs


def _pad_check(at, node, opset, dtype_of):
    if at.get("mode", "constant") not in ("constant", "reflect", "edge", "wrap"):
        return f"mode='{at['mode']}'"


def _pad_index(mode: str, lo: int, hi: int, d: int) -> np.ndarray:
    i = np.arange(-lo, d + hi)
    if mode == "edge":
        return np.clip(i, 0, d - 1)
    if mode == "wrap":
        return i % d
    m = max(2 * (d - 1), 1)
    i = i % m
    return np.where(i >= d, m - i, i)


@register("Pad", check=_pad_check)
def _pad(ctx, ins, at):
    x = ins[0]
    r = x.type.rank
    mode = at.get("mode", "constant")
    if ctx.opset < 11:
        pads, value = list(at.get("pads", at.get("paddings"))), at.get("value", 0.0)
    else:
        pads = ctx.static_ints(ins[1], "pads")
        value = ins[2] if len(ins) > 2 and ins[2] is not None else 0
    axes = None
    if len(ins) > 3 and ins[3] is not None:
        axes = [norm_axis(ctx, a, r) for a in ctx.static_ints(ins[3], "axes")]
    if len(pads) != 2 * len(axes or range(r)):
        raise ctx.model_error(f"pads has {len(pads)} values, expected {2 * len(axes or range(r))} "
                              f"(a start and an end per {'listed axis' if axes else 'dim'})")
    if axes is not None:
        full = [0] * (2 * r)
        for j, a in enumerate(axes):
            full[a], full[r + a] = pads[j], pads[len(axes) + j]
        pads = full
    lo, hi = pads[:r], pads[r:]
    if mode != "constant":
        for a in range(r):
            if lo[a] or hi[a]:
                x = ctx.add("gather", x, ctx.const(_pad_index(mode, lo[a], hi[a], x.shape[a])), axis=a)
        return x
    pv = reshape(ctx, value, ()) if isinstance(value, Value) else scalar(ctx, value, x.dtype)
    if any(p > 0 for p in pads):
        x = ctx.add("pad", x, pv, low=tuple(max(p, 0) for p in lo), high=tuple(max(p, 0) for p in hi))
    if any(p < 0 for p in pads):
        start = tuple(-min(p, 0) for p in lo)
        limit = tuple(d + min(p, 0) for d, p in zip(x.shape, hi))
        x = ctx.add("slice", x, start=start, limit=limit, stride=(1,) * r)
    return x


@register("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx, ins, at):
    x, bs = ins[0], at["blocksize"]
    n, c, h, w = x.shape
    if ctx.op_type == "SpaceToDepth":
        y = reshape(ctx, x, (n, c, h // bs, bs, w // bs, bs))
        perm = (0, 1, 3, 5, 2, 4) if at.get("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
        y = ctx.add("transpose", y, permutation=perm)
        return reshape(ctx, y, (n, c * bs * bs, h // bs, w // bs))
    if at.get("mode", "DCR") == "DCR":
        y, perm = reshape(ctx, x, (n, bs, bs, c // bs ** 2, h, w)), (0, 3, 4, 1, 5, 2)
    else:
        y, perm = reshape(ctx, x, (n, c // bs ** 2, bs, bs, h, w)), (0, 1, 4, 2, 5, 3)
    y = ctx.add("transpose", y, permutation=perm)
    return reshape(ctx, y, (n, c // bs ** 2, h * bs, w * bs))
