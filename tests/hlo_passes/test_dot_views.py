"""dot-views: row-wise ops and GEMMs on a (B*S, D) view run on the (B, S, D) activation; the views go away."""
import numpy as np

from aotc.hlo_passes import dot_views
from aotc.hlo_passes.pipeline import Pipeline
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder
from tests.helpers.rng import fresh_rng, random_array

from ._graphs import assert_same_fresh, assert_unchanged, counts, snapshot

SIMPLIFY = Pipeline([Pipeline(["constant-folding", "algsimp", "dot-views", "transpose-sink", "cse", "dce"],
                              name="s", fixed_point=True)])


def _linear_on_view(b, rng, x, d, n, bias=True):
    """torch.onnx.export's Conv1D: Reshape(x, (B*S, D)) -> Gemm(+bias) -> Reshape((B, S, N))."""
    bsz, s = x.shape[:2]
    flat = b.add("reshape", x, shape=(bsz * s, d))
    y = b.add("dot_general", flat, b.constant(random_array(rng, (d, n)), "w"), lhs_batch=(), rhs_batch=(),
              lhs_contract=(1,), rhs_contract=(0,))
    if bias:
        y = b.add("add", y, b.add("broadcast_in_dim", b.constant(random_array(rng, (n,)), "b"), shape=(bsz * s, n),
                                  broadcast_dimensions=(1,)))
    return b.add("reshape", y, shape=(bsz, s, n))


def test_gemm_on_a_view_reads_the_activation_and_the_reshapes_cancel():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 7, 12))
    g = b.build([b.add("tanh", _linear_on_view(b, rng, b.add("exp", x), 12, 5))])
    snap = snapshot(g)
    out, _ = SIMPLIFY.run(g)
    verify(out)
    assert_unchanged(g, snap)
    assert counts(g)["reshape"] == 2 and "reshape" not in counts(out), counts(out)
    dot = next(n for n in out.nodes if n.op == "dot_general")
    assert dot.inputs[0].shape == (2, 7, 12) and dot.attrs["lhs_contract"] == (2,)
    assert dot.outputs[0].shape == (2, 7, 5)
    assert next(n for n in out.nodes if n.op == "add").outputs[0].shape == (2, 7, 5)     # the bias, unviewed
    assert_same_fresh(g, out, rtol=1e-6)


def test_the_pass_alone_keeps_the_result_value_and_values():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (3, 2, 4, 8))                       # three leading dims merged into one
    flat = b.add("reshape", x, shape=(24, 8))
    y = b.add("dot_general", flat, b.constant(random_array(rng, (6, 8)), "w"), lhs_batch=(), rhs_batch=(),
              lhs_contract=(1,), rhs_contract=(1,))
    g = b.build([y])
    out = dot_views.run(g)
    verify(out)
    assert out.outputs[0] is g.outputs[0]
    dot = next(n for n in out.nodes if n.op == "dot_general")
    assert dot.inputs[0] is x and dot.attrs["lhs_contract"] == (3,) and dot.attrs["rhs_contract"] == (1,)
    assert_same_fresh(g, out, rtol=1e-6)


def test_views_that_touch_the_contracted_dim_or_batched_dots_are_left_alone():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 6, 4))
    mixed = b.add("reshape", x, shape=(4, 12))           # splits the contracted dim: not a row view
    y1 = b.add("dot_general", mixed, b.constant(random_array(rng, (12, 3)), "w1"), lhs_batch=(), rhs_batch=(),
               lhs_contract=(1,), rhs_contract=(0,))
    z = b.input("z", (2, 6, 4))
    y2 = b.add("dot_general", b.add("reshape", z, shape=(2, 24)), b.input("r", (2, 24, 5)), lhs_batch=(0,),
               rhs_batch=(0,), lhs_contract=(1,), rhs_contract=(1,))
    g = b.build([y1, y2])
    out = dot_views.run(g)
    assert [n.op for n in out.nodes] == [n.op for n in g.nodes]
    assert all(a.inputs == c.inputs for a, c in zip(out.nodes, g.nodes))


def _bloom_attention(b, q, k, v, alibi, heads):
    """BLOOM's attention as torch.onnx.export writes it: Q·K and P·V batched over a (B*H, S, D) view,
    the ALiBi bias (B*H, 1, S) added before the scores go back to (B, H, S, S) for the softmax."""
    bsz, _, s, d = q.shape
    flat = [b.add("reshape", t, shape=(bsz * heads, s, d)) for t in (q, k, v)]
    scores = b.add("dot_general", flat[0], flat[1], lhs_batch=(0,), rhs_batch=(0,), lhs_contract=(2,),
                   rhs_contract=(2,))
    scores = b.add("add", b.add("mul", scores, b.add("broadcast_in_dim", b.constant(np.float32(0.25), "c"),
                                                      shape=(bsz * heads, s, s), broadcast_dimensions=())),
                   b.add("broadcast_in_dim", alibi, shape=(bsz * heads, s, s), broadcast_dimensions=(0, 1, 2)))
    x = b.add("reshape", scores, shape=(bsz, heads, s, s))
    e = b.add("exp", b.add("sub", x, b.add("broadcast_in_dim", b.add("reduce", x, axes=(3,), kind="max"),
                                             shape=x.shape, broadcast_dimensions=(0, 1, 2))))
    p = b.add("div", e, b.add("broadcast_in_dim", b.add("reduce", e, axes=(3,), kind="sum"), shape=x.shape,
                              broadcast_dimensions=(0, 1, 2)))
    out = b.add("dot_general", b.add("reshape", p, shape=(bsz * heads, s, s)), flat[2], lhs_batch=(0,),
                rhs_batch=(0,), lhs_contract=(2,), rhs_contract=(1,))
    return b.add("reshape", out, shape=(bsz, heads, s, d))


def test_dots_batched_over_a_merged_view_batch_over_the_unmerged_dims():
    """BLOOM: with Q·K, the ALiBi add and P·V batched over (B, H), attention is one pattern again."""
    from aotc.patterns.attention import find_attention
    b = GraphBuilder()
    q, k, v = (b.input(n, (2, 3, 5, 4)) for n in "qkv")
    g = b.build([_bloom_attention(b, q, k, v, b.input("alibi", (6, 1, 5)), heads=3)])
    out, _ = SIMPLIFY.run(g)
    verify(out)
    assert "reshape" in counts(out) and not find_attention(g)
    dots = [n for n in out.nodes if n.op == "dot_general"]
    assert [d.attrs["lhs_batch"] for d in dots] == [(0, 1), (0, 1)]
    assert dots[0].inputs[0] is q and dots[0].outputs[0].shape == (2, 3, 5, 5)
    (match,) = find_attention(out).values()
    assert match.batch_shape == (2, 3) and (match.sq, match.sk, match.dh) == (5, 5, 4)
    assert_same_fresh(g, out, rtol=1e-5)


def test_a_batched_dot_with_one_viewed_operand_is_left_alone():
    b = GraphBuilder()
    q = b.input("q", (2, 3, 5, 4))
    y = b.add("dot_general", b.add("reshape", q, shape=(6, 5, 4)), b.input("k", (6, 7, 4)), lhs_batch=(0,),
              rhs_batch=(0,), lhs_contract=(2,), rhs_contract=(2,))
    g = b.build([y])
    out = dot_views.run(g)
    assert [n.op for n in out.nodes] == [n.op for n in g.nodes]
    assert all(a.inputs == c.inputs for a, c in zip(out.nodes, g.nodes))


def test_a_layernorm_mlp_and_residual_on_a_flattened_stream_run_unflattened():
    """OPT's decoder flattens the residual stream to (B*S, D) before its MLP: norm, fc1, relu, fc2 and the
    residual add all run on the view, and the view back to (B, S, D) ends it. All of it goes to 3-D."""
    from tests.helpers.norms import layer_norm
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 7, 16))
    h = b.add("reshape", b.add("exp", x), shape=(14, 16))
    y = layer_norm(b, h, b.input("g", (16,)), b.input("beta", (16,)))
    f = b.add("max", _gemm(b, rng, y, 16, 24), b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=(14, 24),
                                                      broadcast_dimensions=()))
    out = b.add("reshape", b.add("add", h, _gemm(b, rng, f, 24, 16)), shape=(2, 7, 16))
    g = b.build([out])
    got, _ = SIMPLIFY.run(g)
    verify(got)
    assert "reshape" not in counts(got), counts(got)
    assert not any(n.outputs[0].shape[:1] == (14,) for n in got.nodes)      # nothing left on (B*S, ...) rows
    assert all(n.inputs[0].shape == (2, 7, 16) for n in got.nodes if n.op == "reduce")
    assert_same_fresh(g, got, rtol=1e-5, atol=1e-6)


def test_a_view_read_by_an_op_that_mixes_rows_stays_for_it():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 7, 16))
    v = b.add("reshape", x, shape=(14, 16))
    y = _gemm(b, rng, v, 16, 8)
    t = b.add("transpose", v, permutation=(1, 0))          # mixes the rows: reads the view itself
    g = b.build([y, t])
    got = dot_views.run(g)
    verify(got)
    assert next(n for n in got.nodes if n.op == "dot_general").inputs[0] is x
    assert next(n for n in got.nodes if n.op == "transpose").inputs[0].shape == (14, 16)
    assert_same_fresh(g, got, rtol=1e-6)


def _gemm(b, rng, x, d, n):
    return b.add("dot_general", x, b.constant(random_array(rng, (d, n)), "w"), lhs_batch=(), rhs_batch=(),
                 lhs_contract=(1,), rhs_contract=(0,))
