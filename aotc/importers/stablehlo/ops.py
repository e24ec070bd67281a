"""StableHLO converters for elementwise, shape and pass-through ops.

Most StableHLO ops are one IR op with the same meaning. The rest decompose:
exponential_minus_one and log_plus_one use Kahan's tricks (exact near zero),
chlo.erfc is 1 - erf, sinh/cosh/asinh/acosh/atanh go through exp/log, pad with
interior or negative padding becomes reshape/pad/slice, reverse is a gather
with constant indices. Helpers shared with the other converter modules are
here too (broadcast, interior padding); decompositions use the importers' `Ex`
(aotc/importers/expr.py). In a program with dynamic dims, get_dimension_size
of one is a `dim_values` node (a size known at run time), a `?` result dim of
broadcast/reshape comes from the operand, and custom calls dispatch to jax's
shape_assertion (symbolic_dims.py) or to CUSTOM_CALLS (dynamic_ops.py).
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.symbolic_dims import check_assertion
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.graph import Value
from aotc.ir.ops import bitcast_problem

# ----------------------------------------------------------------- helpers


def bcast(cx, v: Value, shape, dims=None) -> Value:
    """broadcast_in_dim that accepts any dims order (transposes first) and skips no-ops."""
    shape = tuple(shape)
    dims = tuple(range(len(shape) - v.type.rank, len(shape))) if dims is None else tuple(dims)
    if list(dims) != sorted(dims):
        order = sorted(range(len(dims)), key=lambda i: dims[i])
        v = cx.add("transpose", v, permutation=tuple(order))
        dims = tuple(dims[i] for i in order)
    if v.shape == shape and dims == tuple(range(len(shape))):
        return v
    return cx.add("broadcast_in_dim", v, shape=shape, broadcast_dimensions=dims)


def size_scalar(cx, d, dt) -> Value:
    """A scalar of dtype `dt` holding the size `d`: a constant, or computed at run time for a dynamic dim."""
    if D.is_static(d):
        return cx.scalar(d, dt)
    return convert(cx, reshape(cx, cx.add("dim_values", values=(d,), dtype="i64"), ()), dt)


def full(cx, x, like: Value) -> Value:
    """A scalar constant `x` broadcast to `like`'s shape and dtype."""
    return bcast(cx, cx.scalar(x, like.dtype), like.shape, ())


def convert(cx, v: Value, dt) -> Value:
    return v if v.dtype == dt else cx.add("convert", v, dtype=dt.name)


def transpose(cx, v: Value, perm) -> Value:
    perm = tuple(perm)
    return v if perm == tuple(range(len(perm))) else cx.add("transpose", v, permutation=perm)


def reshape(cx, v: Value, shape) -> Value:
    return v if v.shape == tuple(shape) else cx.add("reshape", v, shape=tuple(shape))


def slice_dim(cx, v: Value, dim: int, start: int, limit: int, stride: int = 1) -> Value:
    if start == 0 and limit == v.shape[dim] and stride == 1:
        return v
    st, li, sd = [0] * v.type.rank, list(v.shape), [1] * v.type.rank
    st[dim], li[dim], sd[dim] = start, limit, stride
    return cx.add("slice", v, start=tuple(st), limit=tuple(li), stride=tuple(sd))


def dilate(cx, v: Value, dim: int, k: int, pv: Value) -> Value:
    """Insert k copies of the scalar `pv` between neighbours along `dim` (interior padding)."""
    n = v.shape[dim]
    if k == 0 or n <= 1:
        return v
    s = v.shape
    x = reshape(cx, v, s[:dim + 1] + (1,) + s[dim + 1:])
    low, high = [0] * x.type.rank, [0] * x.type.rank
    high[dim + 1] = k
    x = cx.add("pad", x, pv, low=tuple(low), high=tuple(high))
    x = reshape(cx, x, s[:dim] + (n * (k + 1),) + s[dim + 1:])
    return slice_dim(cx, x, dim, 0, n * (k + 1) - k)


def pad(cx, v: Value, pv: Value, low, high, interior=None) -> Value:
    """General StableHLO pad: interior via `dilate`, negative edges via slice."""
    for d, k in enumerate(interior or ()):
        v = dilate(cx, v, d, int(k), pv)
    lo, hi = [max(0, int(x)) for x in low], [max(0, int(x)) for x in high]
    if any(lo) or any(hi):
        v = cx.add("pad", v, pv, low=tuple(lo), high=tuple(hi))
    for d, (a, b) in enumerate(zip(low, high)):
        if a < 0 or b < 0:
            v = slice_dim(cx, v, d, max(0, -int(a)), v.shape[d] - max(0, -int(b)))
    return v


def reverse(cx, v: Value, dims) -> Value:
    for d in dims:
        n = v.shape[d]
        if D.is_static(n) and n <= 1:
            continue
        if D.is_static(n):
            idx = cx.const(np.arange(n - 1, -1, -1, dtype=np.int32), dtypes.i32)
        else:   # (n - 1) - iota, n known at run time
            ramp = cx.add("iota", shape=(n,), dimension=0, dtype="i32")
            idx = cx.add("sub", bcast(cx, size_scalar(cx, n - 1, dtypes.i32), (n,), ()), ramp)
        v = cx.add("gather", v, idx, axis=int(d))
    return v


# ----------------------------------------------------------------- elementwise

_UNARY = {"negate": "neg", "abs": "abs", "sign": "sign", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "exponential": "exp", "log": "log", "tanh": "tanh", "logistic": "logistic",
          "floor": "floor", "ceil": "ceil", "round_nearest_even": "round_even", "sine": "sin",
          "cosine": "cos", "not": "not"}
_BINARY = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "remainder": "rem",
           "power": "pow", "maximum": "max", "minimum": "min", "and": "and", "or": "or", "xor": "xor"}


def _unary(ir_op):
    return lambda cx, ins: cx.add(ir_op, ins[0])


def _binary(ir_op):
    return lambda cx, ins: cx.add(ir_op, ins[0], ins[1])


for _n, _o in _UNARY.items():
    register(f"stablehlo.{_n}")(_unary(_o))
for _n, _o in _BINARY.items():
    register(f"stablehlo.{_n}")(_binary(_o))
register("chlo.erf")(_unary("erf"))


def _float_only(op):
    _, dt = M.tensor_type(op.results[0].type, "result")
    return None if dt.is_float else f"{dt} operands are not supported (float only)"


@register("chlo.erfc", check=_float_only)
def _erfc(cx, ins):
    return (1 - Ex(cx, ins[0]).erf()).v


@register("stablehlo.exponential_minus_one", check=_float_only)
def _expm1(cx, ins):
    # Kahan: u = exp(x); expm1 = x if u == 1, else (u - 1) * x / log(u); u = inf stays inf
    x = Ex(cx, ins[0])
    u = x.exp()
    r = (u - 1) * x / u.log()
    return u.where(u.cmp("EQ", float("inf")), x.where(u.cmp("EQ", 1.0), r)).v


@register("stablehlo.log_plus_one", check=_float_only)
def _log1p(cx, ins):
    # Kahan: u = 1 + x; log1p = x if u == 1, else log(u) * x / (u - 1)
    x = Ex(cx, ins[0])
    u = 1 + x
    r = u.log() * x / (u - 1)
    return u.where(u.cmp("EQ", float("inf")), x.where(u.cmp("EQ", 1.0), r)).v


@register("stablehlo.cbrt", check=_float_only)
def _cbrt(cx, ins):
    x = Ex(cx, ins[0])
    return (x.sign() * Ex(cx, cx.add("pow", x.abs().v, full(cx, 1 / 3, x.v)))).v


@register("stablehlo.tan", "chlo.tan", check=_float_only)
def _tan(cx, ins):
    x = Ex(cx, ins[0])
    return (x.sin() / x.cos()).v


@register("chlo.sinh", check=_float_only)
def _sinh(cx, ins):
    x = Ex(cx, ins[0])
    return ((x.exp() - (-1 * x).exp()) * 0.5).v


@register("chlo.cosh", check=_float_only)
def _cosh(cx, ins):
    x = Ex(cx, ins[0])
    return ((x.exp() + (-1 * x).exp()) * 0.5).v


@register("chlo.asinh", check=_float_only)
def _asinh(cx, ins):
    x = Ex(cx, ins[0])
    a = x.abs()
    return (x.sign() * (a + (a * a + 1).sqrt()).log()).v


@register("chlo.acosh", check=_float_only)
def _acosh(cx, ins):
    x = Ex(cx, ins[0])
    return (x + (x * x - 1).sqrt()).log().v


@register("chlo.atanh", check=_float_only)
def _atanh(cx, ins):
    x = Ex(cx, ins[0])
    return (((1 + x) / (1 - x)).log() * 0.5).v


@register("stablehlo.round_nearest_afz", check=_float_only)
def _round_afz(cx, ins):
    x = Ex(cx, ins[0])
    return (x.sign() * (x.abs() + 0.5).floor()).v


@register("stablehlo.is_finite")
def _is_finite(cx, ins):
    x = Ex(cx, ins[0])
    return (x - x).cmp("EQ", 0.0)


@register("chlo.is_inf", "chlo.is_pos_inf", "chlo.is_neg_inf")
def _is_inf(cx, ins):
    x = Ex(cx, ins[0])
    if cx.name == "chlo.is_pos_inf":
        return x.cmp("EQ", float("inf"))
    if cx.name == "chlo.is_neg_inf":
        return x.cmp("EQ", float("-inf"))
    return x.abs().cmp("EQ", float("inf"))


@register("stablehlo.compare")
def _compare(cx, ins):
    d = M.enum_text(cx.op.attributes["comparison_direction"])
    kind = M.enum_text(cx.op.attributes["compare_type"]) if "compare_type" in cx.op.attributes else ""
    if kind == "TOTALORDER" and ins[0].dtype.is_float:
        return total_order(cx, ins[0], ins[1], d)
    return cx.add("compare", ins[0], ins[1], direction=d)


def total_order(cx, a, b, d: str):
    """IEEE totalOrder comparison (jax's sort comparators use it): -0 < +0 and NaN above everything.

    NaNs are taken as positive NaNs, the only kind jax's comparators leave after canonicalizing.
    """
    def lt(x, y):
        xe, ye = Ex(cx, x), Ex(cx, y)
        nan_x, nan_y = xe.cmp("NE", xe), ye.cmp("NE", ye)
        zeros = cx.add("and", xe.cmp("EQ", 0.0), ye.cmp("EQ", 0.0))
        neg_zero_first = cx.add("and", cx.add("and", zeros, (1 / xe).cmp("LT", 0.0)), (1 / ye).cmp("GT", 0.0))
        return cx.add("or", cx.add("or", xe.cmp("LT", ye), neg_zero_first), cx.add("and", cx.add("not", nan_x), nan_y))

    if d in ("LT", "GT"):
        return lt(a, b) if d == "LT" else lt(b, a)
    eq = cx.add("not", cx.add("or", lt(a, b), lt(b, a)))
    if d == "EQ":
        return eq
    if d == "NE":
        return cx.add("not", eq)
    return cx.add("or", lt(a, b) if d == "LE" else lt(b, a), eq)


@register("stablehlo.select")
def _select(cx, ins):
    p, a, b = ins
    return cx.add("select", bcast(cx, p, a.shape, ()) if p.shape != a.shape else p, a, b)


@register("stablehlo.clamp")
def _clamp(cx, ins):
    lo, x, hi = ins
    lo = bcast(cx, lo, x.shape, ()) if lo.shape != x.shape else lo
    hi = bcast(cx, hi, x.shape, ()) if hi.shape != x.shape else hi
    return cx.add("clamp", lo, x, hi)


@register("stablehlo.convert")
def _convert(cx, ins):
    return convert(cx, ins[0], cx.out_dtype())


def _bitcast_check(op):
    """Equal element widths only: between different widths StableHLO adds or drops a minor dimension."""
    (_, a), (_, b) = (M.tensor_type(v.type, "value") for v in (op.operands[0], op.results[0]))
    if a != b and dtypes.boolean in (a, b):   # i1 is one bit wide in StableHLO: i1 <-> i8 changes the width
        return f"bitcast between {a} and {b}: i1 is one bit wide (supported: equal element widths)"
    problem = bitcast_problem(a, b)
    return f"bitcast: {problem}" if problem else None


@register("stablehlo.bitcast_convert", check=_bitcast_check)
def _bitcast(cx, ins):
    dt = cx.out_dtype()
    return ins[0] if ins[0].dtype == dt else cx.add("bitcast_convert", ins[0], dtype=dt.name)


@register("stablehlo.partition_id", "stablehlo.replica_id")
def _single_device_id(cx, ins):
    """An aotc engine is one partition of one replica: both ids are the ui32 constant 0."""
    shape, dt = cx.out_type()
    return cx.const(np.zeros(shape, dt.np), dt)


_PRECISIONS = {(8, 7): dtypes.bf16, (5, 10): dtypes.f16, (8, 23): dtypes.f32}


def _reduce_precision_check(op):
    key = (M.scalar(op, "exponent_bits"), M.scalar(op, "mantissa_bits"))
    return None if key in _PRECISIONS else f"reduce_precision to e{key[0]}m{key[1]} (supported: bf16, f16, f32)"


@register("stablehlo.reduce_precision", check=_reduce_precision_check)
def _reduce_precision(cx, ins):
    x = ins[0]
    dt = _PRECISIONS[(M.scalar(cx.op, "exponent_bits"), M.scalar(cx.op, "mantissa_bits"))]
    return x if dt.itemsize >= x.dtype.itemsize else convert(cx, convert(cx, x, dt), x.dtype)


# ----------------------------------------------------------------- sources and shapes

@register("stablehlo.constant")
def _constant(cx, ins):
    shape, dt = cx.out_type()
    return cx.const(M.elements_to_numpy(cx.op.attributes["value"]), dt)


@register("stablehlo.iota")
def _iota(cx, ins):
    shape, dt = cx.out_type()
    return cx.add("iota", shape=shape, dimension=M.scalar(cx.op, "iota_dimension"), dtype=dt.name)


@register("stablehlo.get_dimension_size")
def _dim_size(cx, ins):
    d = ins[0].shape[M.scalar(cx.op, "dimension")]
    if D.is_static(d):
        return cx.scalar(d, dtypes.i32)
    return reshape(cx, cx.add("dim_values", values=(d,), dtype="i32"), ())   # known at run time


def broadcast_shape(cx, v: Value, dims) -> tuple:
    """The result shape of broadcasting `v` along `dims`, a dynamic (`?`) result dim taken from its operand dim."""
    derived = [None] * len(M.tensor_type(cx.op.results[0].type, "result")[0])
    for i, d in enumerate(dims):
        if not (D.is_static(v.shape[i]) and v.shape[i] == 1):
            derived[d] = v.shape[i]
    shape = cx.out_shape(0, derived)
    if None in shape:
        raise cx.fail(f"a dynamic result dim of {cx.op.results[0].type} is not an operand dim")
    return shape


@register("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(cx, ins):
    dims = M.ints(cx.op, "broadcast_dimensions")
    return bcast(cx, ins[0], broadcast_shape(cx, ins[0], dims), dims)


@register("stablehlo.broadcast")
def _broadcast(cx, ins):
    rank = len(M.tensor_type(cx.op.results[0].type, "result")[0])
    dims = tuple(range(rank - ins[0].type.rank, rank))
    return bcast(cx, ins[0], broadcast_shape(cx, ins[0], dims), dims)


@register("stablehlo.reshape")
def _reshape(cx, ins):
    shape, _ = M.tensor_type(cx.op.results[0].type, "result")
    if shape.count(None) == 1:    # the one dynamic dim is what the static ones leave
        known = D.prod(d for d in shape if d is not None)
        shape = cx.out_shape(0, [D.floordiv(ins[0].type.size, known) if d is None else d for d in shape])
    return reshape(cx, ins[0], shape if None not in shape else cx.out_type()[0])


@register("stablehlo.transpose")
def _transpose(cx, ins):
    return transpose(cx, ins[0], M.ints(cx.op, "permutation"))


@register("stablehlo.slice")
def _slice(cx, ins):
    st, li = M.ints(cx.op, "start_indices"), M.ints(cx.op, "limit_indices")
    sd = M.ints(cx.op, "strides", (1,) * len(st))
    return cx.add("slice", ins[0], start=st, limit=li, stride=sd)


@register("stablehlo.concatenate")
def _concatenate(cx, ins):
    if len(ins) == 1:
        return ins[0]
    return cx.add("concatenate", *ins, dimension=M.scalar(cx.op, "dimension"))


@register("stablehlo.pad")
def _pad(cx, ins):
    return pad(cx, ins[0], ins[1], M.ints(cx.op, "edge_padding_low"), M.ints(cx.op, "edge_padding_high"),
               M.ints(cx.op, "interior_padding"))


@register("stablehlo.reverse")
def _reverse(cx, ins):
    return reverse(cx, ins[0], M.ints(cx.op, "dimensions"))


@register("stablehlo.optimization_barrier", "sdy.sharding_constraint")
def _identity(cx, ins):
    return ins


_IDENTITY_CALLS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement",
                   "mhlo.sharding")


def _target(op) -> str:
    return str(op.attributes["call_target_name"]).strip('"')


CUSTOM_CALLS: dict = {}     # target -> converter, for the targets other modules implement


def _custom_call_check(op):
    target = _target(op)
    if target in _IDENTITY_CALLS and len(op.operands) == len(op.results) == 1:
        return None
    if target == "shape_assertion" and not op.results or target in CUSTOM_CALLS:
        return None
    known = ", ".join([*_IDENTITY_CALLS, "shape_assertion", *CUSTOM_CALLS])
    return f"custom_call target '{target}' is not a known pattern (known: {known})"


@register("stablehlo.custom_call", check=_custom_call_check)
def _custom_call(cx, ins):
    target = _target(cx.op)
    if target == "shape_assertion":     # jax.export's checks on symbolic dims: decided now
        failed = check_assertion(cx, ins)
        if failed:
            cx.failed_assertions.append(failed)   # reported together once the program is read
        return []
    if target in CUSTOM_CALLS:
        return CUSTOM_CALLS[target](cx, ins)
    return ins[0]
