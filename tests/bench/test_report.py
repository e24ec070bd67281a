"""The bench table, JSON, CSV and chart writers (aotc.bench.report), on a fixed result."""
import csv
import json

import pytest

from aotc.bench.report import format_table, write_csv, write_json, write_plot

RESULT = {"model": "m.onnx", "kind": "onnx", "device": "cuda", "precision": "fp16", "batch": 8,
          "input_sets": 4, "warmup": 10, "iterations": 100, "reference": "onnxruntime-cpu fp32",
          "roofline_floor_ms": 0.0125,
          "rows": [{"system": "aotc", "precision": "fp16", "status": "ok", "p50_ms": 0.05, "p99_ms": 0.07,
                    "runs": 100, "throughput": 160000.0, "max_abs_err": 1.5e-3, "max_rel_err": 2.5e-4,
                    "build_s": 3.25, "pct_of_roofline": 25.0},
                   {"system": "tensorrt", "precision": "fp16", "status": "not installed (pip install tensorrt)"}]}


def test_table_has_every_system_and_the_roofline():
    text = format_table(RESULT)
    lines = text.splitlines()
    assert "p50 ms" in lines[1] and "% roofline" in lines[1]
    aotc = lines[2].split()
    assert aotc[:4] == ["aotc", "fp16", "0.050", "0.070"] and "2.50e-04" in aotc and "25.0%" in aotc
    assert "not installed (pip install tensorrt)" in lines[3]
    assert "12.5 us" in lines[-1]


def test_json_and_csv_round_trip(tmp_path):
    write_json(RESULT, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text()) == RESULT
    write_csv([RESULT, RESULT], tmp_path / "r.csv")
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert len(rows) == 4 and rows[0]["system"] == "aotc" and float(rows[0]["p50_ms"]) == 0.05
    assert rows[1]["status"].startswith("not installed") and rows[1]["p50_ms"] == ""


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    write_plot(RESULT, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
