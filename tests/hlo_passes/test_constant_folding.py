import numpy as np

from aotc.hlo_passes import constant_folding, dce
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret

from ._graphs import scalar_constant, assert_same_results, assert_unchanged, counts, random_inputs, shape_chain, snapshot


def test_folds_shape_chain():
    g = shape_chain()
    out = constant_folding.run(g)
    verify(out)
    assert counts(g) == {"gather": 1, "concatenate": 1, "convert": 2, "reshape": 1,
                         "reduce": 1, "slice": 1, "add": 1}
    assert counts(out) == {"reshape": 1, "reduce": 1, "slice": 1, "add": 1}
    target_i32 = g.outputs[1]
    assert out.outputs[1] is target_i32              # a folded output stays an output
    np.testing.assert_array_equal(out.constants[target_i32], np.array([2, 12], np.int32))
    assert out.constants[target_i32].dtype == np.int32
    # the inputs of folded nodes are now dead; dce removes them
    cleaned = dce.run(out)
    target_f32 = next(n for n in g.nodes if n.op == "add").inputs[1]
    assert set(cleaned.constants) == {target_i32, target_f32}
    assert_same_results(g, cleaned)


def test_does_not_fold_what_depends_on_an_input():
    g = shape_chain()
    out = constant_folding.run(g)
    x = g.inputs[0]
    reshape = next(n for n in out.nodes if n.op == "reshape")
    assert reshape.inputs == (x,)
    assert all(n in g.nodes for n in out.nodes)      # kept nodes are the same objects


def test_does_not_fold_a_big_broadcast():
    b = GraphBuilder()
    x = b.input("x", (64, 64))
    one = scalar_constant(b, 1.5, "one")
    big = b.add("broadcast_in_dim", one, shape=(64, 64), broadcast_dimensions=())
    small = b.constant(np.arange(4, dtype=np.float32), "row")
    tile = b.add("broadcast_in_dim", small, shape=(8, 4), broadcast_dimensions=(1,))
    y = b.add("mul", x, big)
    g = b.build([y, tile])
    out = constant_folding.run(g)
    assert counts(out) == {"broadcast_in_dim": 1, "mul": 1}
    assert out.nodes[0].output is big                 # 4096 elements > 1024: stays an op
    assert out.constants[tile].shape == (8, 4)        # 32 elements: folded
    assert_same_results(g, out)


def test_a_small_vector_broadcast_over_an_activation_stays_a_vector():
    """A per-channel scale times a scale, broadcast into a 1024-element activation: folded, every kernel
    reading it would load 4 KiB instead of 64 B. The broadcast stays an op, and the constant add of it
    is computed on the vector and broadcast once."""
    b = GraphBuilder()
    x = b.input("x", (4, 16, 16))
    rng = np.random.default_rng(7)
    s = b.constant(rng.standard_normal(16).astype(np.float32), "s")
    t = b.constant(rng.standard_normal(16).astype(np.float32), "t")
    both = b.add("mul", s, t)                                      # a small constant: folds
    wide = b.add("broadcast_in_dim", both, shape=(4, 16, 16), broadcast_dimensions=(2,))
    twice = b.add("add", wide, wide)                               # constant-only, reaches x's mul
    y = b.add("mul", x, twice)
    g = b.build([y])
    out = dce.run(constant_folding.run(g))
    assert counts(out) == {"broadcast_in_dim": 1, "mul": 1}
    (small,) = out.constants.values()
    assert small.shape == (16,)
    np.testing.assert_allclose(small, 2 * g.constants[s] * g.constants[t], rtol=1e-6)
    assert_same_results(g, out)


def test_a_splat_zero_point_is_converted_before_its_broadcast():
    """convert(broadcast(i8 zero point)) read by two run-time nodes: one f32 scalar broadcast, no splat."""
    b = GraphBuilder()
    x = b.input("x", (8, 32))
    zp = b.constant(np.array(-3, np.int8), "zp")
    zf = b.add("convert", b.add("broadcast_in_dim", zp, shape=(8, 32), broadcast_dimensions=()), dtype="f32")
    g = b.build([b.add("sub", x, zf), b.add("add", x, zf)])
    out = dce.run(constant_folding.run(g))
    assert counts(out) == {"broadcast_in_dim": 1, "sub": 1, "add": 1}
    (small,) = out.constants.values()
    assert small.dtype == np.float32 and small.shape == () and small == -3.0
    assert_same_results(g, out)
    again = dce.run(constant_folding.run(out))
    assert [n.op for n in again.nodes] == [n.op for n in out.nodes]     # a fixed point


def test_a_constant_compared_with_a_kept_broadcast_still_folds():
    """compare(c[4,1], broadcast(0-d)) has a constant of its own shape: it folds to a constant (so the
    select it feeds stays visible to algsimp as all-false), as it did before broadcasts were kept."""
    b = GraphBuilder()
    x = b.input("x", (2, 4, 6))
    c = b.constant(np.zeros((4, 1), np.float32), "rowmax")
    ninf = b.add("broadcast_in_dim", b.constant(np.array([-np.inf], np.float32), "ninf"), shape=(4, 1),
                 broadcast_dimensions=(1,))
    pred = b.add("broadcast_in_dim", b.add("compare", c, ninf, direction="EQ"), shape=(2, 4, 6),
                 broadcast_dimensions=(1, 2))
    zero = b.add("broadcast_in_dim", scalar_constant(b, 0.0, "zero"), shape=(2, 4, 6), broadcast_dimensions=())
    g = b.build([b.add("select", pred, zero, x)])
    out = dce.run(constant_folding.run(g))
    compare = next(n for n in g.nodes if n.op == "compare")
    assert "compare" not in counts(out) and not out.constants[compare.outputs[0]].any()
    assert_same_results(g, out)


def test_large_constant_input_allows_same_size_result():
    b = GraphBuilder()
    w = b.constant(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64), "w")
    wt = b.add("transpose", w, permutation=(1, 0))
    x = b.input("x", (64, 64))
    y = b.add("add", x, wt)
    out = constant_folding.run(b.build([y]))
    assert counts(out) == {"add": 1}


def test_shared_weight_is_not_duplicated_by_folding_its_transpose():
    """A tied embedding: a gather reads the table, a GEMM its transpose; the engine keeps one copy."""
    b = GraphBuilder()
    table = b.constant(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(256, 16), "wte")
    ids = b.input("ids", (3,), "i32")
    h = b.add("gather", table, ids, axis=0)
    logits = b.add("dot_general", h, b.add("transpose", table, permutation=(1, 0)), lhs_batch=(), rhs_batch=(),
                   lhs_contract=(1,), rhs_contract=(0,))
    g = b.build([logits])
    out = dce.run(constant_folding.run(g))
    assert counts(out) == {"gather": 1, "transpose": 1, "dot_general": 1}
    assert sum(c.size for c in out.constants.values()) == 4096
    assert_same_results(g, out)


def test_iota_folds_when_small_only():
    b = GraphBuilder()
    x = b.input("x", (4, 300), "i32")
    small = b.add("iota", shape=(4, 3), dimension=1, dtype="i32")
    big = b.add("iota", shape=(4, 300), dimension=1, dtype="i32")
    y = b.add("add", x, big)
    g = b.build([y, small])
    out = constant_folding.run(g)
    assert counts(out) == {"iota": 1, "add": 1}
    assert small in out.constants
    assert_same_results(g, out)


def test_out_of_range_gather_is_left_for_run_time():
    b = GraphBuilder()
    data = b.constant(np.arange(3, dtype=np.int64))
    idx = b.constant(np.array([7], np.int64))
    y = b.add("gather", data, idx, axis=0)
    out = constant_folding.run(b.build([y]))
    assert counts(out) == {"gather": 1}


def test_same_results_and_input_unchanged():
    g = shape_chain()
    snap = snapshot(g)
    out = constant_folding.run(g)
    assert_unchanged(g, snap)
    assert_same_results(g, out)
    # the seeded inputs really are non-zero
    assert all(np.all(a != 0) for a in random_inputs(g, 1).values())
    assert len(interpret(out, random_inputs(g, 4))) == 2
