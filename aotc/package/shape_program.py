"""Dynamic dims -> the engine's shape program: every size the runtime needs, as registers.

The compiler's sizes are DimExprs over the engine's dynamic dims (aotc/ir/dims.py);
the runtime knows only integers. `ShapeProgram` lowers each expression it is
asked for into plan instructions (plan.ShapeOp) once, sharing common
subexpressions, so that evaluating the whole program when input shapes change
yields every grid dim, kernel size argument, output dim and variant predicate.
Registers 0..len(dims)-1 are the dims themselves, in the order of `dims`.
"""
from __future__ import annotations

from aotc.ir import dims as D
from aotc.package import plan as P

_ATOM_OPS = {"floordiv": "floordiv", "ceildiv": "ceildiv", "mod": "mod", "min": "min", "max": "max"}


class ShapeProgram:
    def __init__(self, dims: dict[str, D.DimRange]):
        self.dims = dict(dims)
        self.names = list(self.dims)
        self.ops: list[P.ShapeOp] = []
        self._memo: dict[tuple, int] = {}
        self.checks: list[tuple[P.Reg, str]] = []

    def specs(self) -> list[P.DimSpec]:
        return [P.DimSpec(n, r.min, r.max, r.divisor) for n, r in self.dims.items()]

    def _emit(self, op: str, a: int = 0, b: int = 0, imm: int = 0) -> int:
        key = (op, a, b, imm)
        if key not in self._memo:
            self.ops.append(P.ShapeOp(op, a, b, imm))
            self._memo[key] = len(self.names) + len(self.ops) - 1
        return self._memo[key]

    def register(self, x) -> int:
        """The register holding `x` (an int or a DimExpr over this program's dims)."""
        if D.is_static(x):
            return self._emit("const", imm=int(x))
        total = None
        for monomial, coeff in x.terms:
            term = None if coeff == 1 else self._emit("const", imm=coeff)
            for atom in monomial:
                r = self._atom(atom)
                term = r if term is None else self._emit("mul", term, r)
            if term is None:
                term = self._emit("const", imm=coeff)
            total = term if total is None else self._emit("add", total, term)
        return total

    def _atom(self, atom) -> int:
        if atom[0] == "s":
            if atom[1] not in self.dims:
                raise ValueError(f"dim '{atom[1]}' is not one of the engine's dims {self.names}")
            return self.names.index(atom[1])
        op, a, b = atom
        return self._emit(_ATOM_OPS[op], self.register(a), self.register(b))

    def ref(self, x):
        """`x` itself when static, else the Reg computing it: what plan fields hold."""
        return int(x) if D.is_static(x) else P.Reg(self.register(x))

    def not_(self, r: P.Reg) -> P.Reg:
        return P.Reg(self._emit("eq", r.index, self._emit("const", imm=0)))

    def all_of(self, regs: list[P.Reg]) -> P.Reg | None:
        """A register that is 1 when every one of `regs` is nonzero (None for an empty list)."""
        out = None
        for r in regs:
            out = r.index if out is None else self._emit("and", out, r.index)
        return None if out is None else P.Reg(out)

    def within(self, bounds: dict[str, tuple[int, int]]) -> P.Reg:
        """A register that is 1 exactly when every named dim lies in its (lo, hi) bounds."""
        reg = None
        for name, (lo, hi) in sorted(bounds.items()):
            x = self.names.index(name)
            for cond in (self._emit("le", self.register(lo), x), self._emit("le", x, self.register(hi))):
                reg = cond if reg is None else self._emit("and", reg, cond)
        return P.Reg(reg if reg is not None else self._emit("const", imm=1))


__all__ = ["ShapeProgram"]
