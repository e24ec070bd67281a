"""ONNX converters for the signal ops: DFT, STFT and MelWeightMatrix.

aotc has no FFT primitive, so a DFT is one dot_general with a constant
matrix W[n, c_in, k, c_out] built here with numpy: it contracts the
transformed axis and the real/imaginary axis of the input at once, so real
and complex inputs, forward and inverse, full and one-sided spectra are all
the same product with different matrices. Truncation (dft_length shorter
than the axis) is a slice; zero padding is free (the rows of W for the
missing samples would multiply zeros, so W simply omits them). The cost is
O(n^2) per transform instead of an FFT's O(n log n), which the gemm
templates absorb well for audio-sized frames; W is capped (MAX_MATRIX) so
a huge dft_length fails clearly instead of building gigabytes.

STFT gathers the frames (one gather with a constant [frames, frame_length]
index), multiplies them by the window and runs the same DFT on the frame
axis (onesided defaults to 1 as the spec, onnxruntime and the reference say;
onnx 1.23's shape inference assumes 0 when the attribute is missing, so such
a model whose STFT output shape ONNX can infer fails the importer's type
cross-check). MelWeightMatrix depends on its inputs only, so it becomes a constant.
Inputs that decide shapes (dft_length, axis, frame_step, frame_length, all
of MelWeightMatrix's) must be computable at import time (ctx.static).
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import register
from aotc.ir import dims as D
from aotc.ir.graph import Value

MAX_MATRIX = 1 << 24    # elements of one DFT matrix (64 MB in f32)


def _flags(*names: str):
    """A pre-scan check that the named 0/1 attributes hold 0 or 1."""
    def check(at, node, opset, dtype_of):
        bad = [f"{a}={at[a]}" for a in names if a in at and at[a] not in (0, 1)]
        if bad:
            return f"{', '.join(bad)} (supported: 0 or 1)"
    return check


def _scalar_int(ctx, v: Value | None, what: str, default: int) -> int:
    if v is None:
        return default
    vals = ctx.static_ints(v, what)
    if len(vals) != 1:
        raise ctx.model_error(f"{what} must be a scalar, got {len(vals)} values")
    return vals[0]


def _matrix_shape(rows: int, c_in: int, n: int, inverse: bool, onesided: bool) -> tuple[int, ...]:
    if inverse and onesided:   # IRFFT: one-sided bins in, n real samples out
        return (rows, c_in, n, 1)
    return (rows, c_in, n // 2 + 1 if onesided else n, 2)


def _dft_matrix(rows: int, c_in: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """W[row, c_in, k, c_out] such that y[k, c_out] = sum x[row, c_in] W[row, c_in, k, c_out].

    rows: input samples (forward, inverse) or one-sided bins (inverse one-sided) used.
    """
    shape = _matrix_shape(rows, c_in, n, inverse, onesided)
    w = np.zeros(shape)
    if inverse and onesided:   # Hermitian bins -> real signal; bins 0 and n/2 count once
        k = np.arange(rows)[:, None]
        theta = 2 * np.pi * ((k * np.arange(n)[None, :]) % n) / n
        weight = np.where((k == 0) | (2 * k == n), 1.0, 2.0) / n
        w[:, 0, :, 0] = weight * np.cos(theta)
        if c_in == 2:
            w[:, 1, :, 0] = -weight * np.sin(theta)
        return w
    theta = 2 * np.pi * ((np.arange(rows)[:, None] * np.arange(shape[2])[None, :]) % n) / n
    cos, sin = np.cos(theta), np.sin(theta)
    sign, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
    w[:, 0, :, 0], w[:, 0, :, 1] = cos, sign * sin          # (re, 0) * e^{sign i theta}
    if c_in == 2:
        w[:, 1, :, 0], w[:, 1, :, 1] = -sign * sin, cos     # (0, im) * e^{sign i theta}
    return w * scale


def dft(ctx, x: Value, axis: int, n: int, inverse: bool, onesided: bool) -> Value:
    """The ONNX DFT of x ([..., c] with c = 1 real or 2 complex) along `axis`, length n."""
    r, c_in = x.type.rank, x.shape[-1]
    if c_in not in (1, 2):
        raise ctx.model_error(f"the last dim of the input must be 1 (real) or 2 (complex), got {x.type}")
    if onesided and c_in != (2 if inverse else 1):
        kind = "complex" if inverse else "real"
        raise ctx.model_error(f"onesided=1 with inverse={int(inverse)} needs {kind} input, got {x.type}")
    if n < 1:
        raise ctx.model_error(f"dft_length must be >= 1, got {n}")
    rows = min(x.shape[axis], n // 2 + 1 if inverse and onesided else n)
    size = D.prod(_matrix_shape(rows, c_in, n, inverse, onesided))
    if size > MAX_MATRIX:
        raise ctx.fail(f"dft_length {n} over {rows} input rows needs a DFT matrix of {size} elements "
                       f"(limit {MAX_MATRIX}): aotc lowers DFT to a dense matrix product")
    w = _dft_matrix(rows, c_in, n, inverse, onesided)
    if rows < x.shape[axis]:
        limit = tuple(rows if d == axis else s for d, s in enumerate(x.shape))
        x = ctx.add("slice", x, start=(0,) * r, limit=limit, stride=(1,) * r)
    y = ctx.add("dot_general", x, ctx.const(w.astype(x.dtype.np), x.dtype), lhs_batch=(), rhs_batch=(),
                lhs_contract=(axis, r - 1), rhs_contract=(0, 1))
    if axis == r - 2:
        return y
    # y is (other dims..., k, c_out): move k back to `axis`
    others = iter(range(r - 2))
    perm = tuple(r - 2 if d == axis else r - 1 if d == r - 1 else next(others) for d in range(r))
    return ctx.add("transpose", y, permutation=perm)


@register("DFT", check=_flags("inverse", "onesided"))
def _dft(ctx, ins, at):
    x = ins[0]
    r = x.type.rank
    if ctx.opset >= 20:
        axis = _scalar_int(ctx, ins[2] if len(ins) > 2 else None, "axis", -2)
    else:
        axis = at.get("axis", 1)
    if not (-r <= axis <= -2 or 0 <= axis <= r - 2):
        raise ctx.model_error(f"axis {axis} out of range [-{r}, -2] U [0, {r - 2}] for input {x.type}")
    axis %= r
    inverse, onesided = bool(at.get("inverse", 0)), bool(at.get("onesided", 0))
    default = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    n = _scalar_int(ctx, ins[1] if len(ins) > 1 else None, "dft_length", default)
    return dft(ctx, x, axis, n, inverse, onesided)


@register("STFT", check=_flags("onesided"))
def _stft(ctx, ins, at):
    x, step_in = ins[:2]
    window = ins[2] if len(ins) > 2 else None
    r = x.type.rank
    if r < 2:
        raise ctx.model_error(f"signal must be [batch, signal_length, 1 or 2], got {x.type}")
    length = x.shape[-2]
    if window is not None and window.type.rank != 1:
        raise ctx.model_error(f"window must be 1-D, got {window.type}")
    fl_default = window.shape[0] if window is not None else length
    frame_len = _scalar_int(ctx, ins[3] if len(ins) > 3 else None, "frame_length", fl_default)
    step = _scalar_int(ctx, step_in, "frame_step", 0)
    if window is not None and window.shape[0] != frame_len:
        raise ctx.model_error(f"window length {window.shape[0]} differs from frame_length {frame_len}")
    if step < 1 or not 1 <= frame_len <= length:
        raise ctx.model_error(f"frame_step {step} and frame_length {frame_len} must be >= 1, "
                              f"frame_length at most the signal length {length}")
    frames = (length - frame_len) // step + 1
    index = np.arange(frames)[:, None] * step + np.arange(frame_len)[None, :]
    y = ctx.add("gather", x, ctx.const(index.astype(np.int64)), axis=r - 2)     # (..., frames, frame_len, c)
    if window is not None:
        w = ctx.add("broadcast_in_dim", window, shape=y.shape, broadcast_dimensions=(r - 1,))
        y = (Ex(ctx, y) * w).v
    return dft(ctx, y, r - 1, frame_len, False, bool(at.get("onesided", 1)))


# ------------------------------------------------------------------ MelWeightMatrix

def _mel_check(at, node, opset, dtype_of):
    from aotc.importers.onnx.importer import ONNX_DTYPES, dtype_name
    t = at.get("output_datatype", 1)
    if t not in ONNX_DTYPES or ONNX_DTYPES[t].name == "bool":
        return f"output_datatype {dtype_name(t)} (supported: aotc's numeric dtypes)"


def mel_weight_matrix(num_mel_bins: int, dft_length: int, sample_rate: int, lower_hz: np.ndarray,
                      upper_hz: np.ndarray) -> np.ndarray:
    """[dft_length // 2 + 1, num_mel_bins] triangular filters, peak 1, per the ONNX spec.

    The band edges follow onnxruntime's arithmetic, in float64 from the edges'
    values: mel(f) = 2595 log10(1 + f / 700), edge i = low + i * step,
    f = 700 (10^(mel / 2595) - 1), bin = floor((dft_length + 1) f / sample_rate).
    An edge within rounding of a bin boundary then lands where onnxruntime puts
    it (the ONNX reference's log1p/expm1 form, partly in float32, rarely puts
    such an edge one bin lower).
    """
    def mel(hz):
        return 2595.0 * np.log10(1.0 + np.float64(hz) / 700.0)
    low, high = mel(lower_hz), mel(upper_hz)
    step = (high - low) / float(num_mel_bins + 2)
    edges = low + step * np.arange(num_mel_bins + 2, dtype=np.float64)
    hz = 700.0 * (np.power(10.0, edges / 2595.0) - 1.0)
    bins = np.floor((dft_length + 1) * hz / sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins))
    if bins.min() < 0 or bins.max() >= out.shape[0]:
        raise ValueError(f"the band edges fall on DFT bins {bins.min()}..{bins.max()}, "
                         f"outside the {out.shape[0]} bins of the one-sided spectrum")
    for i, (left, center, right) in enumerate(zip(bins, bins[1:], bins[2:])):
        if center == left:
            out[center, i] = 1.0
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return out


@register("MelWeightMatrix", check=_mel_check)
def _mel_weight_matrix(ctx, ins, at):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    vals = [np.asarray(ctx.static(v, name)).reshape(()) for v, name in zip(ins, names)]
    n_mel, n_dft, rate = (int(v) for v in vals[:3])
    if n_mel < 1 or n_dft < 1 or rate < 1:
        raise ctx.model_error(f"num_mel_bins {n_mel}, dft_length {n_dft} and sample_rate {rate} must be >= 1")
    try:
        w = mel_weight_matrix(n_mel, n_dft, rate, vals[3], vals[4])
    except ValueError as e:
        raise ctx.model_error(str(e)) from None
    dt = ONNX_DTYPES[at.get("output_datatype", 1)]
    return ctx.const(w.astype(dt.np), dt)
