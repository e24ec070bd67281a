"""ONNX converters for the remaining math ops: trigonometry, bit shifts, Shrink, windows, EyeLike, quantization, Det.

Same conventions as ops.py. QuantizeLinear / DequantizeLinear are float
math on the IR's integer types (u8, i8, u16, i16, i32, and the 4- and 2-bit
u4, i4, u2, i2) and float8 / float4e2m1 types:
y = saturate(round(x / scale) + zero_point) and x = (q - zero_point) * scale,
with per-tensor, per-axis or blocked scales broadcast explicitly (float8 and
float4: y = saturating convert(x / scale), a zero point of 0). The `quantize` pass
(aotc/hlo_passes/quantize.py) reads this math back as dequantizations, so its
shape -- convert(q) [- Z] then * S -- is the contract between the two. The
window functions and EyeLike are constants computed here with numpy (their
inputs are sizes and shapes).
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import broadcast_to, convert, norm_axis, register, reshape, scalar
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.graph import Value

_TRIG = {"Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh",
         "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh"}


@register(*_TRIG)
def _trig(ctx, ins, at):
    return ctx.add(_TRIG[ctx.op_type], ins[0])


def _bitshift_check(at, node, opset, dtype_of):
    if at.get("direction") not in ("LEFT", "RIGHT"):
        return f"direction={at.get('direction')!r} (supported: 'LEFT', 'RIGHT')"


@register("BitShift", check=_bitshift_check)
def _bitshift(ctx, ins, at):
    from aotc.importers.onnx.ops import broadcast
    a, b = broadcast(ctx, *ins)
    return ctx.add("shift_left" if at["direction"] == "LEFT" else "shift_right", a, b)


@register("Shrink")
def _shrink(ctx, ins, at):
    x = Ex(ctx, ins[0])
    lambd, bias = at.get("lambd", 0.5), at.get("bias", 0.0)
    lo, hi = x.cmp("LT", -lambd), x.cmp("GT", lambd)
    zero = scalar(ctx, 0, x.v.dtype, x.v.shape)
    return (x + bias).where(lo, (x - bias).where(hi, zero)).v


def _window_values(op: str, n: int, periodic: bool) -> np.ndarray:
    big_n = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64)
    phase = 2 * np.pi * k / big_n if big_n else np.zeros(n)
    if op == "HannWindow":
        return 0.5 - 0.5 * np.cos(phase)
    if op == "HammingWindow":
        return 25 / 46 - (1 - 25 / 46) * np.cos(phase)
    return 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)


@register("HannWindow", "HammingWindow", "BlackmanWindow")
def _window_fn(ctx, ins, at):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    n = int(np.asarray(ctx.static(ins[0], "size")).item())
    dt = ONNX_DTYPES.get(at.get("output_datatype", 1))
    if dt is None or not dt.is_float:
        raise ctx.fail(f"output_datatype {at.get('output_datatype')} (supported: float types)")
    return ctx.const(_window_values(ctx.op_type, n, bool(at.get("periodic", 1))).astype(dt.np), dt)


@register("EyeLike")
def _eye_like(ctx, ins, at):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    x = ins[0]
    dt = ONNX_DTYPES[at["dtype"]] if "dtype" in at else x.dtype
    if x.type.rank != 2:
        raise ctx.model_error(f"EyeLike needs a 2-D input, got {x.type}")
    return ctx.const(np.eye(*x.shape, k=at.get("k", 0)).astype(dt.np), dt)


# ------------------------------------------------------------------ quantization

def _per_axis(ctx, s: Value, x: Value, axis: int, block: int) -> Value:
    """Broadcast a scale / zero point (scalar, 1-D per-axis or blocked) to x's shape."""
    if s.type.rank == 0 or s.type.size == 1:
        return broadcast_to(ctx, reshape(ctx, s, ()), x.shape)
    if block:   # blocked: s has x's shape with dim `axis` divided by block
        idx = np.arange(x.shape[axis]) // block
        s = ctx.add("gather", s, ctx.const(idx.astype(np.int64)), axis=axis)
        return broadcast_to(ctx, s, x.shape)
    return ctx.add("broadcast_in_dim", s, shape=x.shape, broadcast_dimensions=(axis,))


def _axis(ctx, x: Value, scale: Value, at) -> int:
    """The quantization axis; unused (0) for per-tensor scales."""
    if scale.type.size == 1 and scale.type.rank <= 1:
        return 0
    return norm_axis(ctx, at.get("axis", 1), x.type.rank)


_QRANGE = {d: dtypes.int_range(d) for d in (dtypes.u8, dtypes.i8, dtypes.u16, dtypes.i16, dtypes.i32,
                                             dtypes.u4, dtypes.i4, dtypes.u2, dtypes.i2)}
_QFLOATS = dtypes.FLOAT8 + (dtypes.f4e2m1fn,)    # the float targets: zero point 0, a (saturating) convert
_QTYPES = tuple(_QRANGE) + _QFLOATS
_QNAMES = ", ".join(t.name for t in _QTYPES)


def _quant_check(at, node, opset, dtype_of):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    if len(node.input) > 1 and dtype_of(node.input[1]) == dtypes.f8e8m0fnu:
        return "x_scale dtype f8e8m0fnu (MX power-of-two scales are not supported; cast the scale to float)"
    if node.op_type == "QuantizeLinear":
        out = dtype_of(node.output[0])
        if "output_dtype" in at and at["output_dtype"] and ONNX_DTYPES.get(at["output_dtype"]) not in _QTYPES:
            return f"output_dtype {at['output_dtype']} (supported: {_QNAMES})"
        if out is not None and out not in _QTYPES:
            return f"output dtype {out} (supported: {_QNAMES})"
    elif dtype_of(node.input[0]) is not None and dtype_of(node.input[0]) not in _QTYPES:
        return f"input dtype {dtype_of(node.input[0])} (supported: {_QNAMES})"


@register("DequantizeLinear", check=_quant_check)
def _dequantize(ctx, ins, at):
    x, scale = ins[:2]
    axis = _axis(ctx, x, scale, at)
    block = at.get("block_size", 0)
    xf = Ex(ctx, convert(ctx, x, dtypes.f32))
    if len(ins) > 2 and ins[2] is not None and x.dtype not in _QFLOATS:     # a float8 zero point is 0
        xf = xf - convert(ctx, _per_axis(ctx, ins[2], x, axis, block), dtypes.f32)
    y = xf * convert(ctx, _per_axis(ctx, scale, x, axis, block), dtypes.f32)
    return convert(ctx, y.v, scale.dtype)


@register("QuantizeLinear", check=_quant_check)
def _quantize(ctx, ins, at):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    x, scale = ins[:2]
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
    if zp is not None:
        out_t = zp.dtype
    elif at.get("output_dtype"):
        out_t = ONNX_DTYPES[at["output_dtype"]]
    else:
        out_t = dtypes.u8
    axis = _axis(ctx, x, scale, at)
    block = at.get("block_size", 0)
    xf = Ex(ctx, convert(ctx, x, dtypes.f32))
    if out_t in _QFLOATS:      # the zero point is 0 (ONNX); saturate (default 1) clamps to +-max, else inf/NaN
        q = xf / convert(ctx, _per_axis(ctx, scale, x, axis, block), dtypes.f32)
        return ctx.add("convert", q.v, dtype=out_t.name, saturate=bool(at.get("saturate", 1)))
    q = (xf / convert(ctx, _per_axis(ctx, scale, x, axis, block), dtypes.f32)).un("round_even")
    if zp is not None:
        q = q + convert(ctx, _per_axis(ctx, zp, x, axis, block), dtypes.f32)
    lo, hi = _QRANGE[out_t]
    q = q.max(float(lo)).min(float(hi))   # integer outputs always saturate
    return convert(ctx, q.v, out_t)


# ------------------------------------------------------------------ Det

MAX_DET_N = 64   # the elimination is unrolled: about 20 IR nodes per row


@register("Det")
def _det(ctx, ins, at):
    """Gaussian elimination with partial pivoting, unrolled over the (static) rows.

    Step j picks the row of largest |a| in column 0 of the remaining (B, m, m)
    matrix (the first on ties), swaps it to the top by selects on an iota mask
    (flipping the sign when it moves), multiplies the determinant by the pivot
    and eliminates column 0 from the rows below, leaving a (B, m-1, m-1)
    matrix. A zero pivot (a singular matrix) is replaced by 1 for the division
    so the rest stays finite; the determinant is already 0. f16/bf16 compute
    in f32.
    """
    x = ins[0]
    if x.type.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.model_error(f"Det needs square matrices (..., n, n), got {x.type}")
    lead, n = x.shape[:-2], x.shape[-1]
    if n > MAX_DET_N:
        raise ctx.fail(f"Det of {n} x {n} matrices (supported: n <= {MAX_DET_N}; the elimination is unrolled)")
    bsz = D.prod(lead)
    wide = dtypes.f32 if x.dtype in (dtypes.f16, dtypes.bf16) else x.dtype
    a = convert(ctx, reshape(ctx, x, (bsz, n, n)), wide)
    det = Ex(ctx, scalar(ctx, 1, wide, (bsz,)))
    for m in range(n, 0, -1):
        col = Ex(ctx, reshape(ctx, _slice(ctx, a, (0, 0, 0), (bsz, m, 1)), (bsz, m))).un("abs")
        best = Ex(ctx, ctx.add("reduce", col.v, axes=(1,), kind="max"))
        rows = ctx.add("iota", shape=(bsz, m), dimension=1, dtype="i64")
        at_best = col.cmp("EQ", ctx.add("broadcast_in_dim", best.v, shape=(bsz, m), broadcast_dimensions=(0,)))
        p = ctx.add("reduce", Ex(ctx, rows).where(at_best, m).v, axes=(1,), kind="min")        # (B,)
        is_p = Ex(ctx, rows).cmp("EQ", ctx.add("broadcast_in_dim", p, shape=(bsz, m), broadcast_dimensions=(0,)))
        grid = (bsz, m, m)
        is_p3 = ctx.add("broadcast_in_dim", is_p, shape=grid, broadcast_dimensions=(0, 1))
        pivot_row = ctx.add("reduce", Ex(ctx, a).where(is_p3, 0).v, axes=(1,), kind="sum")     # (B, m)
        pivot = Ex(ctx, reshape(ctx, _slice(ctx, pivot_row, (0, 0), (bsz, 1)), (bsz,)))
        moved = Ex(ctx, p).cmp("NE", 0)
        det = (-(det * pivot)).where(moved, det * pivot)
        if m == 1:
            break
        # rows 1..m-1 after the swap: the old top row stands where the pivot row was
        top = ctx.add("broadcast_in_dim", reshape(ctx, _slice(ctx, a, (0, 0, 0), (bsz, 1, m)), (bsz, m)),
                      shape=(bsz, m - 1, m), broadcast_dimensions=(0, 2))
        rest = ctx.add("select", _slice(ctx, is_p3, (0, 1, 0), grid), top, _slice(ctx, a, (0, 1, 0), grid))
        safe = Ex(ctx, scalar(ctx, 1, wide, (bsz,))).where(pivot.cmp("EQ", 0), pivot)
        factor = Ex(ctx, reshape(ctx, _slice(ctx, rest, (0, 0, 0), (bsz, m - 1, 1)), (bsz, m - 1))) / \
            ctx.add("broadcast_in_dim", safe.v, shape=(bsz, m - 1), broadcast_dimensions=(0,))
        sub = (bsz, m - 1, m - 1)
        a = (Ex(ctx, _slice(ctx, rest, (0, 0, 1), (bsz, m - 1, m)))
             - Ex(ctx, ctx.add("broadcast_in_dim", factor.v, shape=sub, broadcast_dimensions=(0, 1)))
             * ctx.add("broadcast_in_dim", _slice(ctx, pivot_row, (0, 1), (bsz, m)), shape=sub,
                       broadcast_dimensions=(0, 2))).v
    return reshape(ctx, convert(ctx, det.v, x.dtype), lead)


def _slice(ctx, v: Value, start, limit) -> Value:
    if tuple(start) == (0,) * len(start) and tuple(limit) == v.shape:
        return v
    return ctx.add("slice", v, start=tuple(start), limit=tuple(limit), stride=(1,) * len(start))
