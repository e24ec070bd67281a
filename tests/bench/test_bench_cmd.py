"""`aotc bench` on the cpu device against onnxruntime: the table and the files; one-line errors."""
import json

import onnx
import pytest
from click.testing import CliRunner

from aotc.cli.main import main
from aotc.bench.models.small import mlp

pytest.importorskip("onnxruntime")


def test_bench_prints_the_table_and_writes_json_csv_png(tmp_path):
    pytest.importorskip("matplotlib")
    model, _ = mlp()
    onnx.save(model, tmp_path / "mlp.onnx")
    out = {k: tmp_path / f"r.{k}" for k in ("json", "csv", "png")}
    res = CliRunner().invoke(main, ["bench", str(tmp_path / "mlp.onnx"), "--against", "onnxruntime,tensorrt",
                                    "--batch", "8", "--iterations", "5", "--warmup", "1", "-q",
                                    "--json", str(out["json"]), "--csv", str(out["csv"]),
                                    "--plot", str(out["png"])])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("aotc bench mlp.onnx on cpu: batch 8, fp32")
    assert lines[2].split()[0] == "aotc" and lines[3].split()[0] == "onnxruntime-cpu"
    assert "tensorrt" in lines[4] and "pip install tensorrt" in lines[4]
    result = json.loads(out["json"].read_text())
    aotc = result["rows"][0]
    assert aotc["system"] == "aotc" and aotc["runs"] == 5 and aotc["max_rel_err"] < 1e-5
    assert out["csv"].read_text().count("\n") == 4 and out["png"].read_bytes()[:4] == b"\x89PNG"


def test_bench_errors_are_one_line(tmp_path):
    model, _ = mlp()
    onnx.save(model, tmp_path / "mlp.onnx")
    for args, want in [(["--against", "caffe"], "unknown competitor 'caffe'"),
                       (["--batch", "0"], "--batch must be at least 1"),
                       (["--iterations", "0"], "--iterations")]:
        res = CliRunner().invoke(main, ["bench", str(tmp_path / "mlp.onnx"), *args])
        assert res.exit_code == 1 and want in res.output, res.output
        assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
