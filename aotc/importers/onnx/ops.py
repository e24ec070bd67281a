"""The ONNX converter table: one function per ONNX op type, onto aotc's primitive ops.

A converter is `fn(ctx, ins, at) -> Value | list[Value]`: `ins` are the node's
input Values (None for an omitted optional input), `at` its attributes as
Python values (int, float, str, lists, numpy arrays for tensors), `ctx` the
importer's context (importer.py: `ctx.add`, `ctx.const`,
`ctx.static`, `ctx.opset`, `ctx.fail`). Opset differences live inside the
function, keyed on `ctx.opset` (e.g. attributes that became inputs), so the
behaviour chosen is always that of the newest version <= the model's opset.
`register` is this importer's ConverterTable's decorator (aotc/importers/registry.py,
shared with the StableHLO importer); `register(..., check=fn)` adds a pre-scan check returning a reason string for
attribute values or dtypes that aotc cannot convert, so the importer reports
every problem at once before converting anything.

Decompositions use `Ex` (aotc/importers/expr.py), the importers' expression helper.

This file holds the table, the helpers and the elementwise/activation ops;
shape_ops.py holds constants and shape/data-movement ops, nn_ops.py
matmul, conv, pooling, normalization and reductions, the other modules one
family each (resize.py, rnn_ops.py, signal_ops.py, ...).
Add an op: write a converter, decorate it with @register("OpType"), and add a
one-node case to the module's tests/importers/onnx/test_<module>.py (helpers in one_node.py).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.registry import ConverterTable
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.dtypes import DType
from aotc.ir.graph import Value
from aotc.ir.ops import bitcast_problem

TABLE = ConverterTable()
CONVERTERS: dict[str, Callable] = TABLE.converters
CHECKS: dict[str, Callable] = TABLE.checks
register = TABLE.register


# ------------------------------------------------------------------ helpers

def norm_axis(ctx, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.model_error(f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def broadcast_to(ctx, v: Value, shape) -> Value:
    """Numpy-style (right-aligned) broadcast of `v` to `shape`."""
    shape = tuple(D.as_dim(d) for d in shape)
    if v.shape == shape:
        return v
    r = len(shape) - len(v.shape)
    if r < 0 or any(a not in (1, b) for a, b in zip(v.shape, shape[r:])):
        raise ctx.model_error(f"cannot broadcast {v.type} to {list(shape)}")
    return ctx.add("broadcast_in_dim", v, shape=shape, broadcast_dimensions=tuple(range(r, len(shape))))


def broadcast(ctx, *vs: Value) -> list[Value]:
    try:
        shape = D.broadcast_shapes(*(v.shape for v in vs))
    except D.DynamicDecisionError as e:
        raise ctx.fail(str(e)) from None
    except ValueError:
        raise ctx.model_error(f"operands {[str(v.type) for v in vs]} do not broadcast") from None
    return [broadcast_to(ctx, v, shape) for v in vs]


def scalar(ctx, value, dtype: DType, shape=()) -> Value:
    return broadcast_to(ctx, ctx.const(np.array(value, dtype.np), dtype), shape)


def reshape(ctx, v: Value, shape) -> Value:
    shape = tuple(D.as_dim(d) for d in shape)
    return v if v.shape == shape else ctx.add("reshape", v, shape=shape)


def convert(ctx, v: Value, dtype: DType) -> Value:
    return v if v.dtype == dtype else ctx.add("convert", v, dtype=dtype.name)


def reverse(ctx, v: Value, axis: int) -> Value:
    idx = ctx.const(np.arange(v.shape[axis] - 1, -1, -1, dtype=np.int64))
    return ctx.add("gather", v, idx, axis=axis)


# ------------------------------------------------------------------ elementwise

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
           "And": "and", "Or": "or", "Xor": "xor", "BitwiseAnd": "and", "BitwiseOr": "or", "BitwiseXor": "xor"}
_COMPARE = {"Equal": "EQ", "Less": "LT", "Greater": "GT", "LessOrEqual": "LE", "GreaterOrEqual": "GE"}
_UNARY = {"Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Neg": "neg", "Abs": "abs", "Tanh": "tanh",
          "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Sin": "sin", "Cos": "cos", "Sign": "sign",
          "Not": "not", "BitwiseNot": "not", "Sigmoid": "logistic", "Round": "round_even"}


@register(*_BINARY)
def _binary(ctx, ins, at):
    a, b = ins
    if ctx.op_type == "Pow":   # the exponent may have its own dtype (opset >= 12)
        b = convert(ctx, b, a.dtype)
    a, b = broadcast(ctx, a, b)
    return ctx.add(_BINARY[ctx.op_type], a, b)


@register(*_COMPARE)
def _compare(ctx, ins, at):
    a, b = broadcast(ctx, *ins)
    return ctx.add("compare", a, b, direction=_COMPARE[ctx.op_type])


@register(*_UNARY)
def _unary(ctx, ins, at):
    return ctx.add(_UNARY[ctx.op_type], ins[0])


@register("Max", "Min", "Sum", "Mean")
def _variadic(ctx, ins, at):
    xs = broadcast(ctx, *ins)
    op = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[ctx.op_type]
    out = xs[0]
    for x in xs[1:]:
        out = ctx.add(op, out, x)
    return (Ex(ctx, out) / float(len(xs))).v if ctx.op_type == "Mean" else out


@register("Mod")
def _mod(ctx, ins, at):
    a, b = broadcast(ctx, *ins)
    r = Ex(ctx, ctx.add("rem", a, b))
    if at.get("fmod", 0):
        return r.v
    # Python-style modulo: the result takes the divisor's sign
    fix = ctx.add("and", r.cmp("NE", 0), ctx.add("compare", r.cmp("LT", 0), Ex(ctx, b).cmp("LT", 0), direction="NE"))
    return (r + Ex(ctx, b).where(fix, 0)).v


@register("IsNaN", "IsInf")
def _is_special(ctx, ins, at):
    x = Ex(ctx, ins[0])
    if ctx.op_type == "IsNaN":
        return x.cmp("NE", x)
    pos, neg = x.cmp("EQ", np.inf), x.cmp("EQ", -np.inf)
    if not at.get("detect_positive", 1):
        return neg
    return pos if not at.get("detect_negative", 1) else ctx.add("or", pos, neg)


@register("Reciprocal")
def _reciprocal(ctx, ins, at):
    return (1.0 / Ex(ctx, ins[0])).v


@register("Relu")
def _relu(ctx, ins, at):
    return Ex(ctx, ins[0]).max(0).v


@register("LeakyRelu", "PRelu", "Elu", "Selu", "ThresholdedRelu", "Celu")
def _piecewise(ctx, ins, at):
    x = Ex(ctx, ins[0])
    neg = x.cmp("LT", 0)
    op = ctx.op_type
    if op == "LeakyRelu":
        return (x * at.get("alpha", 0.01)).where(neg, x).v
    if op == "PRelu":
        slope = convert(ctx, broadcast_to(ctx, ins[1], x.v.shape), x.v.dtype)
        return (x * slope).where(neg, x).v
    if op == "ThresholdedRelu":
        return x.where(x.cmp("GT", at.get("alpha", 1.0)), 0).v
    if op == "Celu":
        a = at.get("alpha", 1.0)
        return (x.max(0) + ((x / a).un("exp") - 1.0).min(0) * a).v
    if op == "Elu":
        return ((x.un("exp") - 1.0) * at.get("alpha", 1.0)).where(neg, x).v
    alpha = at.get("alpha", 1.67326319217681884765625)
    gamma = at.get("gamma", 1.05070102214813232421875)
    return ((x.un("exp") * alpha - alpha).where(x.cmp("LE", 0), x) * gamma).v


def _softplus(x: Ex) -> Ex:
    # max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|
    return x.max(0) + (1.0 + (-x.un("abs")).un("exp")).un("log")


@register("Softplus", "Softsign", "Mish", "HardSigmoid", "HardSwish", "Gelu", "Swish")
def _smooth(ctx, ins, at):
    x = Ex(ctx, ins[0])
    op = ctx.op_type
    if op == "Swish":
        return (x * (x * at.get("alpha", 1.0)).un("logistic")).v
    if op == "Softplus":
        return _softplus(x).v
    if op == "Softsign":
        return (x / (1.0 + x.un("abs"))).v
    if op == "Mish":
        return (x * _softplus(x).un("tanh")).v
    if op in ("HardSigmoid", "HardSwish"):
        alpha, beta = (at.get("alpha", 0.2), at.get("beta", 0.5)) if op == "HardSigmoid" else (1 / 6, 0.5)
        y = Ex(ctx, ctx.add("clamp", x.lift(0.0), (x * alpha + beta).v, x.lift(1.0)))
        return (y if op == "HardSigmoid" else x * y).v
    if at.get("approximate", "none") == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)
        return (x * 0.5 * (1.0 + inner.un("tanh"))).v
    return (x * 0.5 * (1.0 + (x * (1 / math.sqrt(2))).un("erf"))).v


def _gelu_check(at, node, opset, dtype_of):
    if at.get("approximate", "none") not in ("none", "tanh"):
        return f"approximate='{at['approximate']}' (supported: 'none', 'tanh')"


CHECKS["Gelu"] = _gelu_check


@register("Clip")
def _clip(ctx, ins, at):
    x = ins[0]
    dt = x.dtype
    lo_default = -np.inf if dt.is_float else np.iinfo(dt.np).min
    hi_default = np.inf if dt.is_float else np.iinfo(dt.np).max
    if ctx.opset < 11:
        lo, hi = at.get("min", lo_default), at.get("max", hi_default)
    else:
        lo = ins[1] if len(ins) > 1 and ins[1] is not None else lo_default
        hi = ins[2] if len(ins) > 2 and ins[2] is not None else hi_default
    bounds = [broadcast_to(ctx, reshape(ctx, b, ()), x.shape) if isinstance(b, Value) else scalar(ctx, b, dt, x.shape)
              for b in (lo, hi)]
    return ctx.add("clamp", bounds[0], x, bounds[1])


def _cast_check(at, node, opset, dtype_of):
    from aotc.importers.onnx.importer import ONNX_DTYPES, dtype_name
    if "to" in at and at["to"] not in ONNX_DTYPES:
        return f"cast to {dtype_name(at['to'])}"
    if at.get("round_mode", "up") not in ("up", "down", "nearest"):
        return f"round_mode={at['round_mode']!r} (supported: up, down, nearest)"


def _cast_to(ctx, x: Value, dt: DType, at) -> Value:
    """Cast/CastLike: float8 outputs saturate unless saturate=0 (opset 19+; +-inf -> +-max too);
    float8e8m0 outputs round by round_mode (opset 24+: up, the default, down or nearest)."""
    if x.dtype == dt:
        return x
    if dt.is_scale:
        return ctx.add("convert", x, dtype=dt.name, saturate=bool(at.get("saturate", 1)),
                       round_mode=at.get("round_mode", "up"))
    if dt.is_float8:
        return ctx.add("convert", x, dtype=dt.name, saturate=bool(at.get("saturate", 1)))
    return convert(ctx, x, dt)


@register("Cast", check=_cast_check)
def _cast(ctx, ins, at):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    return _cast_to(ctx, ins[0], ONNX_DTYPES[at["to"]], at)


def _bitcast_check(at, node, opset, dtype_of):
    from aotc.importers.onnx.importer import ONNX_DTYPES, dtype_name
    if "to" not in at:
        return None
    if at["to"] not in ONNX_DTYPES:
        return f"bitcast to {dtype_name(at['to'])}"
    src = dtype_of(node.input[0])
    problem = src and bitcast_problem(src, ONNX_DTYPES[at["to"]])
    if problem:
        return f"bitcast: {problem}"


@register("BitCast", check=_bitcast_check)
def _bitcast(ctx, ins, at):
    from aotc.importers.onnx.importer import ONNX_DTYPES
    x, dt = ins[0], ONNX_DTYPES[at["to"]]
    return x if x.dtype == dt else ctx.add("bitcast_convert", x, dtype=dt.name)


@register("CastLike")
def _cast_like(ctx, ins, at):
    return _cast_to(ctx, ins[0], ins[1].dtype, at)


@register("Where")
def _where(ctx, ins, at):
    c, a, b = broadcast(ctx, *ins)
    return ctx.add("select", c, a, b)


@register("Identity")
def _identity(ctx, ins, at):
    return ins[0]


def _dropout_check(at, node, opset, dtype_of):
    if at.get("is_test", 1) == 0 and opset < 7:
        return "training-mode dropout (is_test=0)"


@register("Dropout", check=_dropout_check)
def _dropout(ctx, ins, at):
    x = ins[0]
    if len(ins) > 2 and ins[2] is not None and bool(np.asarray(ctx.static(ins[2], "training_mode")).item()):
        raise ctx.fail("training_mode=true is not supported (inference only)")
    return [x, scalar(ctx, True, dtypes.boolean, x.shape)]
