"""Post-LN encoders: each LayerNorm inside the layers recomputed by the GEMMs that read it (POST_LN_FOLD).

BERT's h = LN(s) feeds the next GEMM's lhs and a later residual add. With the fold the GEMM takes it as
its norm prologue and the GEMM whose epilogue adds the residual recomputes it from s's rows
(epilogue_norm_plan): a layer is 5 kernels (QKV, attention, out-proj, FFN1, FFN2), not 7, and only the
embedding LayerNorm and the last one (a graph output) stay row kernels. It is taken only where the GEMMs
reading h are 16-bit with constant weights, which code generation folds the norm into (kernels/norm_fold.py).
"""
import pytest

from aotc.bench.models.real import bert_base
from aotc.compiler import load_graph
from aotc.fusion import regions as fusion
from aotc.fusion.regions import explain, partition
from aotc.hlo_passes.pipeline import run_pipeline


def _regions(precision):
    model, _ = bert_base(layers=2)
    graph, _ = run_pipeline(load_graph(model), precision=precision)
    return graph, partition(graph)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_bert_layer_takes_five_kernels_and_says_where_its_norms_went(precision):
    graph, regions = _regions(precision)
    kinds = [r.kind for r in regions]
    assert len(regions) == 1 + 5 * 2 + 1 and kinds.count("row") == 2 and kinds.count("attention") == 2, kinds
    assert regions[0].kind == "row" and regions[-1].kind == "row" and regions[-1].root in graph.outputs
    info = [explain(r) for r in regions]
    # layer 0's LN1 (LN_54): FFN1's prologue, FFN2's epilogue; its LN2 (LN_65): layer 1's QKV prologue and
    # out-proj epilogue; layer 1's LN1 (LN_109) likewise
    where = {"LayerNormalization_54": ("MatMul_55", "MatMul_62"),
             "LayerNormalization_65": ("MatMul_66.merged", "MatMul_106"),
             "LayerNormalization_109": ("MatMul_110", "MatMul_117")}
    for norm, (gemm, residual) in where.items():
        prologue = [e["anchor"] for e in info if any(op.startswith(norm + "/reduce") for op in e["prologue"])]
        epilogue = [e for e in info if any(f"norm '{norm}' recomputed in the epilogue" in w
                                           for w in e["why_not_larger"])]
        assert prologue == [gemm] and [e["anchor"] for e in epilogue] == [residual], (norm, prologue, epilogue)
        assert not any(op.startswith(norm + "/reduce") for op in epilogue[0]["prologue"])
        # the residual sum s = x + GEMM + b is the epilogue's, and the norm's ops are listed there
        assert sum(op.endswith("/add") and not op.startswith("LayerNorm") for op in epilogue[0]["ops"]) >= 2
        assert any(op.startswith(norm + "/reduce") for op in epilogue[0]["ops"])


@pytest.mark.parametrize("precision,fold", [("fp16", False), ("fp32", True)])
def test_without_the_fold_bert_keeps_its_norms_in_row_kernels(precision, fold, monkeypatch):
    """Switched off, or in f32 (whose GEMMs keep the exact normalizing prologue, kernels/norm_fold.py)."""
    monkeypatch.setattr(fusion, "POST_LN_FOLD", fold)
    _, regions = _regions(precision)
    assert len(regions) == 1 + 7 * 2 and [r.kind for r in regions].count("row") == 5
    assert not any("recomputed in the epilogue" in w for r in regions for w in r.reasons)
