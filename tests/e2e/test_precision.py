"""fp16/bf16 engines of ResNet-class and BERT-class models on the cpu device vs the fp32 reference.

The engine's signature stays f32 (inputs converted on entry, outputs on
exit); weights and activations are f16/bf16, matmul/conv accumulate in f32,
norms' and softmax's sums stay f32. Measured on these models (seeded
weights): fp16 rel. error ~1e-3 (ResNet) and ~3e-3 (BERT pooled output);
bf16 ~1.2e-2 and ~2.3e-2 (8-bit mantissa).
"""
import numpy as np
import pytest
from click.testing import CliRunner

import aotc.compiler
from aotc.package.runtime_binding import Engine
from aotc.bench.models.small import bert_encoder, resnet_bottleneck

ort = pytest.importorskip("onnxruntime")

TOL = {"fp16": 1e-2, "bf16": 5e-2}


def rel_error(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.parametrize("builder", [resnet_bottleneck, bert_encoder], ids=["resnet", "bert"])
@pytest.mark.parametrize("precision", ["fp16", pytest.param("bf16", marks=pytest.mark.slow)])
def test_low_precision_engine_matches_fp32_reference(builder, precision, tmp_path):
    model, feeds = builder()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    path = tmp_path / "m.engine"
    result = aotc.compiler.compile(model, path, arch="none", precision=precision)
    low = {"fp16": "f16", "bf16": "bf16"}[precision]
    g = result.graph_optimized
    weights = [n.inputs[1] for n in g.nodes if n.op in ("dot_general", "convolution") and n.inputs[1] in g.constants]
    assert weights and all(w.dtype.name == low for w in weights)             # weights stored in 16 bits
    assert any(n.op in ("dot_general", "convolution") and n.output.dtype.name == low
               for n in result.graph_optimized.nodes)
    engine = Engine(str(path))
    assert all(s.dtype == "f32" for s in list(engine.inputs) + list(engine.outputs) if s.dtype != "i64")
    outs = engine.create_context(device="cpu").run(feeds)
    for spec, w in zip(engine.outputs, want):
        got = outs[spec.name]
        assert got.dtype == np.float32 and got.shape == w.shape and np.isfinite(got).all()
        err = rel_error(got, w)
        assert err <= TOL[precision], f"{builder.__name__}/{spec.name} {precision}: rel error {err:.2e}"


@pytest.mark.parametrize("builder", [resnet_bottleneck, bert_encoder], ids=["resnet", "bert"])
def test_tf32_engine_matches_fp32_reference(builder, tmp_path):
    """--precision tf32: f32 everywhere, GEMMs and dense convs on the tf32 tensor-core kernels."""
    model, feeds = builder()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    path = tmp_path / "m.engine"
    result = aotc.compiler.compile(model, path, arch="none", precision="tf32")
    assert any(k.startswith("aotc_dot_tf32_") for k in result.plan.kernels)
    engine = Engine(str(path))
    outs = engine.create_context(device="cpu").run(feeds)
    for spec, w in zip(engine.outputs, want):
        err = rel_error(outs[spec.name], w)
        assert 1e-7 < err <= 1e-2, f"{builder.__name__}/{spec.name} tf32: rel error {err:.2e}"


def test_cli_precision_keep_fp32_and_report(tmp_path):
    import onnx

    from aotc.cli.main import main
    model, _ = bert_encoder(layers=1)
    src = tmp_path / "bert.onnx"
    onnx.save(model, src)
    ln = next(n.name for n in model.graph.node if n.op_type == "LayerNormalization")
    res = CliRunner().invoke(main, ["compile", str(src), "-o", str(tmp_path / "b.engine"), "--arch", "none",
                                    "--precision", "fp16", "--keep-fp32", ln, "--report", "-q"])
    assert res.exit_code == 0, res.output
    assert "after passes (fp16, nhwc)" in res.output
    assert "precision" in res.output and "total" in res.output and "ms" in res.output
    bad = CliRunner().invoke(main, ["compile", str(src), "-o", str(tmp_path / "c.engine"), "--arch", "none",
                                    "--precision", "fp16", "--keep-fp32", "NoSuchNode", "-q"])
    assert bad.exit_code == 1 and "NoSuchNode" in bad.output and "Traceback" not in bad.output
