"""The exporter-written model set: cached bytes, the forms' op domains, feeds with padding."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

from aotc.bench.models import exported as E  # noqa: E402


def test_second_call_reads_the_cache_and_never_exports(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    model, feeds = E.exported("bert", "torchscript")
    cached = list((tmp_path / "exported").glob("bert-small-torchscript-*.onnx"))
    assert len(cached) == 1 and cached[0].read_bytes() == model.SerializeToString()

    def refuse(*a, **k):
        raise AssertionError("exported again")
    monkeypatch.setattr(E, "_export", refuse)
    again, feeds2 = E.exported("bert", "torchscript")
    assert again.SerializeToString() == model.SerializeToString()
    assert all(np.array_equal(feeds[k], feeds2[k]) for k in feeds)
    # another seed or version is another entry
    assert E._cache_path("bert", "torchscript", "small", 1, *E.ARCHS["bert"]["small"]) != cached[0]


def test_feeds_hold_a_padded_sequence_and_match_the_model_inputs():
    model, feeds = E.exported("gpt2", "torchscript")
    assert [i.name for i in model.graph.input] == list(feeds)
    mask = feeds["attention_mask"]
    assert mask.dtype == np.int64 and mask.min() == 0 and mask.max() == 1 and mask[:, 0].all()


def test_ort_optimizer_form_keeps_to_onnx_ops():
    for arch in ("gpt2", "llama"):
        model, _ = E.exported(arch, "ortopt")
        assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
        assert not any(n.op_type == "SimplifiedLayerNormalization" for n in model.graph.node)
    gpt2, _ = E.exported("gpt2", "ortopt")
    assert any(n.op_type == "LayerNormalization" for n in gpt2.graph.node)


def test_unknown_model_is_refused_by_name():
    with pytest.raises(ValueError, match="no exported model gpt3/torchscript/small"):
        E.exported("gpt3", "torchscript")
