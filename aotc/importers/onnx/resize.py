"""ONNX Resize (and its predecessor Upsample's engine): separable resampling with constant taps.

Every output coordinate along a resized axis maps to a source coordinate
(coordinate_transformation_mode), which maps to a few source indices and
weights (nearest: 1 tap, linear: 2, cubic: 4). Those are computed here with
numpy, so each axis becomes gathers with constant indices and a weighted
sum with constant weights: index math the fusion pass folds into one loop.
tf_crop_and_resize samples a region of interest and writes
extrapolation_value outside the input. Axes are resampled last-first, as the
ONNX reference does.

Antialiased downscaling (antialias=1, linear/cubic) stretches the filter by
1/scale, so an axis shrunk by 4 reads 8 (linear) or 16 (cubic) taps per
output; the taps are still constants. Beyond MAX_TAPS taps an axis is applied
as one dot_general with its dense (out, in) weight matrix instead of a chain
of gathers, which keeps the graph small for strong downscales.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import norm_axis, register

_COORD = {
    "half_pixel": lambda o, s, n, m: (o + 0.5) / s - 0.5,
    "half_pixel_symmetric": lambda o, s, n, m: n / 2 * (1 - m / (n * s)) + (o + 0.5) / s - 0.5,
    # m is the integer output length, as onnxruntime and PyTorch use (the ONNX reference uses
    # the fractional n * scale for align_corners when scales are given)
    "pytorch_half_pixel": lambda o, s, n, m: (o + 0.5) / s - 0.5 if m > 1 else np.zeros_like(o),
    "align_corners": lambda o, s, n, m: o * (n - 1) / (m - 1) if m > 1 else np.zeros_like(o),
    "asymmetric": lambda o, s, n, m: o / s,
    "tf_crop_and_resize": None,
}
_NEAREST = {"round_prefer_floor": lambda x: np.ceil(x - 0.5), "round_prefer_ceil": lambda x: np.floor(x + 0.5),
            "floor": np.floor, "ceil": np.ceil}
MAX_TAPS = 8      # taps per output beyond which an axis becomes a dot_general


def _resize_check(at, node, opset, dtype_of):
    if opset < 10:
        return "Resize before opset 10 is not supported"
    for key, ok, default in (("mode", ("nearest", "linear", "cubic"), "nearest"),
                             ("coordinate_transformation_mode", tuple(_COORD), "half_pixel"),
                             ("nearest_mode", tuple(_NEAREST), "round_prefer_floor"),
                             ("keep_aspect_ratio_policy", ("stretch", "not_larger", "not_smaller"), "stretch"),
                             ("antialias", (0, 1), 0)):
        if at.get(key, default) not in ok:
            return f"{key}={at[key]!r} (supported: {', '.join(map(str, ok))})"
    dt = dtype_of(node.input[0])
    if dt is not None and not dt.is_float and at.get("mode", "nearest") != "nearest":
        return f"{at.get('mode')} resize of integer {dt} data (float only)"


def _cubic(t, a):
    t = np.abs(t)
    return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                    np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


def _antialias_taps(src, n, scale, at):
    """Taps of the linear/cubic filter stretched by 1/scale when downscaling, normalized to sum 1.

    As in the ONNX reference: the window is the `width` source pixels nearest
    to src (ties to the left, so an integer src counts as ratio 1 from the
    pixel on its left), and out-of-range pixels repeat the edge.
    """
    scale = min(scale, 1.0)
    support = 1.0 if at["mode"] == "linear" else 2.0
    start = int(np.floor(-support / scale) + 1)
    offs = np.arange(start, 2 - start, dtype=np.float64)[:, None]          # (width, 1)
    left = np.where(src == np.floor(src), src - 1, np.floor(src))
    dist = (offs - (src - left)) * scale                                  # (width, m)
    w = np.clip(1 - np.abs(dist), 0, 1) if at["mode"] == "linear" else _cubic(dist, at.get("cubic_coeff_a", -0.75))
    w = w / w.sum(axis=0)
    raw = left + offs
    if at.get("exclude_outside", 0):
        w = np.where((raw < 0) | (raw > n - 1), 0.0, w)
        tot = w.sum(axis=0)
        w = w / np.where(tot == 0, 1.0, tot)
    return list(np.clip(raw, 0, n - 1).astype(np.int64)), list(w)


def _taps(src, n, at, scale):
    """(indices, weights) lists: output[o] = sum_k weights[k][o] * input[indices[k][o]]."""
    mode = at.get("mode", "nearest")
    if at.get("antialias", 0) and mode != "nearest":
        return _antialias_taps(src, n, scale, at)
    if mode == "nearest":
        idx = np.clip(_NEAREST[at.get("nearest_mode", "round_prefer_floor")](src), 0, n - 1)
        return [idx.astype(np.int64)], [np.ones_like(src)]
    if mode == "linear":
        x = np.clip(src, 0, n - 1)
        i0 = np.floor(x)
        t = x - i0
        return [i0.astype(np.int64), np.minimum(i0 + 1, n - 1).astype(np.int64)], [1 - t, t]
    a = at.get("cubic_coeff_a", -0.75)
    i0 = np.floor(src)
    t = src - i0
    offs = (-1, 0, 1, 2)
    raw = [i0 + k for k in offs]
    ws = [_cubic(t - k, a) for k in offs]
    if at.get("exclude_outside", 0):
        ws = [np.where((r < 0) | (r > n - 1), 0.0, w) for r, w in zip(raw, ws)]
        tot = sum(ws)
        ws = [w / tot for w in ws]
    return [np.clip(r, 0, n - 1).astype(np.int64) for r in raw], ws


def _sizes_and_scales(ctx, x, ins, at, axes):
    scales = ctx.static(ins[2], "scales") if len(ins) > 2 and ins[2] is not None else np.zeros(0)
    if scales.size:
        scales = [float(s) for s in scales]
        return [int(np.floor(x.shape[a] * s)) for a, s in zip(axes, scales)], scales
    if len(ins) < 4 or ins[3] is None:
        raise ctx.model_error("Resize needs non-empty scales or sizes (the model gives neither)")
    sizes = ctx.static_ints(ins[3], "sizes")
    policy = at.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        s = pick(m / x.shape[a] for a, m in zip(axes, sizes))
        sizes = [int(np.floor(s * x.shape[a] + 0.5)) for a in axes]
        return sizes, [s] * len(axes)
    return sizes, [m / x.shape[a] for a, m in zip(axes, sizes)]


def _weighted_sum(ctx, x, a: int, idxs, ws) -> Ex:
    """sum_k weights[k] * gather(x, indices[k]) along axis a: index math that fuses into one loop."""
    y = None
    for idx, w in zip(idxs, ws):
        g = ctx.add("gather", x, ctx.const(idx), axis=a)
        if np.all(w == 1):
            term = Ex(ctx, g)
        elif np.all(w == 0):
            continue
        else:
            term = Ex(ctx, g) * ctx.add("broadcast_in_dim", ctx.const(w.astype(x.dtype.np), x.dtype),
                                        shape=g.shape, broadcast_dimensions=(a,))
        y = term if y is None else y + term
    return y


def _weight_matrix(ctx, x, a: int, n: int, idxs, ws) -> Ex:
    """The same sum as one contraction of axis a with the dense (out, in) matrix of the taps."""
    m = len(idxs[0])
    mat = np.zeros((m, n), np.float64)
    for idx, w in zip(idxs, ws):
        np.add.at(mat, (np.arange(m), idx), w)
    y = ctx.add("dot_general", x, ctx.const(mat.astype(x.dtype.np), x.dtype), lhs_batch=(), rhs_batch=(),
                lhs_contract=(a,), rhs_contract=(1,))
    r = x.type.rank
    perm = tuple(range(a)) + (r - 1,) + tuple(range(a, r - 1))          # the new axis (last) back to a
    return Ex(ctx, y if a == r - 1 else ctx.add("transpose", y, permutation=perm))


@register("Resize", check=_resize_check)
def _resize_op(ctx, ins, at):
    if ctx.opset < 11:
        # Resize-10 is Upsample-9 renamed: inputs (X, scales), asymmetric coordinates, floor rounding
        return _resize(ctx, [ins[0], None, ins[1]], {"mode": at.get("mode", "nearest"),
                                                     "coordinate_transformation_mode": "asymmetric",
                                                     "nearest_mode": "floor"})
    return _resize(ctx, ins, at)


def _resize(ctx, ins, at):
    """Resize-11+ semantics on inputs (X, roi, scales, sizes); also the engine of Upsample."""
    x = ins[0]
    r = x.type.rank
    axes = [norm_axis(ctx, a, r) for a in at.get("axes", range(r))]
    sizes, scales = _sizes_and_scales(ctx, x, ins, at, axes)
    mode = at.get("coordinate_transformation_mode", "half_pixel")
    roi = None
    if mode == "tf_crop_and_resize":
        roi = np.asarray(ctx.static(ins[1], "roi"), np.float64).reshape(-1)
    for j in reversed(range(len(axes))):
        a, s, m = axes[j], scales[j], sizes[j]
        n = x.shape[a]
        o = np.arange(m, dtype=np.float64)
        if roi is not None:
            lo, hi = roi[j], roi[len(axes) + j]
            src = (lo * (n - 1) + o * (hi - lo) * (n - 1) / (m - 1)) if m > 1 else \
                np.full(m, 0.5 * (lo + hi) * (n - 1))
        else:
            src = _COORD[mode](o, s, n, m)
        if roi is None and src.shape == (n,) and np.array_equal(src, np.arange(n)):
            continue
        idxs, ws = _taps(src, n, at, s)
        y = _weighted_sum(ctx, x, a, idxs, ws) if len(idxs) <= MAX_TAPS else _weight_matrix(ctx, x, a, n, idxs, ws)
        if roi is not None:
            out = (src < 0) | (src > n - 1)
            if out.any():
                mask = ctx.add("broadcast_in_dim", ctx.const(out), shape=y.v.shape, broadcast_dimensions=(a,))
                fill = y.lift(float(at.get("extrapolation_value", 0.0)))
                y = Ex(ctx, ctx.add("select", mask, fill, y.v))
        x = y.v
    return x
