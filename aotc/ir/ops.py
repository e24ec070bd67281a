"""The op table: every primitive op of the IR, defined once.

Each row (`OpDef`) carries the op's fusion category, its shape/dtype rule,
its numpy reference and its FLOP count; bytes moved are the sizes of the
operands and results. Importers, passes, the interpreter and the code
generators all read this table; nothing else defines what an op means.

The ops follow StableHLO: elementwise ops need equal shapes (broadcasts are
explicit `broadcast_in_dim`s), reductions drop the reduced axes, shapes are
static. Deliberate differences: `gather` is numpy's `take` along one axis
(ONNX Gather), `convolution` is NC+spatial / OI+spatial with symmetric
attributes (no general dimension numbers yet), `reduce_window` pads with the
reduction's identity, `bitcast_convert` needs equal element widths (and no
f16 <-> bf16).

To add an op: write its infer and reference functions, register it with
`_def`, then teach the code generator (aotc/kernels) its expression.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from aotc.errors import VerifyError
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.dtypes import DType
from aotc.ir.graph import TensorType

# Fusion categories: how aotc/fusion treats an op.
ELEMENTWISE = "elementwise"    # out[i] = f(in[i]...), fuses freely
INJECTIVE = "injective"        # pure data movement, folds into index math
REDUCTION = "reduction"        # reduces axes; anchors a reduction region
DOT = "dot"                    # anchors a gemm region
CONV = "conv"                  # anchors a conv region
WINDOW = "window"              # pooling; anchors a window region
SOURCE = "source"              # no inputs (iota)


@dataclass(frozen=True)
class OpDef:
    name: str
    category: str
    infer: Callable[[dict, list[TensorType]], list[TensorType]]
    reference: Callable[..., list[np.ndarray]]
    flops: Callable[[dict, list[TensorType], list[TensorType]], int]
    arity: int | None                # number of inputs, None if variadic


OPS: dict[str, OpDef] = {}


def _def(name, category, infer, reference, flops=None, arity=None):
    OPS[name] = OpDef(name, category, infer, reference,
                      flops or (lambda a, i, o: 0), arity)


def get(op: str) -> OpDef:
    if op not in OPS:
        raise VerifyError(f"unknown primitive op '{op}'")
    return OPS[op]


class _RuleError(Exception):
    """Raised by infer rules; turned into a VerifyError naming the node."""


def _check(cond: bool, msg: str):
    if not cond:
        raise _RuleError(msg)


def infer_types(op: str, attrs: dict, in_types: list[TensorType], node_name: str = "") -> list[TensorType]:
    """Output types of `op` applied to `in_types`; VerifyError naming the rule on mismatch."""
    d = get(op)
    if d.arity is not None and len(in_types) != d.arity:
        raise VerifyError(f"node '{node_name}' ({op}): expects {d.arity} inputs, got {len(in_types)}")
    try:
        return d.infer(attrs, in_types)
    except _RuleError as e:
        got = ", ".join(str(t) for t in in_types)
        raise VerifyError(f"node '{node_name}' ({op}) with inputs ({got}): {e}") from None


def node_flops(op: str, attrs: dict, in_types, out_types) -> int:
    """FLOPs of one node (at the top of the ranges for dynamic shapes)."""
    return int(D.upper(node_flops_expr(op, attrs, in_types, out_types)))


def node_flops_expr(op: str, attrs: dict, in_types, out_types):
    """FLOPs of one node: an int, or an expression of the dynamic dims."""
    return get(op).flops(attrs, in_types, out_types)


def node_bytes(in_types, out_types) -> int:
    return int(sum(t.max_nbytes for t in in_types) + sum(t.max_nbytes for t in out_types))


def _contig(a) -> np.ndarray:
    """C-contiguous copy that keeps 0-d arrays 0-d (np.ascontiguousarray does not)."""
    return np.require(a, requirements="C")


def _size(shape):
    return D.prod(shape)


def _out_elems(a, i, o):
    return sum(t.size for t in o)


# ----------------------------------------------------------------- elementwise

def _compute_dtype(x: np.ndarray) -> np.dtype:
    """Reduced-precision floats compute in f32 in the reference, like the kernels."""
    return dtypes.compute_np(x.dtype)


def _float_unary(fn):
    def ref(attrs, x):
        return [fn(x.astype(_compute_dtype(x))).astype(x.dtype)]
    return ref


def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)


def _sign(x):
    return np.sign(x)


# int4/uint4/int2/uint2/float4 are storage types: ops whose result could leave their range refuse them
# (kernels compute in a byte and would not wrap); max/min/compare/select/convert take them
_NARROW_OK = {"max", "min"}


def _narrow_guard(name, infer):
    def guarded(attrs, ts):
        out = infer(attrs, ts)
        _check(name in _NARROW_OK or not ts[0].dtype.bits,
               f"{ts[0].dtype} is a storage type: convert to a wider type before '{name}'")
        _check(name in _NARROW_OK or not ts[0].dtype.is_scale,
               f"{ts[0].dtype} is a scale type (powers of two): convert to a wider type before '{name}'")
        return out
    return guarded



UNARY: dict[str, tuple[Callable, str]] = {
    # name: (numpy function, which dtypes: "float" | "num" | "int" | "bool")
    "neg": (np.negative, "num"),
    "abs": (np.abs, "num"),
    "sign": (_sign, "num"),
    "sqrt": (np.sqrt, "float"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "float"),
    "exp": (np.exp, "float"),
    "log": (np.log, "float"),
    "tanh": (np.tanh, "float"),
    "logistic": (lambda x: 1 / (1 + np.exp(-x)), "float"),
    "erf": (_erf, "float"),
    "floor": (np.floor, "float"),
    "ceil": (np.ceil, "float"),
    "round_even": (np.rint, "float"),
    "sin": (np.sin, "float"),
    "cos": (np.cos, "float"),
    "not": (None, "intbool"),
    "tan": (np.tan, "float"),
    "asin": (np.arcsin, "float"),
    "acos": (np.arccos, "float"),
    "atan": (np.arctan, "float"),
    "sinh": (np.sinh, "float"),
    "cosh": (np.cosh, "float"),
    "asinh": (np.arcsinh, "float"),
    "acosh": (np.arccosh, "float"),
    "atanh": (np.arctanh, "float"),
}


def _unary_infer(kinds):
    def infer(attrs, ts):
        (t,) = ts
        if kinds == "float":
            _check(t.dtype.is_float, f"needs a float operand, got {t.dtype}")
        elif kinds == "num":
            _check(t.dtype != dtypes.boolean, "needs a numeric operand, got bool")
        elif kinds == "intbool":
            _check(not t.dtype.is_float, f"needs an integer or bool operand, got {t.dtype}")
        return [t]
    return infer


def _not_ref(attrs, x):
    return [np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)]


for _name, (_fn, _kinds) in UNARY.items():
    _ref = _not_ref if _name == "not" else (
        _float_unary(_fn) if _kinds == "float" else (lambda f: lambda a, x: [f(x).astype(x.dtype)])(_fn))
    _def(_name, ELEMENTWISE, _narrow_guard(_name, _unary_infer(_kinds)), _ref, _out_elems, 1)


def _int_div(a, b):
    if a.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.trunc(a.astype(np.float64) / np.where(b == 0, 1, b)).astype(a.dtype)
        return np.where(b == 0, 0, q).astype(a.dtype)   # x / 0 == 0 for integers, as the kernels do
    return a / b


def _int_rem(a, b):
    if a.dtype.kind in "iu":
        return np.fmod(a, np.where(b == 0, 1, b)).astype(a.dtype)
    return np.fmod(a, b)


def _shift(fn, a, b):
    """Out-of-range shifts (negative, or the bit width or more) saturate as in ONNX and numpy:
    0, or -1 for a right shift of a negative value (C leaves them undefined; the kernels test)."""
    big = (b < 0) | (b >= 8 * a.dtype.itemsize)   # int4/uint4 never reach here (the op table refuses them)
    full = (np.where(a < 0, -1, 0) if fn is np.right_shift else np.zeros_like(a)).astype(a.dtype)   # u64: no float
    return np.where(big, full, fn(a, np.where(big, 0, b).astype(a.dtype))).astype(a.dtype)


BINARY: dict[str, tuple[Callable, str]] = {
    "add": (np.add, "num"),
    "sub": (np.subtract, "num"),
    "mul": (np.multiply, "num"),
    "div": (_int_div, "num"),
    "rem": (_int_rem, "num"),
    "pow": (np.power, "num"),
    "max": (np.maximum, "num"),
    "min": (np.minimum, "num"),
    "and": (None, "intbool"),
    "or": (None, "intbool"),
    "xor": (None, "intbool"),
    "shift_left": (lambda a, b: _shift(np.left_shift, a, b), "int"),
    "shift_right": (lambda a, b: _shift(np.right_shift, a, b), "int"),   # logical for unsigned
}
_LOGIC = {"and": (np.logical_and, np.bitwise_and), "or": (np.logical_or, np.bitwise_or),
          "xor": (np.logical_xor, np.bitwise_xor)}


def _binary_infer(kinds):
    def infer(attrs, ts):
        a, b = ts
        _check(a.shape == b.shape, f"operand shapes differ: {a.shape} vs {b.shape}")
        _check(a.dtype == b.dtype, f"operand dtypes differ: {a.dtype} vs {b.dtype}")
        if kinds == "num":
            _check(a.dtype != dtypes.boolean, "needs numeric operands, got bool")
        elif kinds == "int":
            _check(not a.dtype.is_float and a.dtype != dtypes.boolean, f"needs integer operands, got {a.dtype}")
        else:
            _check(not a.dtype.is_float, f"needs integer or bool operands, got {a.dtype}")
        return [a]
    return infer


def _binary_ref(name, fn):
    def ref(attrs, a, b):
        if name in _LOGIC:
            f = _LOGIC[name][0] if a.dtype == np.bool_ else _LOGIC[name][1]
            return [f(a, b)]
        if name == "pow" and a.dtype.kind in "iu":
            return [np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)]
        cd = _compute_dtype(a)
        with np.errstate(all="ignore"):
            return [np.asarray(fn(a.astype(cd), b.astype(cd))).astype(a.dtype)]
    return ref


for _name, (_fn, _kinds) in BINARY.items():
    _def(_name, ELEMENTWISE, _narrow_guard(_name, _binary_infer(_kinds)), _binary_ref(_name, _fn), _out_elems, 2)

COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
           "GT": np.greater, "GE": np.greater_equal}


def _compare_infer(attrs, ts):
    a, b = ts
    _check(attrs.get("direction") in COMPARE, f"direction must be one of {sorted(COMPARE)}")
    _check(a.shape == b.shape and a.dtype == b.dtype, f"operands differ: {a} vs {b}")
    return [TensorType(a.shape, dtypes.boolean)]


_def("compare", ELEMENTWISE, _compare_infer,
     lambda at, a, b: [COMPARE[at["direction"]](a, b)], _out_elems, 2)


def _select_infer(attrs, ts):
    p, a, b = ts
    _check(p.dtype == dtypes.boolean, f"predicate must be bool, got {p.dtype}")
    _check(p.shape == a.shape == b.shape, f"shapes differ: {p.shape}, {a.shape}, {b.shape}")
    _check(a.dtype == b.dtype, f"branch dtypes differ: {a.dtype} vs {b.dtype}")
    return [a]


_def("select", ELEMENTWISE, _select_infer, lambda at, p, a, b: [np.where(p, a, b)], _out_elems, 3)


def _clamp_infer(attrs, ts):
    lo, x, hi = ts
    _check(lo.shape == x.shape == hi.shape, f"shapes differ: {lo.shape}, {x.shape}, {hi.shape}")
    _check(lo.dtype == x.dtype == hi.dtype, "dtypes differ")
    return [x]


_def("clamp", ELEMENTWISE, _clamp_infer,
     lambda at, lo, x, hi: [np.minimum(np.maximum(x, lo), hi)], _out_elems, 3)


def _convert_infer(attrs, ts):
    (t,) = ts
    _check(attrs.get("dtype") in dtypes.BY_NAME, f"dtype must be one of {list(dtypes.BY_NAME)}")
    _check(attrs.get("round_mode", "up") in dtypes.E8M0_ROUND_MODES,
           f"round_mode must be one of {dtypes.E8M0_ROUND_MODES}, got {attrs.get('round_mode')!r}")
    return [TensorType(t.shape, dtypes.from_name(attrs["dtype"]))]


def _convert_ref(attrs, x):
    """attrs['saturate'] (default False, as StableHLO) matters for float8 outputs only:
    out-of-range values and +-inf go to +-max instead of inf/NaN (ONNX Cast's default).
    attrs['round_mode'] (up, the default, down or nearest; ONNX Cast's) matters for f8e8m0fnu only."""
    dt = dtypes.from_name(attrs["dtype"])
    if dt.is_scale:
        return [dtypes.to_e8m0(x, bool(attrs.get("saturate", False)), attrs.get("round_mode", "up"))]
    if dt.is_float8:
        return [dtypes.to_float8(x, dt, bool(attrs.get("saturate", False)))]
    if dt.is_float or x.dtype == np.bool_ or dt == dtypes.boolean:
        return [x.astype(dt.np)]
    # float -> int truncates toward zero, as C does; int4/uint4 keep the low 4 bits (ml_dtypes, ONNX)
    if dtypes.is_float_np(x.dtype):
        with np.errstate(invalid="ignore"):
            return [np.trunc(x.astype(np.float64)).astype(dt.np)]
    if dt.bits and dtypes.from_numpy(x.dtype).is_narrow_int:
        x = x.astype(np.int8)   # 2/4-bit -> 2/4-bit goes through a plain integer
    return [x.astype(dt.np)]


_def("convert", ELEMENTWISE, _convert_infer, _convert_ref, _out_elems, 1)


def bitcast_problem(src: DType, dst: DType) -> str | None:
    """Why `bitcast_convert` cannot reinterpret src as dst, or None (importers ask before they emit it).

    StableHLO's op restricted to equal element widths, so the shape never
    changes. f16 <-> bf16 is left out: kernels hold 16-bit floats in float
    while computing, and a NaN does not keep its bit pattern through that.
    """
    if (src.is_float8 or src.is_scale) != (dst.is_float8 or dst.is_scale) and src != dst:
        return f"{src} -> {dst}: kernels hold float8 values in float, which does not keep NaN bit patterns"
    if (src.bits or dst.bits) and src != dst:
        return f"{src} -> {dst}: {src if src.bits else dst} holds {src.bits or dst.bits} bits in a byte"
    if src.itemsize != dst.itemsize:
        return f"element widths differ: {src} has {8 * src.itemsize} bits, {dst} has {8 * dst.itemsize}"
    if src != dst and src.is_float and dst.is_float:
        return f"{src} -> {dst}: 16-bit floats are computed in float, which does not keep NaN bit patterns"
    return None


def _bitcast_infer(attrs, ts):
    (t,) = ts
    _check(attrs.get("dtype") in dtypes.BY_NAME, f"dtype must be one of {list(dtypes.BY_NAME)}")
    dt = dtypes.from_name(attrs["dtype"])
    problem = bitcast_problem(t.dtype, dt)
    _check(problem is None, f"bitcast_convert: {problem}")
    return [TensorType(t.shape, dt)]


def _bitcast_ref(attrs, x):
    dt = dtypes.from_name(attrs["dtype"])
    if dt == dtypes.boolean:   # only bytes 0 and 1 are bools in C and numpy: any nonzero byte reads as true
        return [x != 0]
    return [_contig(x).view(dt.np)]


# no arithmetic: its cost is the bytes it moves, like any elementwise op's
_def("bitcast_convert", ELEMENTWISE, _bitcast_infer, _bitcast_ref, arity=1)


# ------------------------------------------------------------------- injective

def _perm_ok(p, rank):
    return sorted(p) == list(range(rank))


def _broadcast_infer(attrs, ts):
    (t,) = ts
    shape, dims = tuple(attrs["shape"]), tuple(attrs["broadcast_dimensions"])
    _check(len(dims) == t.rank, f"broadcast_dimensions {dims} must have one entry per operand dim")
    _check(len(set(dims)) == len(dims) and all(0 <= d < len(shape) for d in dims),
           f"broadcast_dimensions {dims} out of range for result rank {len(shape)}")
    _check(list(dims) == sorted(dims), f"broadcast_dimensions {dims} must increase")
    for i, d in enumerate(dims):
        _check(t.shape[i] in (1, shape[d]), f"operand dim {i} ({t.shape[i]}) cannot broadcast to {shape[d]}")
    return [TensorType(shape, t.dtype)]


def _broadcast_ref(attrs, x):
    shape, dims = tuple(attrs["shape"]), tuple(attrs["broadcast_dimensions"])
    expanded = [1] * len(shape)
    for i, d in enumerate(dims):
        expanded[d] = x.shape[i]
    return [_contig(np.broadcast_to(x.reshape(expanded), shape))]


_def("broadcast_in_dim", INJECTIVE, _broadcast_infer, _broadcast_ref, arity=1)


def _reshape_infer(attrs, ts):
    (t,) = ts
    shape = tuple(attrs["shape"])
    _check(all(d >= 0 for d in shape), f"shape {shape} must be static and non-negative")
    _check(_size(shape) == t.size, f"cannot reshape {t.shape} ({t.size} elements) to {shape}")
    return [TensorType(shape, t.dtype)]


_def("reshape", INJECTIVE, _reshape_infer, lambda at, x: [x.reshape(tuple(at["shape"]))], arity=1)


def _transpose_infer(attrs, ts):
    (t,) = ts
    p = tuple(attrs["permutation"])
    _check(_perm_ok(p, t.rank), f"permutation {p} is not a permutation of rank {t.rank}")
    return [TensorType(tuple(t.shape[i] for i in p), t.dtype)]


_def("transpose", INJECTIVE, _transpose_infer,
     lambda at, x: [_contig(x.transpose(tuple(at["permutation"])))], arity=1)


def _slice_infer(attrs, ts):
    (t,) = ts
    start, limit, stride = tuple(attrs["start"]), tuple(attrs["limit"]), tuple(attrs["stride"])
    _check(len(start) == len(limit) == len(stride) == t.rank, "start/limit/stride need one entry per dim")
    out = []
    for s, l, k, d in zip(start, limit, stride, t.shape):
        _check(0 <= s <= l <= d and k >= 1, f"slice [{s}:{l}:{k}] out of range for dim {d}")
        out.append((l - s + k - 1) // k)
    return [TensorType(tuple(out), t.dtype)]


_def("slice", INJECTIVE, _slice_infer,
     lambda at, x: [_contig(x[tuple(slice(s, l, k) for s, l, k in
                                                  zip(at["start"], at["limit"], at["stride"]))])],
     arity=1)


def _concat_infer(attrs, ts):
    _check(len(ts) >= 1, "needs at least one operand")
    ax = attrs["dimension"]
    r = ts[0].rank
    _check(0 <= ax < r, f"dimension {ax} out of range for rank {r}")
    for t in ts:
        _check(t.rank == r and t.dtype == ts[0].dtype, "operands must share rank and dtype")
        _check(all(t.shape[i] == ts[0].shape[i] for i in range(r) if i != ax),
               f"operand shapes {[x.shape for x in ts]} differ outside dimension {ax}")
    shape = list(ts[0].shape)
    shape[ax] = sum(t.shape[ax] for t in ts)
    return [TensorType(tuple(shape), ts[0].dtype)]


_def("concatenate", INJECTIVE, _concat_infer,
     lambda at, *xs: [np.concatenate(xs, axis=at["dimension"])])


def _pad_infer(attrs, ts):
    t, pv = ts
    low, high = tuple(attrs["low"]), tuple(attrs["high"])
    _check(pv.shape == () and pv.dtype == t.dtype, "padding value must be a scalar of the operand's dtype")
    _check(len(low) == len(high) == t.rank, "low/high need one entry per dim")
    _check(all(x >= 0 for x in low + high), f"negative padding {low}/{high} unsupported (use slice)")
    return [TensorType(tuple(d + a + b for d, a, b in zip(t.shape, low, high)), t.dtype)]


_def("pad", INJECTIVE, _pad_infer,
     lambda at, x, pv: [np.pad(x, list(zip(at["low"], at["high"])), constant_values=pv.item())],
     arity=2)


def _iota_infer(attrs, ts):
    shape, dim = tuple(attrs["shape"]), attrs["dimension"]
    _check(0 <= dim < len(shape), f"dimension {dim} out of range for shape {shape}")
    _check(not dtypes.from_name(attrs["dtype"]).is_scale, "f8e8m0fnu is a scale type (no zero): iota in a wider type")
    return [TensorType(shape, dtypes.from_name(attrs["dtype"]))]


def _iota_ref(attrs, *_):
    shape, dim = tuple(attrs["shape"]), attrs["dimension"]
    dt = dtypes.from_name(attrs["dtype"]).np
    r = np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))])
    return [_contig(np.broadcast_to(r, shape).astype(dt))]


_def("iota", SOURCE, _iota_infer, _iota_ref, arity=0)


def _dim_values_infer(attrs, ts):
    values = tuple(attrs["values"])
    _check(attrs.get("dtype", "i64") in ("i64", "i32"), "dtype must be i64 or i32")
    return [TensorType((len(values),), dtypes.from_name(attrs.get("dtype", "i64")))]


def _dim_values_ref(attrs, *_):
    """The dims' values; symbolic ones (an importer evaluating shapes) stay DimExprs in an object array."""
    values = list(attrs["values"])
    if all(D.is_static(x) for x in values):
        return [np.array(values, dtypes.from_name(attrs.get("dtype", "i64")).np)]
    return [np.array(values, dtype=object)]


# A tensor of sizes, some dynamic: an ONNX Shape or StableHLO get_dimension_size of a dynamic tensor.
_def("dim_values", SOURCE, _dim_values_infer, _dim_values_ref, arity=0)


def _gather_infer(attrs, ts):
    data, idx = ts
    ax = attrs["axis"]
    _check(0 <= ax < data.rank, f"axis {ax} out of range for rank {data.rank}")
    _check(idx.dtype in (dtypes.i64, dtypes.i32), f"indices must be i32 or i64, got {idx.dtype}")
    return [TensorType(data.shape[:ax] + idx.shape + data.shape[ax + 1:], data.dtype)]


def _gather_ref(attrs, data, idx):
    ax = attrs["axis"]
    n = data.shape[ax]
    i = np.where(idx < 0, idx + n, idx)
    if np.any((i < 0) | (i >= n)):
        raise IndexError(f"gather index out of range for axis of size {n}")
    return [np.take(data, i, axis=ax)]


_def("gather", INJECTIVE, _gather_infer, _gather_ref, arity=2)


# ------------------------------------------------------------------ reductions

REDUCE_KINDS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


def _reduce_infer(attrs, ts):
    (t,) = ts
    axes = tuple(attrs["axes"])
    _check(attrs.get("kind") in REDUCE_KINDS, f"kind must be one of {sorted(REDUCE_KINDS)}")
    _check(list(axes) == sorted(set(axes)) and all(0 <= a < t.rank for a in axes),
           f"axes {axes} must be sorted, unique and within rank {t.rank}")
    _check(t.dtype != dtypes.boolean, "cannot reduce bool")
    _check(not t.dtype.bits, f"{t.dtype} is a storage type: convert to a wider type before reducing")
    _check(not t.dtype.is_scale, f"{t.dtype} is a scale type (powers of two): convert to a wider type before reducing")
    return [TensorType(tuple(d for i, d in enumerate(t.shape) if i not in axes), t.dtype)]


def _reduce_ref(attrs, x):
    fn = REDUCE_KINDS[attrs["kind"]]
    axes = tuple(attrs["axes"])
    cd = dtypes.compute_np(x.dtype) if dtypes.is_float_np(x.dtype) else x.dtype
    if not axes:
        return [x.copy()]
    if x.size == 0:   # an empty reduction yields the identity (max: -inf or the type's minimum)
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [np.full(shape, _reduce_identity(attrs["kind"], np.dtype(cd))).astype(x.dtype)]
    return [np.asarray(fn(x.astype(cd), axis=axes)).astype(x.dtype)]


def _reduce_identity(kind: str, dt: np.dtype):
    if kind in ("sum", "prod"):
        return 0 if kind == "sum" else 1
    if dtypes.is_float_np(dt):
        return -np.inf if kind == "max" else np.inf
    return np.iinfo(dt).min if kind == "max" else np.iinfo(dt).max


_def("reduce", REDUCTION, _reduce_infer, _reduce_ref, lambda a, i, o: i[0].size, 1)


# ------------------------------------------------------------------ dot / conv

def round_tf32(a: np.ndarray) -> np.ndarray:
    """f32 values rounded to tf32 (10 mantissa bits, nearest, ties away from zero): PTX cvt.rna.tf32.f32.

    dot_general and convolution with attrs precision='tf32' (set by `--precision tf32`) multiply
    their operands rounded this way and accumulate in f32, which is what the tensor cores compute.
    """
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    finite = (u & 0x7F800000) != 0x7F800000
    r = np.where(finite, (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000), u)
    return r.astype(np.uint32).view(np.float32)


def _tf32_operands(attrs, *xs):
    if attrs.get("precision", "default") == "tf32":
        return tuple(round_tf32(x) if x.dtype == np.float32 else x for x in xs)
    return xs


def _dot_dims(attrs):
    return (tuple(attrs["lhs_batch"]), tuple(attrs["rhs_batch"]),
            tuple(attrs["lhs_contract"]), tuple(attrs["rhs_contract"]))


def dot_free_dims(attrs, lhs_rank, rhs_rank):
    """(lhs free dims, rhs free dims) in result order."""
    lb, rb, lc, rc = _dot_dims(attrs)
    return ([d for d in range(lhs_rank) if d not in lb + lc],
            [d for d in range(rhs_rank) if d not in rb + rc])


PRECISION_CONFIGS = ("default", "tf32")


def _check_precision(attrs, ts):
    p = attrs.get("precision", "default")
    _check(p in PRECISION_CONFIGS, f"precision must be one of {PRECISION_CONFIGS}, got {p!r}")
    _check(p == "default" or ts[0].dtype == dtypes.f32, "precision='tf32' needs f32 operands")


INTEGER_MMA = ("i8", "u8")


def result_dtype(attrs, a, b) -> dtypes.DType:
    """The element type a dot_general / convolution produces.

    Float operands of one dtype give that dtype. attrs['out_dtype'] names a
    wider accumulate type for 8-bit operands, as tensor-core mma computes it:
    i8/u8 (either, per operand) -> 'i32' (exact products, sums wrap mod 2**32
    like mma's s32 accumulator), and 1-byte floats (float8) -> 'f32' (exact
    products summed in f32). An integer convolution may also name
    attrs['pad_value']: the integer its padding holds (an activation's zero
    point, so that padding dequantizes to 0 as it does in float).
    """
    out = attrs.get("out_dtype")
    _check(not (a.dtype.is_scale or b.dtype.is_scale),
           f"{a.dtype} x {b.dtype}: f8e8m0fnu is a scale type, not a matrix operand; convert it to a wider type first")
    if out is None:
        _check(a.dtype == b.dtype and a.dtype.is_float, f"operands must share a float dtype: {a.dtype}, {b.dtype}")
        return a.dtype
    if a.dtype.name in INTEGER_MMA or b.dtype.name in INTEGER_MMA:
        _check(a.dtype.name in INTEGER_MMA and b.dtype.name in INTEGER_MMA and out == "i32",
               f"integer operands {a.dtype} x {b.dtype} need out_dtype='i32' and both operands i8/u8, got {out!r}")
        return dtypes.i32
    _check(a.dtype == b.dtype and a.dtype.is_float and a.dtype.itemsize == 1 and out == "f32",
           f"out_dtype={out!r} needs i8/u8 operands (-> 'i32') or one 1-byte float dtype (-> 'f32'), "
           f"got {a.dtype} x {b.dtype}")
    return dtypes.from_name(out)


def _accumulate_operands(attrs, *xs):
    """Operands as the reference multiplies them: int64 for integer mma, f64 for f64 (the kernels
    accumulate f64 in double), else f32."""
    if attrs.get("out_dtype") == "i32":
        return tuple(x.astype(np.int64) for x in xs)
    if all(x.dtype == np.float64 for x in xs):
        return xs
    return tuple(x.astype(np.float32) for x in xs)


def _dot_infer(attrs, ts):
    a, b = ts
    _check_precision(attrs, ts)
    lb, rb, lc, rc = _dot_dims(attrs)
    _check(len(lb) == len(rb) and len(lc) == len(rc), "batch/contracting dim lists differ in length")
    _check(len(set(lb + lc)) == len(lb + lc) and all(0 <= d < a.rank for d in lb + lc), "bad lhs dims")
    _check(len(set(rb + rc)) == len(rb + rc) and all(0 <= d < b.rank for d in rb + rc), "bad rhs dims")
    _check(all(a.shape[x] == b.shape[y] for x, y in zip(lb, rb)), "batch dim sizes differ")
    _check(all(a.shape[x] == b.shape[y] for x, y in zip(lc, rc)),
           f"contracting dim sizes differ: {[a.shape[x] for x in lc]} vs {[b.shape[y] for y in rc]}")
    out = result_dtype(attrs, a, b)
    lf, rf = dot_free_dims(attrs, a.rank, b.rank)
    shape = tuple(a.shape[d] for d in lb) + tuple(a.shape[d] for d in lf) + tuple(b.shape[d] for d in rf)
    return [TensorType(shape, out)]


def _dot_ref(attrs, a, b):
    a, b = _tf32_operands(attrs, a, b)
    lb, rb, lc, rc = _dot_dims(attrs)
    lf, rf = dot_free_dims(attrs, a.ndim, b.ndim)
    A, B = _accumulate_operands(attrs, a.transpose(lb + tuple(lf) + lc), b.transpose(rb + rc + tuple(rf)))
    bs = A.shape[:len(lb)]
    m = A.shape[len(lb):len(lb) + len(lf)]
    n = B.shape[len(rb) + len(rc):]
    k = _size(A.shape[len(lb) + len(lf):])
    A2 = A.reshape(_size(bs), _size(m), k)
    B2 = B.reshape(_size(bs), k, _size(n))
    out = np.matmul(A2, B2).reshape(bs + m + n)
    return [out.astype(_out_np(attrs, a))]


def _out_np(attrs, a):
    out = attrs.get("out_dtype")
    return dtypes.from_name(out).np if out else a.dtype


def _dot_flops(attrs, ins, outs):
    lb, rb, lc, rc = _dot_dims(attrs)
    k = _size([ins[0].shape[d] for d in lc])
    return 2 * outs[0].size * k


_def("dot_general", DOT, _dot_infer, _dot_ref, _dot_flops, 2)


def conv_out_dim(size, k, stride, lo, hi, dilation):
    return (size + lo + hi - dilation * (k - 1) - 1) // stride + 1


CONV_LAYOUTS = ("NCHW", "NHWC")


def conv_layout_perms(rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(to channels-last, back to channels-first) permutations for a rank-`rank` tensor.

    NCHW -> NHWC is (0, 2, ..., r-1, 1); the same permutation takes OIHW weights to OHWI.
    """
    to_last = (0,) + tuple(range(2, rank)) + (1,)
    back = (0, rank - 1) + tuple(range(1, rank - 1))
    return to_last, back


def _conv_layout(attrs) -> str:
    layout = attrs.get("layout", "NCHW")
    _check(layout in CONV_LAYOUTS, f"layout must be one of {CONV_LAYOUTS}, got {layout!r}")
    return layout


def _conv_infer(attrs, ts):
    _check_precision(attrs, ts)
    """layout NCHW: x (N, C, *S), w (O, C/g, *K) -> (N, O, *S');
    layout NHWC: x (N, *S, C), w (O, *K, C/g) -> (N, *S', O). Same attributes either way."""
    x, w = ts
    if _conv_layout(attrs) == "NHWC":
        _check(x.rank >= 3 and w.rank == x.rank, f"input {x.shape} and weight {w.shape} need rank >= 3 and equal ranks")
        _, back = conv_layout_perms(x.rank)
        x, w = (TensorType(tuple(t.shape[i] for i in back), t.dtype) for t in (x, w))
        (out,) = _conv_infer(dict(attrs, layout="NCHW"), [x, w])
        to_last, _ = conv_layout_perms(x.rank)
        return [TensorType(tuple(out.shape[i] for i in to_last), out.dtype)]
    nsp = x.rank - 2
    _check(nsp >= 1 and w.rank == x.rank, f"input {x.shape} and weight {w.shape} need rank >= 3 and equal ranks")
    strides, dil, pads, g = tuple(attrs["strides"]), tuple(attrs["dilations"]), attrs["padding"], attrs["groups"]
    _check(len(strides) == len(dil) == len(pads) == nsp, "strides/dilations/padding need one entry per spatial dim")
    _check(g >= 1 and x.shape[1] == w.shape[1] * g and w.shape[0] % g == 0,
           f"channels: input C={x.shape[1]}, weight {w.shape}, groups={g} do not agree")
    out_dt = result_dtype(attrs, x, w)
    _check(attrs.get("pad_value", 0) == 0 or out_dt == dtypes.i32,
           "pad_value (the quantized zero point the padding holds) needs integer operands and out_dtype='i32'")
    sp = tuple(conv_out_dim(x.shape[2 + i], w.shape[2 + i], strides[i], pads[i][0], pads[i][1], dil[i])
               for i in range(nsp))
    _check(all(s >= 1 for s in sp), f"output spatial size {sp} is empty")
    return [TensorType((x.shape[0], w.shape[0]) + sp, out_dt)]


def _window_views(xp, kshape, strides, dil, out_sp):
    """Yield (kernel position, strided view of xp) for every window offset."""
    for pos in np.ndindex(*kshape):
        sl = tuple(slice(p * d, p * d + (o - 1) * s + 1, s)
                   for p, d, s, o in zip(pos, dil, strides, out_sp))
        yield pos, xp[(Ellipsis,) + sl]


def _conv_ref(attrs, x, w):
    if attrs.get("layout", "NCHW") == "NHWC":   # the same sums, read and written channels-last
        to_last, back = conv_layout_perms(x.ndim)
        (out,) = _conv_ref(dict(attrs, layout="NCHW"), x.transpose(back), w.transpose(back))
        return [_contig(out.transpose(to_last))]
    strides, dil, pads, g = tuple(attrs["strides"]), tuple(attrs["dilations"]), attrs["padding"], attrs["groups"]
    xf, wf = _tf32_operands(attrs, *_accumulate_operands(attrs, x, w))
    xp = np.pad(xf, [(0, 0), (0, 0)] + [tuple(p) for p in pads], constant_values=attrs.get("pad_value", 0))
    out_sp = _conv_infer(dict(attrs, out_dtype=None, pad_value=0),
                         [TensorType(x.shape, dtypes.f32), TensorType(w.shape, dtypes.f32)])[0].shape[2:]
    n, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // g, o // g
    out = np.zeros((n, o) + tuple(out_sp), xf.dtype)
    for pos, view in _window_views(xp, w.shape[2:], strides, dil, out_sp):
        for gi in range(g):
            xs = view[:, gi * cg:(gi + 1) * cg]                       # (N, Cg, *S)
            ws = wf[(slice(gi * og, (gi + 1) * og), slice(None)) + pos]  # (Og, Cg)
            out[:, gi * og:(gi + 1) * og] += np.einsum("nc...,oc->no...", xs, ws)
    return [out.astype(_out_np(attrs, x))]


def _conv_flops(attrs, ins, outs):
    w = ins[1]
    return 2 * outs[0].size * _size(w.shape[1:])


_def("convolution", CONV, _conv_infer, _conv_ref, _conv_flops, 2)

WINDOW_KINDS = ("max", "sum")


def _window_infer(attrs, ts):
    (x,) = ts
    win, st, pads, dil = (tuple(attrs["window"]), tuple(attrs["strides"]), attrs["padding"],
                          tuple(attrs["dilations"]))
    _check(attrs.get("kind") in WINDOW_KINDS, f"kind must be one of {WINDOW_KINDS}")
    _check(not x.dtype.bits, f"{x.dtype} is a storage type: convert to a wider type before reduce_window")
    _check(not x.dtype.is_scale,
           f"{x.dtype} is a scale type (powers of two): convert to a wider type before reduce_window")
    _check(len(win) == len(st) == len(pads) == len(dil) == x.rank, "window attributes need one entry per dim")
    shape = tuple(conv_out_dim(x.shape[i], win[i], st[i], pads[i][0], pads[i][1], dil[i]) for i in range(x.rank))
    _check(all(s >= 1 for s in shape), f"output shape {shape} is empty")
    return [TensorType(shape, x.dtype)]


def _window_ref(attrs, x):
    win, st, pads, dil = (tuple(attrs["window"]), tuple(attrs["strides"]), attrs["padding"],
                          tuple(attrs["dilations"]))
    kind = attrs["kind"]
    xf = x.astype(dtypes.compute_np(x.dtype)) if dtypes.is_float_np(x.dtype) else x
    init = -np.inf if kind == "max" else 0
    if kind == "max" and xf.dtype.kind in "iu":
        init = np.iinfo(xf.dtype).min
    xp = np.pad(xf, [tuple(p) for p in pads], constant_values=init)
    out_shape = _window_infer(attrs, [TensorType(x.shape, dtypes.f32)])[0].shape
    out = np.full(out_shape, init, dtype=xf.dtype)
    for _, view in _window_views(xp, win, st, dil, out_shape):
        out = np.maximum(out, view) if kind == "max" else out + view
    return [out.astype(x.dtype)]


_def("reduce_window", WINDOW, _window_infer, _window_ref,
     lambda a, i, o: o[0].size * _size(a["window"]), 1)


def category(op: str) -> str:
    return get(op).category


def reference(op: str, attrs: dict[str, Any], *arrays: np.ndarray) -> list[np.ndarray]:
    return get(op).reference(attrs, *arrays)
