"""The GPU scripts' shared rules: a NaN never passes, a failing model is a row, parts merge into one report."""
import json

import numpy as np

from aotc.bench.gpu_report import Rows, merge, rel_error, table, within


def test_nan_and_inf_are_infinite_error_and_never_within_tolerance():
    good = np.array([1.0, 2.0], np.float32)
    assert rel_error(good, good) == 0.0
    for bad in (np.array([np.nan, 2.0]), np.array([np.inf, 2.0])):
        assert rel_error(bad, good) == float("inf") and rel_error(good, bad) == float("inf")
    # the rule the old scripts broke: NaN > tol is False, so NaN "passed"
    assert not within(float("nan"), 1e-3) and not within(None, 1e-3) and not within(float("inf"), 1e-3)
    assert within(0.0, 1e-3) and within(1e-3, 1e-3)


def test_a_failure_inside_a_guard_is_an_error_row_and_the_rest_run():
    rows = Rows("demo")
    ran = []
    for name in ("a", "b"):
        with rows.guard(name, "fp32"):
            if name == "a":
                raise RuntimeError("kernel exploded\nsecond line")
            ran.append(name)
            rows.add(name, "fp32", True, err=0.0)
    assert ran == ["b"]
    assert [r["status"] for r in rows.rows] == ["error", "pass"] and rows.failed
    assert rows.rows[0]["detail"] == "RuntimeError: kernel exploded second line"


def test_merge_writes_one_file_and_marks_a_missing_part(tmp_path):
    rows = Rows("gpu_check", str(tmp_path / "gpu_check.json"))
    rows.add("mlp", "fp32", True, cuda_vs_cpu=0.0)  # written at once
    out = merge(str(tmp_path / "all.json"), [str(tmp_path / "gpu_check.json"), str(tmp_path / "gpu_kernels.json")],
                {"stand_in": "1"})
    data = json.loads((tmp_path / "all.json").read_text())
    assert data == out and data["stand_in"] == "1" and not data["passed"]
    assert [(r["check"], r["status"]) for r in data["rows"]] == [("gpu_check", "pass"), ("gpu_kernels", "error")]
    text = table(data["rows"])
    assert "mlp" in text and "2 rows, 1 not passing" in text


def test_a_check_stopped_by_its_time_limit_keeps_its_rows_and_says_so(tmp_path):
    from aotc.bench.gpu_report import note_incomplete
    part = str(tmp_path / "gpu_check_zoo.json")
    rows = Rows("gpu_check", part)
    rows.add("llama", "fp32", True)                       # on disk before the limit strikes
    note_incomplete(part, "gpu_check_zoo", "stopped (exit 124) after 120 s")
    note_incomplete(str(tmp_path / "never.json"), "gpu_kernels", "stopped (exit 137) after 60 s")
    out = merge(str(tmp_path / "all.json"), [part, str(tmp_path / "never.json")])
    assert [(r["model"], r["status"]) for r in out["rows"]] == [
        ("llama", "pass"), ("(rest of the check)", "error"), ("(rest of the check)", "error")]
    assert not out["passed"]
