"""StableHLO's dynamism ops, accepted when their shapes are static after all.

dynamic_reshape / dynamic_broadcast_in_dim / dynamic_iota carry the result
shape as an operand; when the result TYPE is static (the pre-scan rejects
dynamic types) that operand says nothing new, so they are their static
counterparts. dynamic_pad / dynamic_conv / dynamic_gather take paddings or
slice sizes as operands: those must be computable at import time (constants,
or arithmetic on constants), because aotc's shapes are static.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.index_ops import _gather
from aotc.importers.stablehlo.nn_ops import _convolution
from aotc.importers.stablehlo.ops import _iota, bcast, pad, reshape


def _static_ints(cx, v, what: str) -> list[int]:
    s = cx.static(v)
    if s is None:
        raise cx.fail(f"{what} must be computable at import time (aotc shapes are static)")
    return [int(x) for x in np.asarray(s).reshape(-1)]


@register("stablehlo.dynamic_reshape")
def _dynamic_reshape(cx, ins):
    return reshape(cx, ins[0], cx.out_type()[0])


@register("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast_in_dim(cx, ins):
    return bcast(cx, ins[0], cx.out_type()[0], M.ints(cx.op, "broadcast_dimensions"))


register("stablehlo.dynamic_iota")(_iota)        # the output_shape operand is static: the result type has it


@register("stablehlo.dynamic_pad")
def _dynamic_pad(cx, ins):
    x, pv, lo, hi, inner = ins
    return pad(cx, x, pv, _static_ints(cx, lo, "edge_padding_low"), _static_ints(cx, hi, "edge_padding_high"),
               _static_ints(cx, inner, "interior_padding"))


@register("stablehlo.dynamic_gather")
def _dynamic_gather(cx, ins):
    return _gather(cx, ins, sizes=tuple(_static_ints(cx, ins[2], "slice_sizes")))


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
