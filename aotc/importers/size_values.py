"""Import-time arithmetic on sizes: elementwise ops on numpy object arrays whose elements may be DimExprs.

A jax.export program computes its shapes from its symbolic dims at run time
(get_dimension_size, i32 arithmetic, floor_divide written with sign/select,
comparisons for its shape assertions); ONNX models do the same with Shape.
StaticValues evaluates those computations at import time with DimExprs
(aotc/ir/dims.py) for the dynamic sizes. numpy's object arrays pass `+ - *`
through, but the IR's references cast to numeric dtypes, and `==` on a
DimExpr is structural, not a decision. So the elementwise ops are computed
here element by element: divisions and remainders truncate like the IR's
integer ops (floor = truncation for sizes, which are >= 0), and comparisons,
sign, abs, min and max are decided over the dims' current ranges: by their
bounds, else by trying every value where the ranges are small (a divisor
decides `mod(b, 2) == 0`), raising DynamicDecisionError where they do not.
"""
from __future__ import annotations

import itertools
import operator

import numpy as np

from aotc.ir import dims as D


def _trunc_div(x, y):
    if D.is_static(x) and D.is_static(y):
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y >= 0) else -q
    return D.floordiv(x, y)


def _trunc_rem(x, y):
    if D.is_static(x) and D.is_static(y):
        return x - _trunc_div(x, y) * y
    return D.mod(x, y)


_MAX_VALUES = 1 << 12     # value combinations of the dims tried where the bounds do not decide


class Undecided:
    """A comparison the ranges leave open. It may still not matter (`False and ?`, `select(?, a, a)`), so it is
    kept as a value; anything that needs it raises DynamicDecisionError with `reason`."""
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return "<undecided>"


def require_decided(a: np.ndarray) -> None:
    """Raise DynamicDecisionError if the array holds an Undecided."""
    if a.dtype == object:
        for x in a.reshape(-1):
            if isinstance(x, Undecided):
                raise D.DynamicDecisionError(x.reason)


def _by_values(fn, *xs, what: str = ""):
    """fn(*xs) when it is the same for every value of the dims in their ranges (divisors included);
    `what` names the decision in the error otherwise."""
    names = sorted(D.symbols(list(xs)))
    rs = D.current_ranges()
    grids = [range(rs[n].min, rs[n].max + 1, rs[n].divisor) for n in names if n in rs]
    if len(grids) == len(names) and int(np.prod([len(g) for g in grids])) <= _MAX_VALUES:
        seen = {fn(*(D.evaluate(x, dict(zip(names, vals))) for x in xs)) for vals in itertools.product(*grids)}
        if len(seen) == 1:
            return seen.pop()
    what = what or f"{fn.__name__} of {', '.join(map(repr, xs))}"
    raise D.DynamicDecisionError(f"{what} depends on the dims' values "
                                 f"({', '.join(f'{n} in {rs[n]}' if n in rs else n for n in names)})")


def _sign(x):
    lo, hi = D.lower(x), D.upper(x)
    if lo > 0:
        return 1
    if hi < 0:
        return -1
    if lo == hi == 0:
        return 0
    return _by_values(lambda v: (v > 0) - (v < 0), x, what=f"the sign of {x!r}")


def _abs(x):
    s = _sign(x)
    return -x if s < 0 else x


def _equal(x, y) -> bool:
    d = x - y
    if D.is_static(d):
        return d == 0
    if D.lower(d) > 0 or D.upper(d) < 0:
        return False
    return _by_values(lambda v: v == 0, d, what=f"whether {x!r} == {y!r}")


def _ordered(op, sign: str):
    def decide(x, y):
        try:
            return op(x, y)
        except D.DynamicDecisionError:
            return _by_values(op, x, y, what=f"whether {x!r} {sign} {y!r}")
    return decide


def _or_undecided(fn):
    def decide(*xs):
        try:
            return bool(fn(*xs))
        except D.DynamicDecisionError as e:
            return Undecided(str(e))
    return decide


def _not(x):
    return x if isinstance(x, Undecided) else not x


def _and(x, y):
    if x is False or y is False:
        return False
    return x if isinstance(x, Undecided) else y


def _or(x, y):
    if x is True or y is True:
        return True
    return x if isinstance(x, Undecided) else y


def _xor(x, y):
    return x if isinstance(x, Undecided) else y if isinstance(y, Undecided) else x != y


def _select(p, a, b):
    if not isinstance(p, Undecided):
        return a if p else b
    if D.is_static(a - b) and a - b == 0:
        return a
    raise D.DynamicDecisionError(p.reason)


_COMPARE = {"EQ": _equal, "NE": lambda x, y: not _equal(x, y), "LT": _ordered(operator.lt, "<"),
            "LE": _ordered(operator.le, "<="), "GT": _ordered(operator.gt, ">"), "GE": _ordered(operator.ge, ">=")}
_LOGIC = {"and": _and, "or": _or, "xor": _xor, "not": _not}
_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": _trunc_div, "rem": _trunc_rem,
           "max": D.dmax, "min": D.dmin}
_UNARY = {"neg": operator.neg, "sign": _sign, "abs": _abs}


def evaluate_on_sizes(op: str, attrs: dict, args: list[np.ndarray], out_dtype) -> list[np.ndarray] | None:
    """The op's results on integer sizes (some DimExprs), or None where the IR's reference applies."""
    if op in _LOGIC and out_dtype.name == "bool":
        return [_elementwise(_LOGIC[op], args, np.bool_, sizes=False)]
    if op == "select":
        return [_elementwise(_select, args, object, sizes=False)]
    if op in ("convert", "compare", "clamp") or op in _BINARY or op in _UNARY:
        for a in args:            # these need the values (reshapes and the like only move them)
            require_decided(a)
    if op == "convert":
        return [args[0]] if not out_dtype.is_float and out_dtype.name != "bool" else None   # sizes stay sizes
    if op == "compare":
        return [_elementwise(_or_undecided(_COMPARE[attrs["direction"]]), args, np.bool_)]
    if op == "clamp":
        return [_elementwise(lambda lo, x, hi: D.dmin(D.dmax(x, lo), hi), args, object)]
    fn = _BINARY.get(op) or _UNARY.get(op)
    if fn is None or out_dtype.is_float:
        return None
    return [_elementwise(fn, args, object)]


def _plain(x, sizes: bool):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, Undecided) or not sizes and not isinstance(x, (int, np.integer)):
        return x
    return D.as_dim(x)


def _elementwise(fn, args, otype, sizes: bool = True) -> np.ndarray:
    """fn over the broadcast elements; a bool result with an Undecided in it stays an object array."""
    cols = np.broadcast_arrays(*(np.asarray(a, dtype=object) for a in args))
    flat = [fn(*(_plain(x, sizes) for x in xs)) for xs in zip(*(c.reshape(-1) for c in cols))]
    shape = cols[0].shape
    if otype is np.bool_ and not any(isinstance(x, Undecided) for x in flat):
        return np.array(flat, dtype=np.bool_).reshape(shape)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)
