"""The importers' expression helper: decompositions written as math, `(x * 0.5 + 1.0).tanh()`, emit IR nodes.

Composite source ops (GELU, Softplus, atan2, batch-norm training, ...) are
decompositions onto the IR's primitive ops. Writing them as chains of
`ctx.add("mul", ...)` hides the formula; `Ex` wraps a Value so that Python
operators and method calls emit the nodes instead. Both importers' contexts
offer what it needs: `ctx.add(op, *inputs, **attrs)` and
`ctx.const(array, dtype)`.

Operands may be another `Ex`, a `Value`, or a Python number; a number becomes
a constant of this expression's dtype, broadcast to its shape. Any unary op
of the IR's op table is a method (`x.exp()`, `x.rsqrt()`); `x.un("not")`
spells the ones whose names are Python keywords.
"""
from __future__ import annotations

import numpy as np

from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir import ops as ir_ops
from aotc.ir.graph import Value


class Ex:
    """A Value with arithmetic operators that emit IR nodes through `ctx`."""

    __slots__ = ("ctx", "v")

    def __init__(self, ctx, v: Value):
        self.ctx, self.v = ctx, v

    def lift(self, o) -> Value:
        """`o` as a Value of this expression's shape: an Ex's value, a Value, or a broadcast number."""
        if isinstance(o, Ex):
            return o.v
        if isinstance(o, Value):
            return o
        dt = self.v.dtype
        if isinstance(o, D.DimExpr):      # a size known at run time (a dynamic dim): computed by the kernel
            c = self.ctx.add("reshape", self.ctx.add("dim_values", values=(o,)), shape=())
            if dt != dtypes.i64:
                c = self.ctx.add("convert", c, dtype=dt.name)
        else:
            c = self.ctx.const(np.array(o, dt.np), dt)
        if not self.v.shape:
            return c
        return self.ctx.add("broadcast_in_dim", c, shape=tuple(self.v.shape), broadcast_dimensions=())

    def _bin(self, op: str, o, rev: bool = False) -> "Ex":
        a, b = self.v, self.lift(o)
        return Ex(self.ctx, self.ctx.add(op, *((b, a) if rev else (a, b))))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __neg__(self): return self.un("neg")

    def max(self, o) -> "Ex": return self._bin("max", o)
    def min(self, o) -> "Ex": return self._bin("min", o)

    def un(self, op: str) -> "Ex":
        """The unary IR op `op` applied to this expression."""
        return Ex(self.ctx, self.ctx.add(op, self.v))

    def __getattr__(self, op: str):
        # unary IR ops as methods: x.exp(), x.sqrt(); anything else is a plain AttributeError
        if op in ir_ops.UNARY:
            return lambda: self.un(op)
        raise AttributeError(f"{type(self).__name__} has no attribute {op!r} (not a unary IR op)")

    def cmp(self, direction: str, o) -> Value:
        """compare(self, o) with direction EQ, NE, LT, LE, GT or GE: a boolean Value."""
        return self.ctx.add("compare", self.v, self.lift(o), direction=direction)

    def where(self, pred: Value, other) -> "Ex":
        """`self` where pred holds, else `other`."""
        return Ex(self.ctx, self.ctx.add("select", pred, self.v, self.lift(other)))
