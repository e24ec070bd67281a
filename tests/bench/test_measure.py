"""The timing loop, the error metric and the input sets of aotc.bench.measure."""
import numpy as np
import pytest

from aotc.bench.measure import Timing, make_input_sets, max_errors, time_runs
from aotc.package.plan import TensorSpec


def test_time_runs_warms_up_rotates_inputs_and_syncs_every_run():
    seen, syncs = [], []
    sets = ["a", "b", "c"]
    timing = time_runs(seen.append, sets, iterations=7, warmup=2, sync=lambda: syncs.append(len(seen)))
    assert seen[:2] == ["a", "b"]                          # warm-up
    assert seen[2:] == ["a", "b", "c", "a", "b", "c", "a"]  # timed runs rotate
    assert timing.runs == 7 and len(syncs) == 8            # once after warm-up, once per timed run
    assert all(s > 0 for s in timing.samples)


def test_time_runs_stages_each_input_set_untimed_before_its_run():
    events = []
    timing = time_runs(lambda x: events.append(("run", x)), ["a", "b"], iterations=3, warmup=1,
                       stage=lambda x: (events.append(("stage", x)), __import__("time").sleep(0.05)))
    assert events == [("stage", "a"), ("run", "a"), ("stage", "a"), ("run", "a"), ("stage", "b"), ("run", "b"),
                      ("stage", "a"), ("run", "a")]
    assert max(timing.samples) < 0.05  # the staging sleep is outside every sample


def test_time_runs_stops_at_max_seconds_after_the_floor():
    timing = time_runs(lambda x: None, [1], iterations=10_000, warmup=0, max_seconds=0.0)
    assert timing.runs == 5


def test_timing_order_statistics():
    t = Timing([float(i) for i in range(1, 201)])
    assert t.p50 == pytest.approx(100.5) and t.p99 == 199.0 and t.mean == pytest.approx(100.5)


def test_max_errors_abs_rel_and_non_finite():
    want = [np.array([1.0, -4.0]), np.array([2.0])]
    got = [np.array([1.5, -4.0], np.float32), np.array([2.0], np.float32)]
    a, r = max_errors(got, want)
    assert a == pytest.approx(0.5) and r == pytest.approx(0.5 / 4.0)
    assert max_errors([np.array([np.nan, 1.0])], [np.array([0.0, 1.0])]) == (float("inf"), float("inf"))
    # a NaN reference must not compare as a small error either (NaN > tol is False)
    assert max_errors([np.array([0.0, 1.0])], [np.array([np.nan, 1.0])]) == (float("inf"), float("inf"))
    assert max_errors([np.array([np.inf])], [np.array([np.inf])]) == (float("inf"), float("inf"))
    with pytest.raises(ValueError, match="shape"):
        max_errors([np.zeros(3)], [np.zeros(4)])


def test_input_sets_are_distinct_typed_and_keep_a_base_in_domain():
    specs = [TensorSpec("x", "f32", (3, 5)), TensorSpec("ids", "i64", (2, 7)), TensorSpec("m", "bool", (4,))]
    sets = make_input_sets(specs, 3, seed=1)
    assert [s["x"].dtype for s in sets] == [np.float32] * 3 and sets[0]["ids"].dtype == np.int64
    assert not np.array_equal(sets[0]["x"], sets[1]["x"])
    assert all((s["ids"] >= 0).all() and (s["ids"] < 8).all() for s in sets)
    base = {"x": np.full((3, 5), 2.0, np.float32), "ids": np.arange(14).reshape(2, 7)}
    based = make_input_sets(specs, 3, seed=1, base=base)
    assert based[0]["x"] is base["x"] or np.array_equal(based[0]["x"], base["x"])
    assert np.allclose(based[1]["x"], 2.0, atol=0.2) and not np.array_equal(based[1]["x"], base["x"])
    assert sorted(based[2]["ids"].ravel()) == list(range(14))        # permuted, same values


def test_median_us_is_the_median_call_time():
    import time as _t
    from aotc.bench.measure import median_us
    calls = []
    slow = median_us(lambda: (calls.append(1), _t.sleep(0.002)), 5)
    assert len(calls) == 5 and 1900 < slow < 50_000
    assert median_us(lambda: None, 50) < slow
