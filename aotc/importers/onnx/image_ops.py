"""ONNX image ops that move pixels by computed positions: Col2Im, GridSample, RoiAlign, DeformConv.

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

RoiAlign is the same gather with the sample positions computed from the
runtime rois: each output bin averages (or maxes) a grid of bilinear samples,
laid out as two trailing axes (R, C, OH, OW, GH, GW) that one reduce folds.
sampling_ratio=0 (adaptive: ceil(roi size / output size) samples per bin)
makes the grid depend on the roi values, so it needs constant rois: the grid
is then sized for the largest roi and the samples a smaller roi lacks are
masked out.

DeformConv is a convolution whose kernel taps are moved by runtime offsets
(and scaled by an optional runtime mask): every tap of every output position
is a bilinear sample of X (the same four clamped gathers, out-of-image taps
weighing nothing), which builds the im2col tensor (N, C, K, OH * OW) in the
graph; one batched dot_general per group contracts it with W.
"""
from __future__ import annotations

import itertools

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import convert, register, reshape, scalar
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.graph import Value

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
    n_k, n_l, n_p = D.prod(block), D.prod(blocks), D.prod(image)
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
    n_k = D.prod(block)
    idx, blocks = _col2im_index(image, block, dil, pads, strides)
    if idx is None or ck % n_k or D.prod(blocks) != n_l:
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
        i = Ex(ctx, ctx.add("clamp", i.lift(0.0), i.v, i.lift(d - 1.0)))
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
    strides = [D.prod(space[i + 1:]) for i in range(r)]
    y_shape = (n, c, *out)
    to_y = (0,) + tuple(range(2, r + 2))
    plane = Ex(ctx, ctx.add("iota", shape=y_shape, dimension=0, dtype="i64")) * c \
        + ctx.add("iota", shape=y_shape, dimension=1, dtype="i64")
    plane = plane * D.prod(space)
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


# ------------------------------------------------------------------ RoiAlign

_ROI_MODES = ("avg", "max")
_ROI_COORDS = ("half_pixel", "output_half_pixel")
_MAX_SAMPLES = 1024        # adaptive sampling: samples per output bin (the grid is a tensor axis)


def _roi_align_check(at, node, opset, dtype_of):
    if at.get("mode", "avg") not in _ROI_MODES:
        return f"mode={at['mode']!r} (supported: {', '.join(_ROI_MODES)})"
    if at.get("coordinate_transformation_mode", "half_pixel") not in _ROI_COORDS:
        return (f"coordinate_transformation_mode={at['coordinate_transformation_mode']!r} "
                f"(supported: {', '.join(_ROI_COORDS)})")


def _roi_bin(starts: Ex, ends: Ex, out: int, half: bool) -> Ex:
    """Per-roi bin size along one axis; an output_half_pixel roi is at least one pixel wide."""
    size = ends - starts
    return (size if half else size.max(1.0)) / float(out)


def _adaptive_grid(ctx, rois: Value, scale: float, off: float, half: bool, out_hw) -> list[np.ndarray]:
    """Per-roi sample counts (GH, GW) of sampling_ratio=0, from constant rois, in the graph's f32 arithmetic."""
    box = ctx.maybe_static(rois)
    if box is None:
        raise ctx.fail("sampling_ratio=0 (adaptive: ceil(roi size / output size) samples per bin, which depends "
                       "on the roi values) needs rois computable at import time; use sampling_ratio > 0")
    pts = box.astype(np.float32) * np.float32(scale) - np.float32(off)
    grids = []
    for axis, out in ((1, out_hw[0]), (0, out_hw[1])):
        size = pts[:, axis + 2] - pts[:, axis]
        if not half:
            size = np.maximum(size, np.float32(1.0))
        grids.append(np.maximum(np.ceil(size / np.float32(out)), 0).astype(np.int64))
    if int(grids[0].max(initial=1)) * int(grids[1].max(initial=1)) > _MAX_SAMPLES:
        raise ctx.fail(f"sampling_ratio=0 gives up to {grids[0].max()} x {grids[1].max()} samples per bin for "
                       f"these rois (at most {_MAX_SAMPLES} supported); use sampling_ratio > 0")
    return grids


def _roi_axis_taps(ctx, start: Ex, bin_size: Ex, out: int, grid, g_max: int, size: int):
    """The two bilinear taps [(index i64, weight f32)] of every sample along one axis, shape (R, out, G).

    Samples outside [-1, size] weigh nothing, those in [-1, 0) read pixel 0 and
    those past size - 1 the last pixel (the reference's border rule); with a
    per-roi `grid` (adaptive), the samples past a roi's own count weigh nothing.
    """
    r = start.v.shape[0]
    shape = (r, out, g_max)

    def per_roi(e):
        return Ex(ctx, ctx.add("broadcast_in_dim", e.v, shape=shape, broadcast_dimensions=(0,)))

    def iota(dim):
        return Ex(ctx, ctx.add("iota", shape=shape, dimension=dim, dtype="f32"))

    n = float(grid) if isinstance(grid, int) else per_roi(Ex(ctx, ctx.const(np.maximum(grid, 1).astype(np.float32))))
    step = per_roi(bin_size)
    pos = per_roi(start) + iota(1) * step + (iota(2) + 0.5) * step / n   # the reference's order of operations
    valid = ctx.add("and", pos.cmp("GE", -1.0), pos.cmp("LE", float(size)))
    if not isinstance(grid, int):
        counts = ctx.add("broadcast_in_dim", ctx.const(grid), shape=shape, broadcast_dimensions=(0,))
        inside = ctx.add("compare", ctx.add("iota", shape=shape, dimension=2, dtype="i64"), counts, direction="LT")
        valid = ctx.add("and", valid, inside)
    at = pos.where(pos.cmp("EQ", pos.v), 0.0).max(0.0).min(size - 1.0)   # NaN: a safe index, zero weight
    low = at.un("floor")
    high = (low + 1.0).min(size - 1.0)
    frac = at - low
    return [(convert(ctx, i.v, dtypes.i64), w.where(valid, 0.0)) for i, w in ((low, 1.0 - frac), (high, frac))]


@register("RoiAlign", check=_roi_align_check)
def _roi_align(ctx, ins, at):
    x, rois, batch = ins
    if x.type.rank != 4 or rois.type.rank != 2 or rois.shape[1] != 4 or batch.shape != rois.shape[:1]:
        raise ctx.model_error(f"X {x.type}, rois {rois.type}, batch_indices {batch.type}: expected "
                              "(N, C, H, W), (R, 4) and (R,)")
    n, c, h, w = x.shape
    r = rois.shape[0]
    oh, ow = int(at.get("output_height", 1)), int(at.get("output_width", 1))
    ratio = int(at.get("sampling_ratio", 0))
    scale = float(at.get("spatial_scale", 1.0))
    # RoiAlign-10 had no coordinate_transformation_mode and behaved as output_half_pixel
    half = at.get("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel") \
        == "half_pixel"
    off = 0.5 if half else 0.0
    box = convert(ctx, rois, dtypes.f32)
    pts = [Ex(ctx, reshape(ctx, ctx.add("slice", box, start=(0, j), limit=(r, j + 1), stride=(1, 1)), (r,)))
           * scale - off for j in range(4)]                                  # x0, y0, x1, y1 in pixels
    bin_h, bin_w = _roi_bin(pts[1], pts[3], oh, half), _roi_bin(pts[0], pts[2], ow, half)
    grid_h, grid_w = (ratio, ratio) if ratio > 0 else _adaptive_grid(ctx, rois, scale, off, half, (oh, ow))
    gh, gw = (ratio, ratio) if ratio > 0 else (max(int(grid_h.max(initial=0)), 1), max(int(grid_w.max(initial=0)), 1))
    taps_y = _roi_axis_taps(ctx, pts[1], bin_h, oh, grid_h, gh, h)
    taps_x = _roi_axis_taps(ctx, pts[0], bin_w, ow, grid_w, gw, w)

    full = (r, c, oh, ow, gh, gw)

    def spread(v: Value, dims) -> Ex:
        return Ex(ctx, ctx.add("broadcast_in_dim", v, shape=full, broadcast_dimensions=dims))

    first = ctx.add("clamp", scalar(ctx, 0, batch.dtype, (r,)), batch, scalar(ctx, n - 1, batch.dtype, (r,)))
    plane = Ex(ctx, ctx.add("broadcast_in_dim", convert(ctx, first, dtypes.i64), shape=(r, c),
                            broadcast_dimensions=(0,))) * c + ctx.add("iota", shape=(r, c), dimension=1, dtype="i64")
    base = spread((plane * (h * w)).v, (0, 1))
    flat_x = reshape(ctx, x, (x.type.size,))
    avg = at.get("mode", "avg") == "avg"
    acc = None
    for (iy, wy), (ix, wx) in itertools.product(taps_y, taps_x):
        idx = base + spread((Ex(ctx, iy) * w).v, (0, 2, 4)) + spread(ix, (0, 3, 5))
        val = Ex(ctx, convert(ctx, ctx.add("gather", flat_x, idx.v, axis=0), dtypes.f32))
        # max mode takes the largest weighted tap, max(w * v), not the largest interpolated sample: the
        # ONNX reference, onnxruntime and the node tests (test_roialign_mode_max) all compute it this way
        term = val * spread(wy.v, (0, 2, 4)) * spread(wx.v, (0, 3, 5))
        acc = term if acc is None else (acc + term if avg else acc.max(term))
    if avg:
        y = Ex(ctx, ctx.add("reduce", acc.v, axes=(4, 5), kind="sum"))
        if ratio > 0:
            return convert(ctx, (y / float(ratio * ratio)).v, x.dtype)
        count = np.maximum(grid_h * grid_w, 1).astype(np.float32)
        return convert(ctx, (y / ctx.add("broadcast_in_dim", ctx.const(count), shape=y.v.shape,
                                           broadcast_dimensions=(0,))).v, x.dtype)
    if ratio > 0:
        return convert(ctx, ctx.add("reduce", acc.v, axes=(4, 5), kind="max"), x.dtype)
    used = np.zeros((r, gh, gw), bool)                     # the samples each roi has, the rest must not win
    for i in range(r):
        used[i, :grid_h[i], :grid_w[i]] = True
    mask = ctx.add("broadcast_in_dim", ctx.const(used), shape=full, broadcast_dimensions=(0, 4, 5))
    y = Ex(ctx, ctx.add("reduce", acc.where(mask, -np.inf).v, axes=(4, 5), kind="max"))
    some = ctx.add("broadcast_in_dim", ctx.const(used.any(axis=(1, 2))), shape=y.v.shape, broadcast_dimensions=(0,))
    return convert(ctx, y.where(some, 0.0).v, x.dtype)   # a roi without samples gives 0, as the reference


# ------------------------------------------------------------------ DeformConv


def _deform_conv_check(at, node, opset, dtype_of):
    if len(at.get("kernel_shape", [0, 0])) != 2:
        return f"{len(at['kernel_shape'])}-D DeformConv (2-D only)"
    dt = dtype_of(node.input[0])
    if dt is not None and not dt.is_float:
        return f"DeformConv of {dt} data (float only)"


def _deform_axis_taps(ctx, p: Ex, size: int):
    """The two bilinear taps [(index i64, weight)] of sample positions p along one axis.

    A tap outside [0, size) weighs nothing (the image is zero outside), as in
    the ONNX reference (GridSample, zeros padding) and onnxruntime.
    """
    low = p.un("floor")
    frac = p - low
    taps = []
    for i, w in ((low, 1.0 - frac), (low + 1.0, frac)):
        valid = ctx.add("and", i.cmp("GE", 0.0), i.cmp("LE", size - 1.0))
        safe = i.where(i.cmp("EQ", i.v), 0.0)   # a NaN offset must not become a wild gather index
        safe = Ex(ctx, ctx.add("clamp", safe.lift(0.0), safe.v, safe.lift(size - 1.0)))
        taps.append((Ex(ctx, convert(ctx, safe.v, dtypes.i64)), w.where(valid, 0.0)))
    return taps


def _deform_columns(ctx, x: Value, py: Ex, px: Ex, mask: Ex | None, wide) -> Value:
    """The im2col tensor (N, OG, C / OG, K, OH, OW): X bilinearly sampled at the positions (N, OG, K, OH, OW)."""
    n, c, h, w = x.shape
    og = py.v.shape[1]
    full = (n, og, c // og) + py.v.shape[2:]
    per_pos = (0, 1, 3, 4, 5)

    def iota(dim):
        return Ex(ctx, ctx.add("iota", shape=full, dimension=dim, dtype="i64"))

    plane = (iota(0) * c + iota(1) * (c // og) + iota(2)) * (h * w)
    flat_x = reshape(ctx, x, (x.type.size,))
    cols = None
    for (iy, wy), (ix, wx) in itertools.product(_deform_axis_taps(ctx, py, h), _deform_axis_taps(ctx, px, w)):
        coef = wy * wx if mask is None else wy * wx * mask
        idx = plane + ctx.add("broadcast_in_dim", (iy * w + ix).v, shape=full, broadcast_dimensions=per_pos)
        val = Ex(ctx, convert(ctx, ctx.add("gather", flat_x, idx.v, axis=0), wide))
        term = val * ctx.add("broadcast_in_dim", coef.v, shape=full, broadcast_dimensions=per_pos)
        cols = term if cols is None else cols + term
    return cols.v


@register("DeformConv", check=_deform_conv_check)
def _deform_conv(ctx, ins, at):
    x, wt, offset = ins[:3]
    bias = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    if x.type.rank != 4:
        raise ctx.fail(f"X {x.type}: only 2-D DeformConv (X of rank 4) is supported")
    n, c, h, w = x.shape
    oc = wt.shape[0]
    kh, kw = at.get("kernel_shape", wt.shape[2:])
    group, og = int(at.get("group", 1)), int(at.get("offset_group", 1))
    dh, dw = at.get("dilations", [1, 1])
    sh, sw = at.get("strides", [1, 1])
    pads = at.get("pads", [0, 0, 0, 0])
    oh = (h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1
    k = kh * kw
    if (wt.type.rank != 4 or tuple(wt.shape[2:]) != (kh, kw) or c % group or oc % group
            or wt.shape[1] * group != c or c % og):
        raise ctx.model_error(f"W {wt.type} does not match X {x.type}, kernel_shape {[kh, kw]}, group {group} "
                              f"and offset_group {og}")
    if offset.shape != (n, og * k * 2, oh, ow):
        raise ctx.model_error(f"offset {offset.type}: expected {[n, og * k * 2, oh, ow]}")
    if mask is not None and mask.shape != (n, og * k, oh, ow):
        raise ctx.model_error(f"mask {mask.type}: expected {[n, og * k, oh, ow]}")
    wide = dtypes.f32
    pos = (n, og, k, oh, ow)

    o = reshape(ctx, convert(ctx, offset, wide), (n, og, k, 2, oh, ow))   # channels: (offset_group, kh, kw, [dy, dx])

    def offset_part(axis):
        part = ctx.add("slice", o, start=(0, 0, 0, axis, 0, 0), limit=(n, og, k, axis + 1, oh, ow),
                       stride=(1,) * 6)
        return Ex(ctx, reshape(ctx, part, pos))

    taps = np.indices((kh, kw)).reshape(2, k)
    base_y = (taps[0][:, None] * dh + np.arange(oh)[None, :] * sh - pads[0]).astype(wide.np)   # (K, OH)
    base_x = (taps[1][:, None] * dw + np.arange(ow)[None, :] * sw - pads[1]).astype(wide.np)   # (K, OW)
    py = offset_part(0) + ctx.add("broadcast_in_dim", ctx.const(base_y, wide), shape=pos, broadcast_dimensions=(2, 3))
    px = offset_part(1) + ctx.add("broadcast_in_dim", ctx.const(base_x, wide), shape=pos, broadcast_dimensions=(2, 4))
    m = None if mask is None else Ex(ctx, reshape(ctx, convert(ctx, mask, wide), pos))
    cols = _deform_columns(ctx, x, py, px, m, wide)
    cg, ocg = c // group, oc // group
    cols = reshape(ctx, cols, (n, group, cg * k, oh * ow))
    wg = reshape(ctx, convert(ctx, wt, wide), (group, ocg, cg * k))
    y = ctx.add("dot_general", wg, cols, lhs_batch=(0,), rhs_batch=(1,), lhs_contract=(2,), rhs_contract=(2,))
    y = reshape(ctx, ctx.add("transpose", y, permutation=(2, 0, 1, 3)), (n, oc, oh, ow))   # (G, OCg, N, P) first
    if bias is not None:
        y = ctx.add("add", y, ctx.add("broadcast_in_dim", convert(ctx, bias, wide), shape=y.shape,
                                      broadcast_dimensions=(1,)))
    return convert(ctx, y, x.dtype)
