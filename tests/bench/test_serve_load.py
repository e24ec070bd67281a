"""bench/serve_load.py: the Python model's config, and a short run against the real tritonserver
(both models answer every request correctly and the report says so)."""
from __future__ import annotations

import json

import pytest


from aotc.bench.models import small, zoo
from bench import serve_load
from tests.serving.server import require_tritonserver


def test_python_model_config_mirrors_the_onnx_model():
    model, _ = zoo.with_dynamic_axes(small.mlp(batch=4), axes=("batch",))
    text = serve_load._python_config("ort_mlp", model, 16, 2)
    assert 'backend: "python"' in text and "max_batch_size: 16" in text and "dynamic_batching { }" in text
    assert 'input [{ name: "x", data_type: TYPE_FP32, dims: [32] }]' in text
    assert "dims: [10]" in text and "count: 2" in text


def test_a_short_load_run_checks_every_response(capsys):
    require_tritonserver()
    if not serve_load.python_backend_usable():
        pytest.skip("this Python has no shared libpython for Triton's Python backend stub")
    assert serve_load.main(["--threads", "3", "--requests", "6", "--time-cap", "60", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for name in ("aotc_mlp", "ort_mlp", "aotc_direct"):
        r = report["results"][name]
        assert r["errors"] == 0 and r["checked"] == r["requests"] == 18, r
        assert r["requests_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
