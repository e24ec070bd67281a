"""metrics: the normwise error, NaN/Inf mismatches counted apart, and `--until` conditions."""
import numpy as np
import pytest

from aotc.debug.metrics import Condition, TensorError, measure, parse_condition, worst
from aotc.errors import AotcError
from tests.helpers.rng import fresh_rng


def test_relative_error_is_over_the_largest_reference_magnitude():
    rng, seed = fresh_rng()
    want = rng.standard_normal((5, 7)).astype(np.float32)
    got = want.copy()
    got[2, 3] += 0.25
    e = measure(got, want)
    assert e.max_abs_err == pytest.approx(0.25, rel=1e-6), seed
    assert e.max_rel_err == pytest.approx(0.25 / np.abs(want).max(), rel=1e-6), seed
    assert (e.nan, e.inf) == (0, 0) and not e.fails(0.25 / np.abs(want).max() * 1.01)
    assert e.fails(0.25 / np.abs(want).max() * 0.99)


def test_nonfinite_mismatches_are_counted_not_averaged():
    want = np.array([1.0, 2.0, np.inf, np.nan, 4.0, -np.inf], np.float32)
    got = np.array([1.0, np.nan, np.inf, np.nan, np.inf, 3.0], np.float16)
    e = measure(got, want)
    assert (e.nan, e.inf) == (1, 2)          # NaN for 2.0; Inf for 4.0; 3.0 where the reference is -Inf
    assert e.max_abs_err == 0.0 and e.fails(1.0)


def test_all_zero_reference_uses_the_floor():
    e = measure(np.full(4, 1e-9, np.float32), np.zeros(4, np.float32))
    assert e.max_rel_err == pytest.approx(1e-3)


def test_shape_mismatch_is_an_error():
    with pytest.raises(AotcError, match="cannot compare"):
        measure(np.zeros((2, 3)), np.zeros((3, 2)))


def test_worst_takes_each_maximum_and_sums_mismatches():
    w = worst([TensorError(1.0, 0.1, 1, 0), TensorError(0.5, 0.3, 0, 2)])
    assert (w.max_abs_err, w.max_rel_err, w.nan, w.inf) == (1.0, 0.3, 1, 2)
    assert worst([]).max_rel_err == 0.0


def test_conditions():
    c = parse_condition(" rel > 1e-2 ")
    assert c == Condition("rel", ">", 1e-2) and str(c) == "rel>0.01"
    assert c.holds(TensorError(1.0, 0.02)) and not c.holds(TensorError(1.0, 0.005))
    assert c.holds(TensorError(0.0, 0.0, nan=1))             # a NaN mismatch is an infinite error
    assert parse_condition("nonfinite>0").holds(TensorError(0, 0, inf=3))
    assert not parse_condition("abs>=2").holds(TensorError(1.5, 0.0))


@pytest.mark.parametrize("text", ["", "rel", "rel>>1", "ulp>3", "rel>abc", "rel>1e"])
def test_bad_conditions_name_the_form(text):
    with pytest.raises(AotcError, match="rel>1e-2|not a number"):
        parse_condition(text)
