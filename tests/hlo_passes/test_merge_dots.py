"""merge-dots: Q/K/V projections become one GEMM; negative cases stay apart; a sibling with an
activation of its own (Phi's fc1) stays out, gate/up and a scaled Q stay in."""
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
        outs.append(b.add("transpose", d, permutation=(0, 2, 1)))    # heads, on their way to attention
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
        outs.append(b.add("transpose", d, permutation=(0, 2, 1)))
    g = b.build(outs)
    out = merge_dots.run(g)
    verify(out)
    assert out.count("dot_general") == 2 and out.count("slice") == 5 and out.count("add") == 1
    widths = sorted(n.outputs[0].shape[-1] for n in out.nodes if n.op == "dot_general")
    assert widths == [18, 24]
    xv = random_array(rng, (2, 5, 8))
    for a, b_ in zip(interpret(g, [xv]), interpret(out, [xv])):
        np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")


def _linear(b, rng, x, n, bias=True, name="w"):
    d = b.add("dot_general", x, b.constant(random_array(rng, (x.shape[-1], n)), name), lhs_batch=(), rhs_batch=(),
              lhs_contract=(x.type.rank - 1,), rhs_contract=(0,))
    if bias:
        d = b.add("add", d, b.add("broadcast_in_dim", b.constant(random_array(rng, (n,)), name + "_b"), shape=d.shape,
                                  broadcast_dimensions=(x.type.rank - 1,)))
    return d


def _gelu_tanh(b, x):
    """gelu_new as exporters write it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    def c(v):
        return b.add("broadcast_in_dim", b.constant(np.asarray(v, np.float32)), shape=x.shape, broadcast_dimensions=())
    inner = b.add("add", x, b.add("mul", c(0.044715), b.add("pow", x, c(3.0))))
    t = b.add("tanh", b.add("mul", c(0.7978845608), inner))
    return b.add("mul", b.add("mul", c(0.5), x), b.add("add", c(1.0), t))


def _check_equal(g, out, rng, seed, shape=(2, 5, 8)):
    verify(out)
    xv = random_array(rng, shape)
    for a, b_ in zip(interpret(g, [xv]), interpret(out, [xv])):
        np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")


def _widths(out):
    return sorted(n.outputs[0].shape[-1] for n in out.nodes if n.op == "dot_general" and n.inputs[1].shape[0] == 8)


def test_phi_fc1_with_gelu_stays_out_of_the_qkv_gemm():
    """Phi: attention and MLP in parallel off one LayerNorm. fc1's gelu is its own GEMM's epilogue,
    so fc1 stays apart; Q, K and V (heads to attention) merge."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    heads = [b.add("transpose", _linear(b, rng, x, 8, name=f"w{i}"), permutation=(0, 2, 1)) for i in range(3)]
    fc2 = _linear(b, rng, _gelu_tanh(b, _linear(b, rng, x, 16, name="fc1")), 8, name="fc2")
    g = b.build(heads + [fc2])
    out = merge_dots.run(g)
    assert _widths(out) == [16, 24]                         # fc1 alone, Q/K/V as one
    fc1 = next(n for n in out.nodes if n.op == "dot_general" and n.outputs[0].shape[-1] == 16)
    assert "merged" not in fc1.name
    _check_equal(g, out, rng, seed)


def test_gate_and_up_meeting_in_one_product_stay_merged():
    """LLaMA's SwiGLU: silu(gate) * up. Both feed elementwise ops, but their chains meet: one unit,
    which the gated epilogue needs in one GEMM."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    gate, up = _linear(b, rng, x, 12, bias=False, name="gate"), _linear(b, rng, x, 12, bias=False, name="up")
    silu = b.add("mul", gate, b.add("logistic", gate))
    g = b.build([_linear(b, rng, b.add("mul", silu, up), 8, bias=False, name="down")])
    out = merge_dots.run(g)
    assert _widths(out) == [24]
    _check_equal(g, out, rng, seed)


def test_gate_and_up_beside_qkv_merge_apart():
    """A parallel block with a gated MLP: Q/K/V merge, gate/up merge, the two GEMMs stay apart."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    heads = [b.add("transpose", _linear(b, rng, x, 8, bias=False, name=f"w{i}"), permutation=(0, 2, 1))
             for i in range(3)]
    gate, up = _linear(b, rng, x, 12, bias=False, name="gate"), _linear(b, rng, x, 12, bias=False, name="up")
    h = b.add("mul", _gelu_tanh(b, gate), up)
    g = b.build(heads + [_linear(b, rng, h, 8, bias=False, name="down")])
    out = merge_dots.run(g)
    assert _widths(out) == [24, 24]
    _check_equal(g, out, rng, seed)


def test_q_scaled_by_a_constant_stays_merged():
    """BART/Whisper: q_proj(x) * scaling. A linear chain is no activation (the attention kernel takes
    the scale as a prologue): Q stays in the Q/K/V GEMM."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    q, k, v = (_linear(b, rng, x, 8, name=f"w{i}") for i in range(3))
    scale = b.add("broadcast_in_dim", b.constant(np.asarray(0.125, np.float32)), shape=q.shape, broadcast_dimensions=())
    q = b.add("mul", q, scale)
    g = b.build([b.add("transpose", t, permutation=(0, 2, 1)) for t in (q, k, v)])
    out = merge_dots.run(g)
    assert _widths(out) == [24]
    _check_equal(g, out, rng, seed)


def test_a_per_head_norm_on_q_and_k_is_no_epilogue():
    """Qwen3: Q and K each go through an RMSNorm (a reduction reads the square, a mul reads Q): their
    chains end in several values, no epilogue region forms, so Q/K/V still merge."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    outs = []
    for i in range(3):
        t = _linear(b, rng, x, 8, bias=False, name=f"w{i}")
        if i < 2:
            two = b.add("broadcast_in_dim", b.constant(np.asarray(2.0, np.float32)), shape=t.shape,
                        broadcast_dimensions=())
            ms = b.add("reduce", b.add("pow", t, two), axes=(2,), kind="sum")
            r = b.add("broadcast_in_dim", b.add("rsqrt", ms), shape=t.shape, broadcast_dimensions=(0, 1))
            t = b.add("mul", t, r)
        outs.append(b.add("transpose", t, permutation=(0, 2, 1)))
    g = b.build(outs)
    out = merge_dots.run(g)
    assert _widths(out) == [24]
    _check_equal(g, out, rng, seed)


def test_an_activation_a_reduction_reads_is_no_epilogue():
    """tanh(x W2) summed over its row: the reduction kernel takes the tanh as its prologue, so the GEMM
    would get no epilogue alone; merged, it costs nothing, and the dots stay merged."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8))
    q, k = (b.add("transpose", _linear(b, rng, x, 8, name=f"w{i}"), permutation=(0, 2, 1)) for i in range(2))
    s = b.add("reduce", b.add("tanh", _linear(b, rng, x, 8, name="w2")), axes=(2,), kind="sum")
    g = b.build([q, k, s])
    out = merge_dots.run(g)
    assert _widths(out) == [24]
    _check_equal(g, out, rng, seed)
