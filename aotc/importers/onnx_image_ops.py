"""ONNX image ops that move pixels by computed positions: Col2Im and GridSample.

Col2Im (the inverse of im2col, a transposed convolution's last step) is a
static scatter-add: which column lands on which pixel depends only on shapes
and attributes. Inverted, it is a gather: every pixel gathers, for each
kernel offset, the one column that lands on it (or a zero column when none
does) and sums over the offsets. One pad, one gather and one reduce, with the
index table computed here with numpy.

GridSample samples X at positions given by a runtime tensor (the grid), so
its indices are computed in the graph: unnormalize the grid to pixel
coordinates, fold them into range (padding_mode border/reflection), take the
taps of the interpolation (nearest: 1 per axis, linear: 2, cubic: 4), clamp
each tap's index for the gather and zero the taps that fall outside
(padding_mode zeros). X is gathered through one flat index per tap, so every
batch and channel reads its own pixel.
"""
from __future__ import annotations

import itertools

import numpy as np

from aotc.importers.onnx_ops import Ex, convert, register, reshape, scalar
from aotc.ir import dtypes

# ------------------------------------------------------------------ Col2Im


def _col2im_index(image, block, dil, pads, strides):
    """(K, P) flat column indices: pixel p takes column idx[k, p] of kernel offset k (K * L: none).

    Columns are numbered k * L + l over the (K, L) layout of Col2Im's input.
    """
    nd = len(image)
    blocks = [(image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(nd)]
    if any(b < 1 for b in blocks):
        return None, blocks
    n_k, n_l, n_p = int(np.prod(block)), int(np.prod(blocks)), int(np.prod(image))
    idx = np.full((n_k, n_p), n_k * n_l, np.int64)
    cols = np.indices(blocks).reshape(nd, -1)                      # (nd, L): each column's block position
    for k, off in enumerate(itertools.product(*(range(b) for b in block))):
        pix = [cols[i] * strides[i] - pads[i] + off[i] * dil[i] for i in range(nd)]
        inside = np.all([(p >= 0) & (p < image[i]) for i, p in enumerate(pix)], axis=0)
        flat = np.ravel_multi_index([p[inside] for p in pix], image)
        idx[k, flat] = k * n_l + np.nonzero(inside)[0]
    return idx, blocks


@register("Col2Im")
def _col2im(ctx, ins, at):
    x = ins[0]
    image = ctx.static_ints(ins[1], "image_shape")
    block = ctx.static_ints(ins[2], "block_shape")
    nd = len(image)
    dil = at.get("dilations", [1] * nd)
    pads = at.get("pads", [0] * 2 * nd)
    strides = at.get("strides", [1] * nd)
    if x.type.rank != 3 or len(block) != nd:
        raise ctx.model_error(f"input {x.type} must be (N, C * prod(block_shape), L) with "
                              f"block_shape {block} of image_shape's rank {nd}")
    n, ck, n_l = x.shape
    n_k = int(np.prod(block))
    idx, blocks = _col2im_index(image, block, dil, pads, strides)
    if idx is None or ck % n_k or int(np.prod(blocks)) != n_l:
        raise ctx.model_error(f"input {x.type} does not match image_shape {image}, block_shape {block}, "
                              f"dilations {dil}, pads {pads}, strides {strides} (sliding blocks {blocks})")
    c = ck // n_k
    cols = reshape(ctx, x, (n, c, n_k * n_l))
    cols = ctx.add("pad", cols, scalar(ctx, 0, x.dtype), low=(0, 0, 0), high=(0, 0, 1))   # the zero column
    taps = ctx.add("gather", cols, ctx.const(idx), axis=2)                                # (N, C, K, P)
    wide = dtypes.f32 if x.dtype in (dtypes.f16, dtypes.bf16) else x.dtype
    y = ctx.add("reduce", convert(ctx, taps, wide), axes=(2,), kind="sum")
    return reshape(ctx, convert(ctx, y, x.dtype), (n, c, *image))


# ------------------------------------------------------------------ GridSample

_MODES = {"bilinear": "linear", "linear": "linear", "bicubic": "cubic", "cubic": "cubic", "nearest": "nearest"}
_PADDING = ("zeros", "border", "reflection")
_CUBIC_A = -0.75


def _grid_sample_check(at, node, opset, dtype_of):
    if at.get("mode", "linear") not in _MODES:
        return f"mode={at['mode']!r} (supported: {', '.join(_MODES)})"
    if at.get("padding_mode", "zeros") not in _PADDING:
        return f"padding_mode={at['padding_mode']!r} (supported: {', '.join(_PADDING)})"
    dt = dtype_of(node.input[0])
    if dt is not None and not dt.is_float:
        return f"GridSample of {dt} data (float only)"


def _reflect(v: Ex, lo: float, hi: float) -> Ex:
    """v folded back into [lo, hi] by mirroring at the borders as often as needed (v itself inside)."""
    if hi <= lo:   # a one-pixel axis with align_corners: everything maps to it
        return Ex(v.ctx, scalar(v.ctx, lo, v.v.dtype, v.v.shape))
    width = hi - lo
    below = v.cmp("LT", lo)
    outside = v.ctx.add("or", below, v.cmp("GT", hi))
    dist = (lo - v).where(below, v - hi)
    turns = (dist / width).un("floor")
    r = dist - turns * width
    even = (turns - (turns * 0.5).un("floor") * 2.0).cmp("EQ", 0.0)
    from_lo = v.ctx.add("compare", below, even, direction="EQ")   # below with even turns, or above with odd
    return (lo + r).where(from_lo, hi - r).where(outside, v)


def _axis_taps(ctx, v: Ex, d: int, mode: str, padding: str, align: bool):
    """[(index i64, weight f32 or None, valid mask or None)] of one spatial axis at coordinates v.

    Padding applies to each tap's index, as onnxruntime and PyTorch do. For
    linear and nearest this equals the ONNX reference's clamping / mirroring
    of the coordinate first; for cubic with border padding the reference
    differs (it clamps the coordinate) and aotc follows onnxruntime.
    """
    lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
    if mode == "nearest":
        offsets, base, weights = [0], v.un("round_even"), [None]
    else:
        base = v.un("floor")
        t = v - base
        if mode == "linear":
            offsets, weights = [0, 1], [1.0 - t, t]
        else:
            a = _CUBIC_A
            outer = [t + 1.0, 2.0 - t]
            inner = [t, 1.0 - t]
            near = [((s * (a + 2) - (a + 3)) * s * s + 1.0) for s in inner]
            far = [(((s * a - 5 * a) * s + 8 * a) * s - 4 * a) for s in outer]
            offsets, weights = [-1, 0, 1, 2], [far[0], near[0], near[1], far[1]]
    taps = []
    for off, w in zip(offsets, weights):
        i = base + float(off) if off else base
        valid = None
        if padding == "zeros":
            valid = ctx.add("and", i.cmp("GE", 0.0), i.cmp("LE", d - 1.0))
        elif padding == "reflection":
            i = _reflect(i, lo, hi).max(0.0)   # the reference truncates the mirrored index
        i = i.where(i.cmp("EQ", i.v), 0.0)   # a NaN grid value must not become a wild gather index
        i = Ex(ctx, ctx.add("clamp", i._val(0.0), i.v, i._val(d - 1.0)))
        taps.append((convert(ctx, i.un("floor").v, dtypes.i64), w, valid))
    return taps


@register("GridSample", check=_grid_sample_check)
def _grid_sample(ctx, ins, at):
    x, grid = ins
    r = x.type.rank - 2
    n, c, space = x.shape[0], x.shape[1], x.shape[2:]
    out = grid.shape[1:-1]
    if r < 1 or grid.type.rank != r + 2 or grid.shape[0] != n or grid.shape[-1] != r:
        raise ctx.model_error(f"grid {grid.type} does not match X {x.type}: expected (N, *out, {r})")
    mode = _MODES[at.get("mode", "linear")]
    padding = at.get("padding_mode", "zeros")
    align = bool(at.get("align_corners", 0))
    g = convert(ctx, grid, dtypes.f32)
    per_axis = []
    for i, d in enumerate(space):           # grid's last component addresses the first spatial axis
        j = r - 1 - i
        comp = ctx.add("slice", g, start=(0,) * (r + 1) + (j,), limit=grid.shape[:-1] + (j + 1,),
                       stride=(1,) * (r + 2))
        u = Ex(ctx, reshape(ctx, comp, (n, *out)))
        v = (u + 1.0) * ((d - 1) / 2) if align else ((u + 1.0) * d - 1.0) * 0.5
        per_axis.append(_axis_taps(ctx, v, d, mode, padding, align))
    strides = [int(np.prod(space[i + 1:])) for i in range(r)]
    y_shape = (n, c, *out)
    to_y = (0,) + tuple(range(2, r + 2))
    plane = Ex(ctx, ctx.add("iota", shape=y_shape, dimension=0, dtype="i64")) * c \
        + ctx.add("iota", shape=y_shape, dimension=1, dtype="i64")
    plane = plane * int(np.prod(space))
    flat_x = reshape(ctx, x, (x.type.size,))
    y = None
    for combo in itertools.product(*per_axis):
        idx, w, valid = None, None, None
        for (i, wi, vi), st in zip(combo, strides):
            term = Ex(ctx, i) * st if st != 1 else Ex(ctx, i)
            idx = term if idx is None else idx + term
            if wi is not None:
                w = wi if w is None else w * wi
            if vi is not None:
                valid = vi if valid is None else ctx.add("and", valid, vi)
        full = plane + ctx.add("broadcast_in_dim", idx.v, shape=y_shape, broadcast_dimensions=to_y)
        val = Ex(ctx, convert(ctx, ctx.add("gather", flat_x, full.v, axis=0), dtypes.f32))
        if w is not None:
            val = val * ctx.add("broadcast_in_dim", w.v, shape=y_shape, broadcast_dimensions=to_y)
        if valid is not None:
            val = val.where(ctx.add("broadcast_in_dim", valid, shape=y_shape, broadcast_dimensions=to_y), 0.0)
        y = val if y is None else y + val
    return convert(ctx, y.v, x.dtype)
