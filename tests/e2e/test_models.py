"""Whole path: ONNX model -> aotc compile -> engine file -> C runtime (cpu device) vs onnxruntime."""
import numpy as np
import pytest

import aotc.compiler
from aotc.package.runtime_binding import Engine
from tests.e2e.models import MODELS

ort = pytest.importorskip("onnxruntime")


def rel_error(got, want):
    """max |got - want| / max |want|: relative to the output's scale."""
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name, tmp_path):
    model, feeds = MODELS[name]()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    path = tmp_path / f"{name}.engine"
    result = aotc.compiler.compile(model, path)
    assert set(result.plan.cubins) == {"sm_80", "sm_90"} and result.plan.ptx and result.plan.host_lib
    engine = Engine(str(path))
    outs = engine.create_context(device="cpu").run(feeds)
    assert [o.name for o in engine.outputs] == [o.name for o in model.graph.output]
    for spec, w in zip(engine.outputs, want):
        got = outs[spec.name]
        assert got.shape == w.shape and np.isfinite(got).all()
        assert rel_error(got, w) <= 1e-4, f"{name}/{spec.name}: rel error {rel_error(got, w):.2e}"


def test_fusion_keeps_kernel_count_low():
    model, _ = MODELS["transformer_block"]()
    result = aotc.compiler.compile_model(model, arch="none", host=False)
    s = result.summary()
    # the Shape/Gather/Concat clutter folds away, and elementwise chains fuse
    assert s["nodes_optimized"] < s["nodes_imported"]
    assert s["kernels_launched"] <= 24, s
    assert not any(n.op == "gather" for n in result.graph_optimized.nodes)
