import json

import numpy as np
import pytest

from aotc.errors import AotcError, VerifyError
from aotc.hlo_passes import pipeline
from aotc.hlo_passes.pipeline import PASSES, Pass, Pipeline, default_pipeline, register, run_pipeline
from aotc.ir import dtypes
from aotc.ir.graph import GraphBuilder, Node, TensorType, Value

from ._graphs import assert_same_results, assert_unchanged, counts, shape_chain, snapshot

SIMPLIFY = ["constant-folding", "algsimp", "dot-views", "transpose-sink", "bn-fold", "cse", "dce"]


def fold_pipeline() -> Pipeline:
    """The pipeline the mechanics tests pin: fold and clean to a fixed point."""
    return Pipeline(["verify", "infer-shapes", Pipeline(["constant-folding", "dce"], name="simplify",
                                                        fixed_point=True)], name="hlo")


def run_fold(graph, **kw):
    return fold_pipeline().run(graph, **kw)


def test_default_pipeline_order_and_registry():
    merges = ["merge-dots", "merge-reduces", "dce"]
    first = ["verify", "infer-shapes", "qdq-propagate", "quantize"]
    assert default_pipeline().pass_names() == first + SIMPLIFY + merges + ["layout-nhwc"] + SIMPLIFY
    assert default_pipeline(layout="nchw").pass_names() == first + SIMPLIFY + merges
    assert default_pipeline(layout="nchw", precision="fp16").pass_names() == \
        first + SIMPLIFY + ["merge-dots", "merge-reduces", "dce", "precision"] + SIMPLIFY + ["weight-kmajor", "dce"]
    assert default_pipeline(precision="fp16").pass_names()[-3:] == ["channel-pad", "weight-kmajor", "dce"]
    assert set(default_pipeline(precision="bf16").pass_names()) <= set(PASSES)
    assert {"verify", "infer-shapes", "constant-folding", "dce", "cse", "algsimp", "bn-fold", "transpose-sink",
            "layout-nhwc", "precision", "merge-dots", "merge-reduces", "quantize", "qdq-propagate", "channel-pad",
            "weight-kmajor"} <= set(PASSES)
    assert all(p.description for p in PASSES.values())
    with pytest.raises(AotcError, match="unknown layout 'nwhc'; supported: nhwc, nchw"):
        default_pipeline(layout="nwhc")
    with pytest.raises(AotcError, match="unknown precision 'fp8'"):
        default_pipeline(precision="fp8")


def test_default_pipeline_simplifies_shape_chain():
    g = shape_chain()
    out, report = run_pipeline(g)
    # the folded chain, and the slice that takes all of (2,) is an identity
    assert counts(out) == {"reshape": 1, "reduce": 1, "add": 1}
    assert_same_results(g, out)
    assert report.converged == {"simplify": True, "after-layout": True}
    again, report2 = run_pipeline(out)
    assert not any(r.changed for r in report2.passes)
    assert all(a is b for a, b in zip(again.nodes, out.nodes)) and len(again.nodes) == len(out.nodes)


def test_run_pipeline_optimizes_and_reports():
    g = shape_chain()
    snap = snapshot(g)
    out, report = run_fold(g)
    assert_unchanged(g, snap)
    assert out is not g
    assert counts(out) == {"reshape": 1, "reduce": 1, "slice": 1, "add": 1}
    assert len(out.constants) == 2
    assert_same_results(g, out)
    names = [r.name for r in report.passes]
    # fixed point: round 0 folds and cleans, round 1 changes nothing
    assert names == ["verify", "infer-shapes", "constant-folding", "dce", "constant-folding", "dce"]
    assert report.iterations == {"simplify": 2} and report.converged == {"simplify": True}
    cf = report.passes[2]
    assert (cf.nodes_before, cf.nodes_after, cf.changed) == (8, 4, True)
    assert [r.changed for r in report.passes] == [False, False, True, True, False, False]
    assert all(r.seconds >= 0 for r in report.passes)
    assert (report.nodes_before, report.nodes_after) == (8, 4)
    json.dumps(report.to_json())
    assert "constant-folding" in str(report)


def test_does_not_fire_on_optimized_graph():
    out, _ = run_fold(shape_chain())
    again, report = run_fold(out)
    assert again is not out
    assert all(a is b for a, b in zip(again.nodes, out.nodes)) and len(again.nodes) == len(out.nodes)
    assert not any(r.changed for r in report.passes)
    assert report.iterations == {"simplify": 1}


def test_dump_after_every_pass(tmp_path):
    run_fold(shape_chain(), dump_dir=tmp_path / "dumps")
    files = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    assert files == ["00-input.txt", "01-verify.txt", "02-infer-shapes.txt", "03-constant-folding.txt",
                     "04-dce.txt", "05-constant-folding.txt", "06-dce.txt"]
    assert "= gather(" in (tmp_path / "dumps" / "02-infer-shapes.txt").read_text()
    assert "= gather(" not in (tmp_path / "dumps" / "03-constant-folding.txt").read_text()


def test_disable_pass_by_name():
    g = shape_chain()
    out, report = run_fold(g, disabled=["constant-folding"])
    assert counts(out) == counts(g)
    assert "constant-folding" not in [r.name for r in report.passes]
    assert report.skipped == ["constant-folding"]
    with pytest.raises(AotcError, match=r"unknown pass.*cse-typo.*known passes: .*constant-folding.*dce"):
        run_pipeline(g, disabled=["cse-typo"])
    out, report = run_pipeline(g, disabled=["algsimp"])
    assert counts(out)["slice"] == 1 and report.skipped == ["algsimp"]


def test_verify_runs_between_passes():
    def breaks_types(graph):
        n = graph.nodes[-1]
        bad = Value(n.output.name, TensorType((99,), dtypes.f32))
        nodes = graph.nodes[:-1] + [Node(n.op, n.inputs, (bad,), n.attrs, n.name)]
        return graph.with_nodes(nodes, outputs=[bad if v is n.output else v for v in graph.outputs])

    g = shape_chain()
    bad_pass = Pass("breaks-types", breaks_types, "test only")
    with pytest.raises(VerifyError, match=r"after pass 'breaks-types': verify: node 'add' \(add\)"):
        Pipeline([bad_pass]).run(g)
    # and infer-shapes repairs what it broke
    out, _ = Pipeline([bad_pass, "infer-shapes"]).run(g, verify_between=False)
    assert out.outputs[0].shape == (2,)


def test_fixed_point_stops_at_max_iterations():
    def peel(graph):     # removes the last node each round: never converges on a long chain
        return graph.with_nodes(graph.nodes[:-1], outputs=list(graph.inputs))

    b = GraphBuilder()
    x = b.input("x", (3,))
    y = x
    for _ in range(10):
        y = b.add("neg", y)
    g = b.build([y])
    out, report = Pipeline([Pipeline([Pass("peel", peel)], name="fix", fixed_point=True,
                                     max_iterations=3)]).run(g)
    assert len(out.nodes) == 7
    assert report.iterations == {"fix": 3} and report.converged == {"fix": False}
    assert [r.iteration for r in report.passes] == [0, 1, 2]


def test_new_pass_registers_in_one_line(monkeypatch):
    monkeypatch.setattr(pipeline, "PASSES", dict(PASSES))
    register("identity", lambda g: g, "returns its input")
    g = shape_chain()
    out, report = Pipeline(["identity", "dce"]).run(g)
    assert [r.name for r in report.passes] == ["identity", "dce"]
    with pytest.raises(AotcError, match="already registered"):
        register("identity", lambda g: g, "again")
    with pytest.raises(AotcError, match="unknown pass 'nope'; known passes"):
        Pipeline(["nope"])


def test_constants_of_input_are_not_mutated():
    g = shape_chain()
    before = {v: a.copy() for v, a in g.constants.items()}
    run_pipeline(g)
    assert all(np.array_equal(g.constants[v], a) for v, a in before.items())
