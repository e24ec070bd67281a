"""dot-views: a GEMM on a (B*S, D) view reads the (B, S, D) activation; the view and its inverse go away."""
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
