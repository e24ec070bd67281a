import numpy as np

from aotc.hlo_passes import algsimp, cse, dce, transpose_sink
from aotc.hlo_passes.pipeline import Pipeline
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.graph import GraphBuilder
from aotc.bench.models.small import transformer_block
from tests.helpers.rng import fresh_rng, random_array

from ._graphs import assert_same_fresh, assert_unchanged, counts, snapshot

SIMPLIFY = Pipeline([Pipeline(["constant-folding", "algsimp", "transpose-sink", "cse", "dce"], name="s",
                              fixed_point=True)])


def test_transposes_cancel_across_elementwise_ops():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 3, 40, 5))     # big enough that constant folding keeps the broadcast
    t = b.add("transpose", x, permutation=(0, 2, 3, 1))                         # (2, 40, 5, 3)
    bias = b.add("broadcast_in_dim", b.constant(random_array(rng, (3,)), "bias"), shape=(2, 40, 5, 3),
                 broadcast_dimensions=(3,))
    k = b.constant(random_array(rng, (2, 40, 5, 3)), "k")
    y = b.add("tanh", b.add("mul", b.add("add", t, bias), k))
    back = b.add("transpose", y, permutation=(0, 3, 1, 2))                      # inverse
    g = b.build([b.add("exp", back)])
    snap = snapshot(g)
    out, report = SIMPLIFY.run(g)
    verify(out)
    assert_unchanged(g, snap)
    assert counts(g)["transpose"] == 2 and "transpose" not in counts(out)
    assert counts(out) == {"broadcast_in_dim": 1, "add": 1, "mul": 1, "tanh": 1, "exp": 1}
    assert next(n for n in out.nodes if n.op == "broadcast_in_dim").attrs["broadcast_dimensions"] == (1,)
    assert_same_fresh(g, out, rtol=0)


def test_transposes_fold_into_dots():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    q = b.input("q", (2, 6, 3, 4))      # (B, S, H, Dh)
    k = b.input("k", (2, 6, 3, 4))
    qt = b.add("transpose", q, permutation=(0, 2, 1, 3))                         # (B, H, S, Dh)
    kt = b.add("transpose", b.add("transpose", k, permutation=(0, 2, 1, 3)), permutation=(0, 1, 3, 2))
    s = b.add("dot_general", qt, kt, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,))
    g = b.build([s])
    out, _ = SIMPLIFY.run(g)
    assert counts(out) == {"dot_general": 1}
    d = out.nodes[0]
    assert d.inputs == (q, k) and d.attrs["lhs_batch"] == (0, 2) and d.attrs["rhs_contract"] == (3,)
    assert out.outputs[0] is g.outputs[0]
    assert_same_fresh(g, out, rtol=1e-6)


def test_reshape_sinks_below_elementwise():
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    y = b.input("y", (4, 6))
    r = b.add("add", b.add("reshape", x, shape=(24,)), b.add("reshape", y, shape=(24,)))
    g = b.build([b.add("reshape", b.add("exp", r), shape=(4, 6))])
    out, _ = SIMPLIFY.run(g)
    assert counts(out) == {"add": 1, "exp": 1}
    assert_same_fresh(g, out, rtol=0)


def test_transformer_block_keeps_only_the_merge_transpose():
    g = import_onnx(transformer_block()[0])
    out, _ = SIMPLIFY.run(g)
    assert counts(g)["transpose"] >= 4 and counts(out)["transpose"] == 1
    assert_same_fresh(g, out, rtol=1e-5, atol=1e-6)


def test_must_not_fire():
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    t = b.add("transpose", x, permutation=(1, 0))
    used_twice = b.add("add", b.add("exp", t), t)          # the transpose has two users
    other = b.input("o", (4, 3))
    mixed = b.add("mul", b.add("transpose", b.input("z", (3, 4)), permutation=(1, 0)), other)   # other is no transpose
    a = b.input("a", (3, 5, 2))
    at = b.add("transpose", a, permutation=(2, 1, 0))       # reverses the dot's two free dims: stays
    w = b.input("w", (3, 7))
    d = b.add("dot_general", at, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
    g = b.build([used_twice, mixed, d])
    out = transpose_sink.run(g)
    assert list(out.nodes) == list(g.nodes)
    out2 = dce.run(cse.run(algsimp.run(out)))
    assert counts(out2) == counts(g)
    assert_same_fresh(g, out, rtol=0)


def test_reshape_sinks_past_a_bias_broadcast_along_kept_trailing_dims():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 7, 40))
    bias = b.input("bias", (40,))                # an input: stays a broadcast, never folded
    y = b.add("add", b.add("reshape", x, shape=(14, 40)),
              b.add("broadcast_in_dim", bias, shape=(14, 40), broadcast_dimensions=(1,)))
    g = b.build([b.add("reshape", b.add("tanh", y), shape=(2, 7, 40))])
    out, _ = SIMPLIFY.run(g)
    assert "reshape" not in counts(out), counts(out)
    bc = next(n for n in out.nodes if n.op == "broadcast_in_dim")
    assert bc.outputs[0].shape == (2, 7, 40) and bc.attrs["broadcast_dimensions"] == (2,)
    assert_same_fresh(g, out, rtol=0)


def test_reshape_does_not_sink_past_a_broadcast_over_the_rows_it_merges():
    b = GraphBuilder()
    x = b.input("x", (2, 7, 40))
    col = b.input("col", (14,))                  # broadcast along the merged rows: no unviewed form
    y = b.add("add", b.add("reshape", x, shape=(14, 40)),
              b.add("broadcast_in_dim", col, shape=(14, 40), broadcast_dimensions=(0,)))
    g = b.build([b.add("reshape", y, shape=(2, 7, 40))])
    out, _ = SIMPLIFY.run(g)
    assert counts(out)["reshape"] == 2
    assert_same_fresh(g, out, rtol=0)
