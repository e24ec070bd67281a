"""StableHLO's dynamism ops: shapes given as operands, evaluated at import time (sizes may be symbolic dims).

dynamic_reshape / dynamic_broadcast_in_dim / dynamic_iota / real_dynamic_slice
carry the result shape (or slice bounds) as tensors. jax.export computes them
from the symbolic dims (`get_dimension_size`, then i32 arithmetic and
concatenation); `cx.static` evaluates that arithmetic now, with DimExprs for
the dynamic dims (aotc/ir/dims.py), so each op becomes its static counterpart
on a shape that may name dynamic dims. dynamic_pad / dynamic_conv /
dynamic_gather take paddings or slice sizes the same way. A shape that depends
on tensor data (not just dims) is refused.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.size_values import simplify
from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.index_ops import _gather
from aotc.importers.stablehlo.nn_ops import _convolution, _simple_kinds, window_reduce
from aotc.importers.stablehlo.ops import CUSTOM_CALLS, bcast, pad, reshape, size_scalar, slice_dim
from aotc.ir import dims as D
from aotc.ir import dtypes


def _sizes(cx, v, what: str) -> list:
    """The elements of a shape/index operand: ints and DimExprs."""
    s = cx.static(v)
    if s is None:
        raise cx.fail(f"{what} must be computable at import time from constants and the dims "
                      "(it depends on tensor data)")
    return [simplify(D.as_dim(x.item() if isinstance(x, np.generic) else x)) for x in np.asarray(s).reshape(-1)]


def _static_ints(cx, v, what: str) -> list[int]:
    out = _sizes(cx, v, what)
    if not all(D.is_static(x) for x in out):
        raise cx.fail(f"{what} must not depend on the dynamic dims")
    return out


@register("stablehlo.dynamic_reshape")
def _dynamic_reshape(cx, ins):
    return reshape(cx, ins[0], cx.out_shape(0, _sizes(cx, ins[1], "output_shape")))


@register("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast_in_dim(cx, ins):
    shape = cx.out_shape(0, _sizes(cx, ins[1], "output_dimensions"))
    return bcast(cx, ins[0], shape, M.ints(cx.op, "broadcast_dimensions"))


@register("stablehlo.dynamic_iota")
def _dynamic_iota(cx, ins):
    shape = cx.out_shape(0, _sizes(cx, ins[0], "output_shape"))
    return cx.add("iota", shape=shape, dimension=M.scalar(cx.op, "iota_dimension"), dtype=cx.out_dtype().name)


@register("stablehlo.real_dynamic_slice")
def _real_dynamic_slice(cx, ins):
    x = ins[0]
    start, limit, stride = (_sizes(cx, v, w) for v, w in zip(ins[1:], ("start_indices", "limit_indices", "strides")))
    if not all(D.is_static(s) and s >= 1 for s in stride):
        raise cx.fail(f"strides {stride} must be positive constants")
    start = [simplify(D.dmin(D.dmax(s, 0), n)) for s, n in zip(start, x.shape)]
    limit = [simplify(D.dmin(D.dmax(e, s), n)) for s, e, n in zip(start, limit, x.shape)]
    for d, (s, e, k) in enumerate(zip(start, limit, stride)):
        x = window(cx, x, d, s, simplify(D.ceildiv(e - s, k)), k)
    return x


def window(cx, x, d: int, begin, size, stride: int = 1):
    """x[begin : begin + size*stride : stride] along d: a slice where the ranges order its bounds and the
    start is a number, else a take of begin + stride * iota (no buffer offset that moves with the dims)."""
    if begin == 0 and size == x.shape[d] and stride == 1:
        return x
    if D.is_static(begin) and D.is_static(size) and size == 0:
        return slice_dim(cx, x, d, begin, begin, stride)
    if D.is_static(begin) and _surely_within(begin + (size - 1) * stride + 1, x.shape[d]):
        return slice_dim(cx, x, d, begin, begin + (size - 1) * stride + 1, stride)
    at = cx.add("iota", shape=(size,), dimension=0, dtype="i32")
    if stride != 1:
        at = cx.add("mul", at, bcast(cx, cx.scalar(stride, dtypes.i32), (size,), ()))
    at = cx.add("add", at, bcast(cx, size_scalar(cx, begin, dtypes.i32), (size,), ()))
    return cx.add("gather", x, at, axis=d)


@register("stablehlo.dynamic_pad")
def _dynamic_pad(cx, ins):
    x, pv, lo, hi, inner = ins
    return pad(cx, x, pv, _static_ints(cx, lo, "edge_padding_low"), _static_ints(cx, hi, "edge_padding_high"),
               _static_ints(cx, inner, "interior_padding"))


@register("stablehlo.dynamic_gather")
def _dynamic_gather(cx, ins):
    sizes = tuple(_sizes(cx, ins[2], "slice_sizes"))
    return _one_window(cx, ins[0], ins[1], sizes) or _gather(cx, ins, sizes=sizes)


def _surely_within(limit, extent) -> bool:
    try:
        return bool(limit <= extent)
    except D.DynamicDecisionError:
        return False


def _one_window(cx, x, idx, sizes):
    """A gather of one window at a start known now (`x[:, 1:]`, `x[:, -1:]` on a dynamic dim): a slice
    (and a take where the start is a dim expression), or None."""
    from aotc.importers.stablehlo.index_ops import _gather_dims
    dn = _gather_dims(cx.op)
    start = cx.static(idx)
    if start is None or idx.type.rank != 1 or dn.index_vector_dim != 0 or list(dn.operand_batching_dims):
        return None
    begin = [0] * x.type.rank
    for j, d in enumerate(dn.start_index_map):    # clamped into the operand, as StableHLO does
        clamped = D.dmin(D.dmax(D.as_dim(np.asarray(start).reshape(-1)[j]), 0), x.shape[d] - sizes[d])
        begin[d] = simplify(clamped)
    y = x
    for d in range(x.type.rank):     # the indexed dims start at begin, the others at 0
        y = window(cx, y, d, begin[d], sizes[d])
    kept = [n for d, n in enumerate(sizes) if d not in set(dn.collapsed_slice_dims)]
    return reshape(cx, y, tuple(kept))


def _dynamic_conv_check(op):
    for v in (op.operands[0], op.operands[1], op.results[0]):
        _, dt = M.tensor_type(v.type, "operand")
        if not dt.is_float:
            return f"{dt} operands are not supported (float only)"
    if M.scalar(op, "batch_group_count", 1) != 1:
        return "batch_group_count > 1 is not supported"
    return None


@register("stablehlo.dynamic_conv", check=_dynamic_conv_check)
def _dynamic_conv(cx, ins):
    p = _static_ints(cx, ins[2], "padding")
    return _convolution(cx, ins[:2], pads=[(p[i], p[i + 1]) for i in range(0, len(p), 2)])


def _dynamic_reduce_window(cx, ins):
    """jax's `stablehlo.dynamic_reduce_window` custom call (reduce_window whose window depends on dims):
    operands input, init, window dims, strides, base and window dilations, padding; the body is a function."""
    if len(ins) != 7 or len(cx.op.results) != 1:
        raise cx.fail("dynamic_reduce_window with several inputs is not supported")
    x, init = ins[:2]
    win, strides, base, dil = (_sizes(cx, v, w) for v, w in zip(ins[2:6], ("window_dimensions", "window_strides",
                                                                     "base_dilations", "window_dilations")))
    pads = _sizes(cx, ins[6], "padding")
    body = cx.funcs[str(cx.op.attributes["called_computations"][0]).lstrip("@").strip('"')]
    kinds = _simple_kinds(cx.op, body.regions[0].blocks[0])
    if kinds is None or kinds[0] not in ("sum", "max", "min", "prod") or any(not D.is_static(d) or d != 1
                                                                              for d in base):
        raise cx.fail("dynamic_reduce_window: supported bodies are add, maximum, minimum, multiply, without "
                      "base dilation")
    if not all(D.is_static(v) for v in strides + dil):
        raise cx.fail("dynamic_reduce_window: strides and dilations must not depend on the dims")
    return window_reduce(cx, x, init, kinds[0], win, strides, list(zip(pads[0::2], pads[1::2])), dil)


CUSTOM_CALLS["stablehlo.dynamic_reduce_window"] = _dynamic_reduce_window
