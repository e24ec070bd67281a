"""ONNX converters for the remaining math ops: trigonometry, bit shifts, Shrink, windows, EyeLike, quantization.

Same conventions as onnx_ops.py. QuantizeLinear / DequantizeLinear are float
math on the IR's integer types (u8, i8, i32): y = saturate(round(x / scale) +
zero_point) and x = (q - zero_point) * scale, with per-tensor, per-axis or
blocked scales broadcast explicitly. The window functions and EyeLike are
constants computed here with numpy (their inputs are sizes and shapes).
"""
from __future__ import annotations

import numpy as np

from aotc.importers.onnx_ops import Ex, broadcast_to, convert, norm_axis, register, reshape, scalar
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
    from aotc.importers.onnx_ops import broadcast
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
    from aotc.importers.onnx import ONNX_DTYPES
    n = int(np.asarray(ctx.static(ins[0], "size")).item())
    dt = ONNX_DTYPES.get(at.get("output_datatype", 1))
    if dt is None or not dt.is_float:
        raise ctx.fail(f"output_datatype {at.get('output_datatype')} (supported: float types)")
    return ctx.const(_window_values(ctx.op_type, n, bool(at.get("periodic", 1))).astype(dt.np), dt)


@register("EyeLike")
def _eye_like(ctx, ins, at):
    from aotc.importers.onnx import ONNX_DTYPES
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


_QRANGE = {dtypes.u8: (0, 255), dtypes.i8: (-128, 127), dtypes.i32: (-2**31, 2**31 - 1)}


def _quant_check(at, node, opset, dtype_of):
    from aotc.importers.onnx import ONNX_DTYPES
    if node.op_type == "QuantizeLinear":
        out = dtype_of(node.output[0])
        if "output_dtype" in at and at["output_dtype"] and ONNX_DTYPES.get(at["output_dtype"]) not in _QRANGE:
            return f"output_dtype {at['output_dtype']} (supported: uint8, int8, int32)"
        if out is not None and out not in _QRANGE:
            return f"output dtype {out} (supported: u8, i8, i32)"
    elif dtype_of(node.input[0]) is not None and dtype_of(node.input[0]) not in _QRANGE:
        return f"input dtype {dtype_of(node.input[0])} (supported: u8, i8, i32)"


@register("DequantizeLinear", check=_quant_check)
def _dequantize(ctx, ins, at):
    x, scale = ins[:2]
    axis = _axis(ctx, x, scale, at)
    block = at.get("block_size", 0)
    xf = Ex(ctx, convert(ctx, x, dtypes.f32))
    if len(ins) > 2 and ins[2] is not None:
        xf = xf - convert(ctx, _per_axis(ctx, ins[2], x, axis, block), dtypes.f32)
    y = xf * convert(ctx, _per_axis(ctx, scale, x, axis, block), dtypes.f32)
    return convert(ctx, y.v, scale.dtype)


@register("QuantizeLinear", check=_quant_check)
def _quantize(ctx, ins, at):
    from aotc.importers.onnx import ONNX_DTYPES
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
    q = (xf / convert(ctx, _per_axis(ctx, scale, x, axis, block), dtypes.f32)).un("round_even")
    if zp is not None:
        q = q + convert(ctx, _per_axis(ctx, zp, x, axis, block), dtypes.f32)
    lo, hi = _QRANGE[out_t]
    q = q.max(float(lo)).min(float(hi))   # integer outputs always saturate
    return convert(ctx, q.v, out_t)
