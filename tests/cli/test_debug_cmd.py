"""`aotc debug compare` / `aotc debug reduce` end to end: text, JSON, files, one-line errors."""
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from aotc.cli.main import main
from tests.debug._models import chain, mlp, overflow

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("debug")
    for name, model in (("mlp", mlp()), ("overflow", overflow()), ("chain", chain(blocks=6, bad=3))):
        onnx.save(model, d / f"{name}.onnx")
    return d


def test_compare_text(models):
    res = CliRunner().invoke(main, ["debug", "compare", str(models / "mlp.onnx"), "-q"])
    assert res.exit_code == 0, res.output
    assert "cpu device" in res.output and "every kernel is within tolerance" in res.output
    assert "fc1, bias1, relu1" in res.output


def test_compare_json_with_bisect(models, tmp_path):
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32))
    res = CliRunner().invoke(main, ["debug", "compare", str(models / "overflow.onnx"), "--precision", "fp16",
                                    "--inputs", str(tmp_path / "in.npz"), "--bisect-precision", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["first_bad"] is not None and "square" in d["first_bad"]["onnx_nodes"]
    assert set(d["first_bad"]) == {"index", "onnx_nodes"}
    assert d["keep_fp32"] and d["error_after_fix"]["within_tolerance"]
    keep = ",".join(d["keep_fp32"])
    again = CliRunner().invoke(main, ["debug", "compare", str(models / "overflow.onnx"), "--precision", "fp16",
                                      "--inputs", str(tmp_path / "in.npz"), "--keep-fp32", keep, "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["first_bad"] is None
    out = tmp_path / "fixed.engine"
    compiled = CliRunner().invoke(main, ["compile", str(models / "overflow.onnx"), "-o", str(out), "--arch", "none",
                                         "--precision", "fp16", "--keep-fp32", keep, "-q"])
    assert compiled.exit_code == 0, compiled.output


def test_compare_text_bisect_prints_the_argument(models):
    res = CliRunner().invoke(main, ["debug", "compare", str(models / "overflow.onnx"), "--precision", "fp16",
                                    "--bisect-precision", "-q"])
    assert res.exit_code == 0, res.output
    assert "<- beyond tolerance" in res.output and "\n  --keep-fp32 " in res.output


def test_reduce_until_writes_model_and_inputs(models, tmp_path):
    out = tmp_path / "r" / "reduced.onnx"
    res = CliRunner().invoke(main, ["debug", "reduce", str(models / "chain.onnx"), "--precision", "fp16",
                                    "--until", "rel>1e-2", "-o", str(out), "--json", "-q"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["nodes_before"] == 24 and d["nodes_after"] <= 4 and "scale3" in d["nodes"]
    assert out.exists() and (tmp_path / "r" / "reduced.npz").exists() and d["max_rel_err"] > 1e-2


def test_reduce_check_text(models, tmp_path):
    res = CliRunner().invoke(main, ["debug", "reduce", str(models / "chain.onnx"), "--check", "grep -q -a add4 {model}",
                                    "-o", str(tmp_path / "r.onnx")])
    assert res.exit_code == 0, res.output
    assert "24 -> 1 node(s)" in res.output and "add4" in res.output and "r.npz" in res.output
    assert "delta debugging" in res.output         # progress (stderr, mixed in by CliRunner)


@pytest.mark.parametrize("args, message", [
    (["compare", "{m}", "--precision", "int8"], "int8 engines do not exist"),
    (["compare", "missing.onnx"], "model file not found"),
    (["compare", "{m}", "--precision", "fp32", "--bisect-precision"], "applies to fp16 and bf16"),
    (["reduce", "{m}", "--until", "ulp>2", "-o", "x.onnx"], "--until 'ulp>2'"),
    (["reduce", "{m}", "--check", "false", "-o", "x.onnx"], "does not fail"),
])
def test_errors_are_one_line(models, tmp_path, args, message):
    res = CliRunner().invoke(main, ["debug"] + [a.replace("{m}", str(models / "mlp.onnx")) for a in args] +
                             (["-q"] if args[0] == "compare" else []))
    assert res.exit_code == 1, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("aotc: error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in res.output


def test_reduce_needs_until_or_check(models):
    res = CliRunner().invoke(main, ["debug", "reduce", str(models / "mlp.onnx"), "-o", "x.onnx"])
    assert res.exit_code == 2 and "exactly one of --until COND and --check CMD" in res.output
