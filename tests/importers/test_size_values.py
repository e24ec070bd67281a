"""Elementwise ops on sizes with dynamic dims: truncating division, decisions over the ranges, undecided values."""
from __future__ import annotations

import numpy as np
import pytest

from aotc.importers.size_values import Undecided, evaluate_on_sizes, require_decided
from aotc.ir import dims as D
from aotc.ir import dtypes

b = D.sym("b")


def _obj(*xs):
    out = np.empty(len(xs), dtype=object)
    out[:] = list(xs)
    return out


def _run(op, *args, dtype=dtypes.i32, **attrs):
    return evaluate_on_sizes(op, attrs, list(args), dtype)[0]


def test_arithmetic_keeps_expressions_and_truncates_like_the_ir():
    with D.dim_ranges({"b": D.DimRange(1, 64)}):
        got = _run("div", _obj(b * 6, -7, 7), np.array([3, 2, -2], np.int32))
        assert list(got) == [b * 2, -3, -3]                # truncation for plain ints, as the IR's div
        assert list(_run("rem", _obj(-7, b * 4), np.array([2, 2], np.int32))) == [-1, 0]
        assert list(_run("max", _obj(b, 0), np.array([0, 5], np.int32))) == [b, 5]
        assert list(_run("sign", _obj(b, -b - 1, 0))) == [1, -1, 0]
        assert _run("convert", _obj(b), dtype=dtypes.i64)[0] == b
        assert evaluate_on_sizes("convert", {}, [_obj(b)], dtypes.f32) is None      # not a size any more


def test_comparisons_decide_by_bounds_then_by_values():
    with D.dim_ranges({"b": D.DimRange(2, 16, 2)}):
        assert _run("compare", _obj(b), np.array([1]), direction="GE", dtype=dtypes.boolean).tolist() == [True]
        # the bounds of mod(b, 2) are 0..1; b's divisor decides it when every value is tried
        assert _run("compare", _obj(D.mod(b, 2)), np.array([0]), direction="EQ", dtype=dtypes.boolean)[0]
    with D.dim_ranges({"b": D.DimRange(1, 16)}):
        open_ = _run("compare", _obj(D.mod(b, 2)), np.array([0]), direction="EQ", dtype=dtypes.boolean)
        assert isinstance(open_[0], Undecided)
        with pytest.raises(D.DynamicDecisionError, match="mod"):
            require_decided(open_)


def test_undecided_values_that_do_not_matter_resolve():
    with D.dim_ranges({"b": D.DimRange(1, 16)}):
        open_ = _run("compare", _obj(D.mod(b, 2), 3), np.array([0, 3]), direction="EQ", dtype=dtypes.boolean)
        assert _run("and", open_, np.array([False, True]), dtype=dtypes.boolean).tolist() == [False, True]
        assert _run("or", open_, np.array([True, False]), dtype=dtypes.boolean).tolist() == [True, True]
        same = _run("select", open_[:1], _obj(b), _obj(b))
        assert same[0] == b
        with pytest.raises(D.DynamicDecisionError):
            _run("select", open_[:1], _obj(b), _obj(b + 1))
        with pytest.raises(D.DynamicDecisionError):
            _run("add", open_, np.array([1, 1]))


def test_simplify_finds_the_affine_form_over_the_ranges():
    from aotc.importers.size_values import simplify
    s = D.sym("s")
    with D.dim_ranges({"s": D.DimRange(1, 40), "b": D.DimRange(2, 16, 2)}):
        assert simplify(D.mod(-1, s)) == s - 1                  # jax's roll computes starts this way
        assert simplify(D.dmin(s - 1, s)) == s - 1
        assert simplify(D.floordiv(b, 2) * 2) == b               # b's divisor makes it exact
        odd = D.floordiv(s, 2)
        assert simplify(odd) is odd                              # not affine: unchanged
    with D.dim_ranges({"s": D.DimRange(1, 1 << 20)}):
        big = D.mod(-1, s)
        assert simplify(big) is big                              # too many values to check: unchanged
