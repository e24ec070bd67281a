"""DimExprs lowered to the engine's shape program evaluate as the expressions do (shape_program.py)."""
import itertools

import numpy as np

from aotc.ir import dims as D
from aotc.ir.dims import DimRange, dim_ranges, sym
from aotc.package import plan as P
from aotc.package.shape_program import ShapeProgram

RANGES = {"batch": DimRange(1, 64), "past": DimRange(0, 100), "seq": DimRange(1, 512)}
B, PAST, S = sym("batch"), sym("past"), sym("seq")


def test_program_computes_every_expression():
    with dim_ranges(RANGES):
        exprs = [B, B * S * 768, D.ceildiv(B * S, 256), D.dmin(D.ceildiv(B * S * 12, 8), 4096), PAST + S,
                 D.mod(S + 7, 32), D.floordiv(S * 3 + PAST, 5) - 1, D.dmax(1, D.dmin(B * (PAST + S), 4096)), 17]
        prog = ShapeProgram(RANGES)
        refs = [prog.ref(e) for e in exprs]
        plan = P.EnginePlan([], [], 0, b"", [], dims=prog.specs(), program=prog.ops)
    assert refs[-1] == 17 and all(isinstance(r, P.Reg) for r in refs[:-1])
    assert [d.name for d in plan.dims] == ["batch", "past", "seq"]
    rng = np.random.default_rng(0)
    for b, p, s in itertools.chain([(1, 0, 1), (64, 100, 512)], rng.integers((1, 0, 1), (65, 101, 513), (40, 3))):
        env = {"batch": int(b), "past": int(p), "seq": int(s)}
        regs = P.evaluate_program(plan, env)
        for e, r in zip(exprs[:-1], refs[:-1]):
            assert regs[r.index] == D.evaluate(e, env), (e, env)


def test_shared_subexpressions_are_computed_once():
    with dim_ranges(RANGES):
        prog = ShapeProgram(RANGES)
        first = prog.register(B * S * 4)
        n = len(prog.ops)
        assert prog.register(B * S * 4) == first and len(prog.ops) == n


def test_within_is_one_exactly_inside_the_bounds():
    with dim_ranges(RANGES):
        prog = ShapeProgram(RANGES)
        r = prog.within({"batch": (1, 8), "seq": (1, 64)})
        plan = P.EnginePlan([], [], 0, b"", [], dims=prog.specs(), program=prog.ops)
    for b, s in itertools.product((1, 8, 9, 64), (1, 64, 65)):
        assert P.evaluate_program(plan, {"batch": b, "past": 0, "seq": s})[r.index] == int(b <= 8 and s <= 64)
