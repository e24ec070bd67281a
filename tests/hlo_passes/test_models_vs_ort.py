"""Node counts after the pipeline vs onnxruntime's optimized graph (ORT_ENABLE_ALL).

aotc's IR is primitive (a LayerNorm is ~14 ops, a Relu a max with a
broadcast zero), ORT's optimized graph is fused ops (SkipLayerNormalization,
Conv with fused activation and sum). So the comparable numbers are ORT's node
count and aotc's kernel count (fused regions); both are printed (-s) and
the kernel count must not exceed ORT's node count.
"""
import onnx
import pytest

import aotc.compiler
from aotc.bench.models.small import bert_encoder, resnet_bottleneck

ort = pytest.importorskip("onnxruntime")


def ort_optimized_nodes(model, tmp_path) -> int:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "ort_opt.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return len(onnx.load(str(tmp_path / "ort_opt.onnx")).graph.node)


@pytest.mark.parametrize("builder", [resnet_bottleneck, bert_encoder], ids=["resnet50-class", "bert-class"])
def test_node_count_against_onnxruntime(builder, tmp_path):
    model, _ = builder()
    n_ort = ort_optimized_nodes(model, tmp_path)
    result = aotc.compiler.compile_model(model, arch="none", host=False)
    s = result.summary()
    print(f"\n{builder.__name__}: onnx {len(model.graph.node)} nodes; aotc {s['nodes_imported']} imported -> "
          f"{s['nodes_optimized']} after passes, {s['regions']} kernels; onnxruntime ORT_ENABLE_ALL {n_ort} nodes")
    assert s["nodes_optimized"] <= 0.7 * s["nodes_imported"]
    assert s["regions"] <= n_ort
    g = result.graph_optimized
    assert not any(n.op in ("gather", "concatenate") and all(v in g.constants for v in n.inputs) for n in g.nodes)
    assert sum(1 for n in g.nodes if n.op == "transpose") <= (1 if builder is resnet_bottleneck else 2)
    assert set(s["pass_seconds"]) >= {"constant-folding", "algsimp", "cse", "bn-fold", "transpose-sink", "dce"}
