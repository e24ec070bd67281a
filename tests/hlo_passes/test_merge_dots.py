"""merge-dots: Q/K/V projections become one GEMM; negative cases stay apart."""
import numpy as np

from aotc.hlo_passes import merge_dots
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.rng import fresh_rng, random_array


def qkv_graph(rng, bias=True, shared=True):
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    y = b.input("y", (2, 5, 8))
    outs = []
    for i, n in enumerate((8, 8, 4)):
        lhs = x if (shared or i == 0) else y
        w = b.constant(random_array(rng, (8, n)), f"w{i}")
        d = b.add("dot_general", lhs, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
        if bias:
            bb = b.add("broadcast_in_dim", b.constant(random_array(rng, (n,)), f"b{i}"), shape=d.shape,
                       broadcast_dimensions=(2,))
            d = b.add("add", d, bb)
        outs.append(b.add("tanh", d))
    return b.build(outs)


def test_three_projections_become_one_gemm_with_bias():
    rng, seed = fresh_rng()
    g = qkv_graph(rng)
    before = len(g.nodes)
    out = merge_dots.run(g)
    verify(out)
    assert out.count("dot_general") == 1 and out.count("slice") == 3 and out.count("add") == 1
    assert len(g.nodes) == before                      # input untouched
    x = random_array(rng, (2, 5, 8))
    for a, b_ in zip(interpret(g, [x, x]), interpret(out, [x, x])):
        np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")


def test_different_lhs_is_not_merged():
    rng, _ = fresh_rng()
    g = qkv_graph(rng, shared=False)
    out = merge_dots.run(g)
    assert out.count("dot_general") == 2          # the two sharing x merge, the one on y stays


def test_without_bias_merges_dots_only():
    rng, seed = fresh_rng()
    g = qkv_graph(rng, bias=False)
    out = merge_dots.run(g)
    assert out.count("dot_general") == 1 and out.count("add") == 0
    x, y = random_array(rng, (2, 5, 8)), random_array(rng, (2, 5, 8))
    for a, b_ in zip(interpret(g, [x, y]), interpret(out, [x, y])):
        np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")


def test_activation_weights_are_not_merged():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    w1 = b.input("w1", (8, 3))
    w2 = b.input("w2", (8, 3))
    d1 = b.add("dot_general", x, w1, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    d2 = b.add("dot_general", x, w2, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    g = b.build([b.add("add", d1, d2)])
    assert merge_dots.run(g).count("dot_general") == 2


def test_biased_and_bias_free_siblings_merge_in_two_groups():
    """GPT-J: Q, K, V without bias and the MLP's fc_in with one all read ln_1's result."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    outs = []
    for i, (n, bias) in enumerate([(8, False), (8, False), (8, False), (12, True), (6, True)]):
        d = b.add("dot_general", x, b.constant(random_array(rng, (8, n)), f"w{i}"), lhs_batch=(), rhs_batch=(),
                  lhs_contract=(2,), rhs_contract=(0,))
        if bias:
            d = b.add("add", d, b.add("broadcast_in_dim", b.constant(random_array(rng, (n,)), f"b{i}"), shape=d.shape,
                                      broadcast_dimensions=(2,)))
        outs.append(b.add("tanh", d))
    g = b.build(outs)
    out = merge_dots.run(g)
    verify(out)
    assert out.count("dot_general") == 2 and out.count("slice") == 5 and out.count("add") == 1
    widths = sorted(n.outputs[0].shape[-1] for n in out.nodes if n.op == "dot_general")
    assert widths == [18, 24]
    xv = random_array(rng, (2, 5, 8))
    for a, b_ in zip(interpret(g, [xv]), interpret(out, [xv])):
        np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")
