"""DimExpr: canonical forms, exact division, bounds, decisions, C rendering (aotc/ir/dims.py)."""
import itertools

import numpy as np
import pytest

from aotc.ir import dims as D
from aotc.ir.dims import DimRange, DynamicDecisionError, dim_ranges, sym

B, S = sym("batch"), sym("seq")
RANGES = {"batch": DimRange(1, 64), "seq": DimRange(1, 512)}


def test_canonical_forms_compare_by_value():
    assert B * S * 2 == 2 * S * B and hash(B * S * 2) == hash(2 * S * B)
    assert B + S - S == B and isinstance(B - B, int) and B - B == 0
    assert (B * S * 768) // 768 == B * S and D.mod(B * S * 768, 768) == 0
    assert D.ceildiv(768 * B, 256) == 3 * B
    assert D.mod(4 * B + 6, 4) == 2
    assert B != S and B * 2 != B * 3 and B != 1


def test_inexact_division_is_an_atom_that_evaluates_like_python():
    e = D.floordiv(B * 3 + S, 7)
    c = D.ceildiv(S, 32)
    m = D.mod(S + 5, B)
    rng = np.random.default_rng(0)
    for b, s in rng.integers(1, 500, (50, 2)):
        env = {"batch": int(b), "seq": int(s)}
        assert D.evaluate(e, env) == (3 * b + s) // 7
        assert D.evaluate(c, env) == -(-s // 32)
        assert D.evaluate(m, env) == (s + 5) % b


def test_decisions_follow_the_ranges_and_refuse_what_they_do_not_decide():
    with dim_ranges(RANGES):
        assert B >= 1 and B <= 64 and B * S <= 64 * 512 and bool(B)
        assert D.upper(B * S * 4) == 64 * 512 * 4 and D.lower(B * S) == 1
        assert D.dmin(B, 100) == B and D.dmax(B, 0) == B
        with pytest.raises(DynamicDecisionError, match=r"batch in 1\.\.64"):
            _ = B <= 8
        with pytest.raises(DynamicDecisionError, match="static size"):
            int(B)
        with pytest.raises(DynamicDecisionError, match="floordiv or ceildiv"):
            _ = B / 2
    with dim_ranges({"batch": DimRange(1, 8)}):    # narrowed: the same question now has an answer
        assert B <= 8


def test_min_max_keep_an_atom_when_undecided():
    with dim_ranges(RANGES):
        e = D.dmin(D.ceildiv(B * S, 256), 4096)
        assert not D.is_static(e)
        for b, s in itertools.product((1, 7, 64), (1, 300, 512)):
            assert D.evaluate(e, {"batch": b, "seq": s}) == min(-(-b * s // 256), 4096)


def test_c_rendering_names_kernel_arguments():
    with dim_ranges(RANGES):
        assert str(B * 128) == "(128*aotc_d_batch)"
        assert repr(B * 128 + S) == "128*batch + seq"
        assert str(D.ceildiv(S, 32)) == "((((aotc_d_seq) + 32 - 1) / 32))"
        assert f"{B}" == str(B)
    assert D.c_name("past-sequence") == "aotc_d_past_sequence"


def test_broadcast_shapes():
    assert D.broadcast_shapes((B, 1, 4), (1, S, 4)) == (B, S, 4)
    assert D.broadcast_shapes((B, S), (S,)) == (B, S)
    with dim_ranges(RANGES):
        with pytest.raises(DynamicDecisionError, match=r"where batch is 4 or 1 \(--dynamic batch=4..4\)"):
            D.broadcast_shapes((B, 4), (4, 4))
        with pytest.raises(DynamicDecisionError):
            D.broadcast_shapes((B,), (S,))
    with pytest.raises(ValueError, match="do not broadcast"):
        D.broadcast_shapes((3,), (4,))


def test_substitute_symbols_and_specialize_value():
    e = D.floordiv(B * S, 3) + S
    assert D.substitute(e, {"seq": 6}) == 2 * B + 6
    assert D.symbols((B * 2, 3, e)) == {"batch", "seq"}
    attrs = {"shape": (B, S, 4), "nested": [{"x": S + 1}], "k": 2}
    assert D.specialize_value(attrs, {"batch": 2, "seq": 5}) == {"shape": (2, 5, 4), "nested": [{"x": 6}], "k": 2}
    assert D.contains_dims(attrs) and not D.contains_dims({"k": (1, 2)})
    with pytest.raises(KeyError, match="seq"):
        D.evaluate(e, {"batch": 1})


def test_ranges_are_validated():
    with pytest.raises(ValueError):
        DimRange(5, 4)
    with pytest.raises(ValueError):
        DimRange(0, 2**31)
    assert str(DimRange(8, 64, 8)) == "8..64 (multiple of 8)"


def test_divisors_make_divisions_exact():
    x = sym("x")
    with dim_ranges({"x": DimRange(2, 16, 2)}):
        half = D.floordiv(x, 2)
        assert half * 2 == x and 6 * half == 3 * x and D.mod(x, 2) == 0
        assert not D.is_static(D.mod(x, 4))           # a multiple of 2 need not be one of 4
        assert D.prod([half, 2, 3]) == 3 * x          # a reshape (x, 3) -> (x // 2, 2, 3) verifies
    assert D.floordiv(x, 2) * 2 != x                  # without the divisor it stays a floor
