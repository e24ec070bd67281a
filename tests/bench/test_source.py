"""What aotc.bench.source makes of a path: kinds, the --batch override, engine + --model."""
import numpy as np
import onnx
import pytest

import aotc.compiler
from aotc.bench.source import load_source, with_batch
from aotc.errors import AotcError
from aotc.bench.models.small import mlp

ort = pytest.importorskip("onnxruntime")


def test_with_batch_sets_dim0_for_aotc_and_onnxruntime_alike():
    model, _ = mlp(batch=4)
    m, shapes = with_batch(model, 9)
    assert shapes == {"x": (9, 32)}
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4      # original untouched
    x = np.random.default_rng(0).standard_normal((9, 32)).astype(np.float32)
    (out,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert out.shape == (9, 10)
    graph = aotc.compiler.load_graph(m, shapes)
    assert graph.inputs[0].shape == (9, 32) and graph.outputs[0].shape == (9, 10)
    with pytest.raises(AotcError, match="at least 1"):
        with_batch(model, 0)


def test_load_source_kinds_and_engine_with_model(tmp_path):
    model, _ = mlp()
    onnx.save(model, tmp_path / "m.onnx")
    src = load_source(tmp_path / "m.onnx", batch=2)
    assert src.kind == "onnx" and [tuple(s.shape) for s in src.input_specs()] == [(2, 32)]
    aotc.compiler.compile(model, tmp_path / "m.engine", arch="none")
    eng = load_source(tmp_path / "m.engine")
    assert eng.kind == "engine" and eng.model is None and eng.output_names() == src.output_names()
    both = load_source(tmp_path / "m.engine", model_path=tmp_path / "m.onnx")
    assert both.kind == "onnx" and both.engine_bytes is not None
    with pytest.raises(AotcError, match="differ from the model"):
        load_source(tmp_path / "m.engine", batch=3, model_path=tmp_path / "m.onnx")
    with pytest.raises(AotcError, match="--batch needs a model"):
        load_source(tmp_path / "m.engine", batch=3)
    (tmp_path / "junk.bin").write_bytes(b"\x01\x02garbage" * 5)
    with pytest.raises(AotcError, match="neither an aotc engine"):
        load_source(tmp_path / "junk.bin")
