"""Symbolic dims: the sizes a dynamic engine learns only at run time.

A dynamic dim is a name with a range (`DimRange`: min, max, divisor). Shapes
hold `int | DimExpr`; arithmetic on dims (+ - * // % ceildiv dmin dmax) builds
expressions in a canonical form (a polynomial over symbols and opaque
floordiv/mod/ceildiv/min/max atoms), so two expressions are equal exactly when
they have the same canonical form, dims with the same name are equal, and an
expression that simplifies to a constant is a plain int. Reshapes therefore
divide out cleanly: (batch*seq*768) // 768 == batch*seq.

Ranges live in a context (`dim_ranges`), set by the compiler while it works on
a graph: comparisons consult them. A comparison the ranges decide is a bool; one
they do not decide raises `DynamicDecisionError`, naming the dims, so a code
path that would silently pick one behaviour for the whole range fails loudly
instead (use `upper`/`lower` to decide on a bound on purpose). `int()` of an
expression raises the same way.

Expressions render two ways: `repr` for people ("batch*128"), `str`/`format`
as the C expression a kernel computes from its dim arguments
("((long long)aotc_d_batch*128)" style names, see `c_name`).
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import re
from dataclasses import dataclass

from aotc.errors import AotcError

INT_MAX = 2**31 - 1


class DynamicDecisionError(AotcError):
    """A compile-time decision depends on the run-time value of a dynamic dim."""


@dataclass(frozen=True)
class DimRange:
    """The values a dynamic dim takes at run time: min..max (inclusive), multiples of divisor."""
    min: int
    max: int
    divisor: int = 1

    def __post_init__(self):
        if not (0 <= self.min <= self.max <= INT_MAX) or self.divisor < 1:
            raise ValueError(f"bad dim range {self.min}..{self.max} (divisor {self.divisor})")

    def __str__(self) -> str:
        return f"{self.min}..{self.max}" + (f" (multiple of {self.divisor})" if self.divisor > 1 else "")


_RANGES: contextvars.ContextVar[dict] = contextvars.ContextVar("aotc_dim_ranges", default={})


@contextlib.contextmanager
def dim_ranges(ranges: dict[str, DimRange]):
    """Make `ranges` (name -> DimRange) the ranges comparisons consult, inside the block."""
    token = _RANGES.set({**_RANGES.get(), **ranges})
    try:
        yield
    finally:
        _RANGES.reset(token)


def current_ranges() -> dict[str, DimRange]:
    return dict(_RANGES.get())


def c_name(symbol: str) -> str:
    """The C identifier of a dim argument (a prefix keeps it clear of kernel locals)."""
    return "aotc_d_" + re.sub(r"\W", "_", symbol)


# -- the canonical form
# An expression is a polynomial: terms ((atom, ...), coeff) with sorted atoms (repeats = powers) and
# sorted terms, the constant term's atom tuple empty. An atom is ("s", name) or (op, a, b) with op in
# floordiv/ceildiv/mod/min/max and a, b canonical ints or DimExprs.

def _atom_key(atom) -> str:
    return atom[1] if atom[0] == "s" else f"{atom[0]}({atom[1]!r},{atom[2]!r})"


def _make(terms: dict) -> "int | DimExpr":
    terms = {m: c for m, c in terms.items() if c}
    terms = _undo_exact_divisions(terms)
    if not terms:
        return 0
    if list(terms) == [()]:
        return terms[()]
    return DimExpr(tuple(sorted(terms.items(), key=lambda t: [_atom_key(a) for a in t[0]])))


def _step(monomial) -> int:
    """The step between the values a monomial of bare dims takes: the product of their divisors."""
    out = 1
    for atom in monomial:
        if atom[0] != "s":
            return 1
        r = _RANGES.get().get(atom[1])
        out *= r.divisor if r else 1
    return out


def _divides(a, b: int) -> bool:
    """b divides `a` for every value of the dims (each term's coefficient times its dims' divisors)."""
    return all((c * _step(m)) % b == 0 for m, c in _terms(a).items())


def _undo_exact_divisions(terms: dict) -> dict:
    """k*c * floordiv(a, c) -> k * a where c divides a (a dim with divisor 2: 2*(x // 2) == x)."""
    out: dict = {}
    for m, c in terms.items():
        for atom in m:
            if atom[0] == "floordiv" and isinstance(atom[2], int) and c % atom[2] == 0 and _divides(atom[1], atom[2]):
                rest = list(m)
                rest.remove(atom)
                for m2, c2 in _terms(atom[1]).items():
                    key = tuple(sorted(tuple(rest) + m2, key=_atom_key))
                    out[key] = out.get(key, 0) + c // atom[2] * c2
                break
        else:
            out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c}


def _terms(x) -> dict:
    if isinstance(x, DimExpr):
        return dict(x.terms)
    if isinstance(x, bool) or not isinstance(x, int):
        import numpy as np
        if isinstance(x, np.integer):
            return {(): int(x)} if int(x) else {}
        return NotImplemented
    return {(): x} if x else {}


def _add(a, b, sign=1):
    ta, tb = _terms(a), _terms(b)
    if ta is NotImplemented or tb is NotImplemented:
        return NotImplemented
    for m, c in tb.items():
        ta[m] = ta.get(m, 0) + sign * c
    return _make(ta)


def _mul(a, b):
    ta, tb = _terms(a), _terms(b)
    if ta is NotImplemented or tb is NotImplemented:
        return NotImplemented
    out: dict = {}
    for ma, ca in ta.items():
        for mb, cb in tb.items():
            m = tuple(sorted(ma + mb, key=_atom_key))
            out[m] = out.get(m, 0) + ca * cb
    return _make(out)


def _atom(op, a, b):
    return _make({((op, a, b),): 1})


def _exact_div(a, b):
    """a / b when b divides every term of a exactly (b an int or a one-term expression), else None."""
    tb = _terms(b)
    if len(tb) != 1:
        return None
    (mb, cb), = tb.items()
    out = {}
    for m, c in _terms(a).items():
        rest = list(m)
        for atom in mb:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % cb:
            return None
        out[tuple(rest)] = c // cb
    return _make(out)


def floordiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    q = _exact_div(a, b)
    if q is not None:
        return q
    return _atom("floordiv", a, b)


def ceildiv(a, b):
    """ceil(a / b) for b > 0."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    q = _exact_div(a, b)
    if q is not None:
        return q
    return _atom("ceildiv", a, b)


def mod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if _exact_div(a, b) is not None:
        return 0
    if isinstance(b, int) and b > 0 and _divides(a, b):      # the dims' divisors make it exact
        return 0
    if isinstance(b, int):       # reduce the coefficients: (4*s + 6) % 4 == 2 % 4 when s is whole
        reduced = _make({m: c % b for m, c in _terms(a).items()})
        if isinstance(reduced, int):
            return reduced % b
        a = reduced
    return _atom("mod", a, b)


def dmin(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    d = _add(a, b, -1)
    if upper(d) <= 0:
        return a
    if lower(d) >= 0:
        return b
    x, y = sorted((a, b), key=repr)
    return _atom("min", x, y)


def dmax(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    d = _add(a, b, -1)
    if lower(d) >= 0:
        return a
    if upper(d) <= 0:
        return b
    x, y = sorted((a, b), key=repr)
    return _atom("max", x, y)


class DimExpr:
    """A symbolic integer (see the module docstring); build with `sym` and arithmetic."""
    __slots__ = ("terms", "_hash")

    def __init__(self, terms: tuple):
        self.terms = terms
        self._hash = hash(terms)

    # arithmetic
    def __add__(self, o): return _add(self, o)
    def __radd__(self, o): return _add(o, self)
    def __sub__(self, o): return _add(self, o, -1)
    def __rsub__(self, o): return _add(o, self, -1)
    def __mul__(self, o): return _mul(self, o)
    def __rmul__(self, o): return _mul(o, self)
    def __neg__(self): return _mul(self, -1)
    def __pos__(self): return self

    def __floordiv__(self, o):
        return NotImplemented if _terms(o) is NotImplemented else floordiv(self, o)

    def __rfloordiv__(self, o):
        return NotImplemented if _terms(o) is NotImplemented else floordiv(o, self)

    def __mod__(self, o):
        return NotImplemented if _terms(o) is NotImplemented else mod(self, o)

    def __rmod__(self, o):
        return NotImplemented if _terms(o) is NotImplemented else mod(o, self)

    def __truediv__(self, o):
        raise DynamicDecisionError(f"true division of the dynamic dim {self!r}: use floordiv or ceildiv")

    __rtruediv__ = __truediv__

    # identity
    def __eq__(self, o):
        return isinstance(o, DimExpr) and o.terms == self.terms

    def __ne__(self, o):
        return not self.__eq__(o)

    def __hash__(self):
        return self._hash

    # decisions
    def _decide(self, o, op: str) -> bool:
        """self <op> o for op in < <= > >=, when the ranges decide it."""
        d = _add(o, self, -1) if op in ("<", "<=") else _add(self, o, -1)    # decide d > 0 (or >= 0)
        if d is NotImplemented:
            return NotImplemented
        strict = op in ("<", ">")
        lo, hi = lower(d), upper(d)
        if (lo > 0) if strict else (lo >= 0):
            return True
        if (hi <= 0) if strict else (hi < 0):
            return False
        raise DynamicDecisionError(f"whether {self!r} {op} {o!r} depends on {_ranges_of(self, o)}")

    def __lt__(self, o): return self._decide(o, "<")
    def __le__(self, o): return self._decide(o, "<=")
    def __gt__(self, o): return self._decide(o, ">")
    def __ge__(self, o): return self._decide(o, ">=")

    def __bool__(self):
        if lower(self) > 0 or upper(self) < 0:
            return True
        if lower(self) == upper(self) == 0:
            return False
        raise DynamicDecisionError(f"whether {self!r} is zero depends on {_ranges_of(self)}")

    def __index__(self):
        raise DynamicDecisionError(f"a static size is needed where the dynamic dim {self!r} "
                                   f"({_ranges_of(self)}) is used")

    __int__ = __index__

    # rendering
    def __repr__(self) -> str:
        return _render(self, lambda s: s, human=True)

    def __str__(self) -> str:
        return _render(self, c_name, human=False)

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(str(self), spec)

    @property
    def symbols(self) -> set[str]:
        return symbols(self)


def sym(name: str) -> DimExpr:
    """The dynamic dim called `name`."""
    return DimExpr(((((("s", name),), 1),)))


def is_static(x) -> bool:
    return not isinstance(x, DimExpr)


def as_dim(x):
    """A shape entry: a DimExpr as is, anything integral (numpy ints too) as an int."""
    return x if isinstance(x, DimExpr) else int(x)


def symbols(x) -> set[str]:
    """Names of the dynamic dims `x` (an int, a DimExpr, or a tuple/list of them) depends on."""
    if isinstance(x, (tuple, list)):
        return set().union(*(symbols(e) for e in x)) if x else set()
    if not isinstance(x, DimExpr):
        return set()
    out = set()
    for m, _ in x.terms:
        for atom in m:
            if atom[0] == "s":
                out.add(atom[1])
            else:
                out |= symbols(atom[1]) | symbols(atom[2])
    return out


def _ranges_of(*xs) -> str:
    rs = current_ranges()
    names = sorted(set().union(*(symbols(x) for x in xs)))
    return ", ".join(f"{n} in {rs[n]}" if n in rs else f"{n} (no range)" for n in names)


# -- bounds: sound interval arithmetic (dims are >= 0)

def _bounds(x) -> tuple[int, int]:
    if not isinstance(x, DimExpr):
        return int(x), int(x)
    lo = hi = 0
    for m, c in x.terms:
        mlo, mhi = 1, 1
        for atom in m:
            alo, ahi = _atom_bounds(atom)
            cands = (mlo * alo, mlo * ahi, mhi * alo, mhi * ahi)
            mlo, mhi = min(cands), max(cands)
        lo += min(c * mlo, c * mhi)
        hi += max(c * mlo, c * mhi)
    return lo, hi


def _atom_bounds(atom) -> tuple[int, int]:
    if atom[0] == "s":
        r = _RANGES.get().get(atom[1])
        return (r.min, r.max) if r else (0, INT_MAX)
    op, a, b = atom
    (alo, ahi), (blo, bhi) = _bounds(a), _bounds(b)
    if op in ("floordiv", "ceildiv"):
        if blo <= 0:
            return -(2**62), 2**62
        f = (lambda p, q: p // q) if op == "floordiv" else (lambda p, q: -(-p // q))
        cands = [f(p, q) for p in (alo, ahi) for q in (blo, bhi)]
        return min(cands), max(cands)
    if op == "mod":
        if blo <= 0:
            return -(2**62), 2**62
        return (0, min(bhi - 1, ahi)) if alo >= 0 else (0, bhi - 1)
    if op == "min":
        return min(alo, blo), min(ahi, bhi)
    return max(alo, blo), max(ahi, bhi)


def known(x) -> int | None:
    """`x`'s value when the current ranges leave it only one (a static int, or dims pinned), else None."""
    lo, hi = _bounds(x)
    return lo if lo == hi else None


def upper(x) -> int:
    """The largest value `x` takes over the current ranges (sound, maybe not tight)."""
    return _bounds(x)[1]


def lower(x) -> int:
    return _bounds(x)[0]


# -- evaluation and substitution

def substitute(x, env: dict):
    """`x` with the dims named in `env` replaced by their values (ints or DimExprs)."""
    if isinstance(x, (tuple, list)):
        return type(x)(substitute(e, env) for e in x)
    if not isinstance(x, DimExpr):
        return x
    total = 0
    for m, c in x.terms:
        term = c
        for atom in m:
            if atom[0] == "s":
                v = env.get(atom[1], sym(atom[1]))
            else:
                op, a, b = atom
                a, b = substitute(a, env), substitute(b, env)
                v = {"floordiv": floordiv, "ceildiv": ceildiv, "mod": mod, "min": dmin, "max": dmax}[op](a, b)
            term = term * v
        total = total + term
    return total


def evaluate(x, env: dict[str, int]) -> int:
    """The value of `x` when every dim it names has its value in `env`."""
    v = substitute(x, env)
    if isinstance(v, DimExpr):
        raise KeyError(f"no value for dim(s) {sorted(symbols(v))} of {x!r}")
    return v


def specialize_value(obj, env: dict):
    """`obj` (attrs: nested tuples, lists, dicts) with every DimExpr evaluated under `env`."""
    if isinstance(obj, DimExpr):
        return substitute(obj, env)
    if isinstance(obj, tuple):
        return tuple(specialize_value(e, env) for e in obj)
    if isinstance(obj, list):
        return [specialize_value(e, env) for e in obj]
    if isinstance(obj, dict):
        return {k: specialize_value(v, env) for k, v in obj.items()}
    return obj


def contains_dims(obj) -> bool:
    if isinstance(obj, DimExpr):
        return True
    if isinstance(obj, (tuple, list)):
        return any(contains_dims(e) for e in obj)
    if isinstance(obj, dict):
        return any(contains_dims(v) for v in obj.values())
    return False


# -- rendering

def _render(x, name, human: bool) -> str:
    if not isinstance(x, DimExpr):
        return str(x)
    parts = []
    for m, c in x.terms:
        factors = [_render_atom(a, name, human) for a in m]
        if not factors:
            parts.append(str(c))
            continue
        if c != 1:
            factors = [str(c)] + factors
        parts.append("*".join(factors))
    text = " + ".join(parts).replace("+ -", "- ")
    if human:
        return text
    return f"({text})"


def _render_atom(atom, name, human: bool) -> str:
    if atom[0] == "s":
        r = _RANGES.get().get(atom[1])
        if not human and r is not None and r.min == r.max:     # a dim pinned by a variant's bucket
            return str(r.min)
        return name(atom[1])
    op, a, b = atom
    ra, rb = _render(a, name, human), _render(b, name, human)
    if human:
        return f"{op}({ra}, {rb})"
    if lower(a) < 0 and op in ("floordiv", "ceildiv", "mod"):     # C's / and % truncate: floor them
        return {"floordiv": f"({ra} >= 0 ? {ra} / {rb} : -((-{ra} + {rb} - 1) / {rb}))",
                "ceildiv": f"({ra} >= 0 ? ({ra} + {rb} - 1) / {rb} : -((-{ra}) / {rb}))",
                "mod": f"((({ra} % {rb}) + {rb}) % {rb})"}[op]
    return {"floordiv": f"({ra} / {rb})", "ceildiv": f"(({ra} + {rb} - 1) / {rb})", "mod": f"({ra} % {rb})",
            "min": f"({ra} < {rb} ? {ra} : {rb})", "max": f"({ra} > {rb} ? {ra} : {rb})"}[op]


def broadcast_shapes(*shapes) -> tuple:
    """numpy's broadcast of shapes whose dims may be dynamic.

    A dynamic dim broadcasts against 1 and against itself. Against anything else the
    graph would mean different things inside one range (broadcast where the dim is 1,
    elementwise where it is not), so that is refused, naming the dims.
    """
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        ds = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        kept = list(dict.fromkeys(d for d in ds if not (is_static(d) and d == 1)))
        if not kept:
            out.append(1)
        elif len(kept) == 1:
            out.append(kept[0])
        elif all(is_static(d) for d in kept):
            raise ValueError(f"shapes {[list(map(repr, s)) for s in shapes]} do not broadcast")
        else:
            fixed = [d for d in kept if is_static(d)]
            dyn = [d for d in kept if not is_static(d)]
            flag = (f" (--dynamic {next(iter(symbols(dyn[0])))}={fixed[0]}..{fixed[0]})"
                    if len(dyn) == 1 and len(symbols(dyn[0])) == 1 else "")
            works = (f"it means one thing only where {' and '.join(map(repr, dyn))} is {fixed[0]} or 1{flag}"
                     if len(fixed) == 1 else "make them one dim (the same name) or pin one")
            raise DynamicDecisionError(
                f"dims {', '.join(map(repr, kept))} broadcast against each other ({_ranges_of(*kept)}): "
                f"the result would depend on whether a dim is 1 at run time; {works}")
    return tuple(out)


def prod(xs):
    """The product of dims (math.prod that keeps expressions)."""
    return math.prod(xs, start=1)


__all__ = ["DimExpr", "DimRange", "DynamicDecisionError", "sym", "is_static", "as_dim", "symbols", "upper", "lower",
           "floordiv", "ceildiv", "mod", "dmin", "dmax", "dim_ranges", "known", "current_ranges", "substitute",
           "evaluate", "specialize_value", "contains_dims", "c_name", "prod", "broadcast_shapes", "INT_MAX"]
