"""Every kernel family with dynamic sizes: one build, run at several shapes, against the interpreter.

The sizes the kernels take as arguments (aotc/ir/dims.py, shape_program.py) must give the
answer the interpreter gives at each shape: shapes that break the tiles, the ends of the
ranges, fresh random inputs, outputs poisoned so an unwritten element fails.
"""
import numpy as np
import pytest

from aotc.ir import dims as D
from aotc.ir.dims import DimRange, dim_ranges, sym
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array

B, S = sym("batch"), sym("seq")
RANGES = {"batch": DimRange(1, 20), "seq": DimRange(1, 700)}


@pytest.fixture(autouse=True)
def _ranges():
    """Graphs are built inside the ranges (type rules decide comparisons with them)."""
    with dim_ranges(RANGES):
        yield


def check(graph, make_inputs, sizes, seed, kinds=None, rtol=1e-5, atol=1e-5, force=None):
    sets = [make_inputs(*s) for s in sizes]
    results, kernels, _ = run_on_host(graph, None, shapes=sets, force=force)
    if kinds is not None:
        assert sorted(k.region.kind for k in kernels) == sorted(kinds)
    for ins, got, size in zip(sets, results, sizes):
        want = interpret(graph, ins)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape, f"output {i} at {size}: {g.shape} vs {w.shape}"
            if g.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i} at {size}, seed {seed}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"output {i} at {size}, seed {seed}")
    return kernels


def _graph(b, outs):
    g = b.build(outs)
    g.dims = {k: r for k, r in RANGES.items() if any(k in D.symbols(v.shape) for v in g.inputs)}
    return g


def test_loop_index_math_over_dynamic_dims():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (B, S, 6))
    y = b.input("y", (S, 6))
    yb = b.add("broadcast_in_dim", y, shape=(B, S, 6), broadcast_dimensions=(1, 2))
    t = b.add("transpose", b.add("tanh", b.add("mul", x, yb)), permutation=(1, 0, 2))     # (S, B, 6)
    r = b.add("reshape", t, shape=(S * B, 6))
    pv = b.constant(np.float32(-1.5))
    p = b.add("pad", r, pv, low=(2, 1), high=(1, 0))                                      # (S*B + 3, 7)
    io = b.add("convert", b.add("iota", shape=(S * B + 3, 7), dimension=0, dtype="i32"), dtype="f32")
    cat = b.add("concatenate", b.add("add", p, io), p, dimension=1)
    sl = b.add("slice", x, start=(0, 1, 0), limit=(B, S, 6), stride=(1, 1, 2))            # (B, S-1, 3)
    g = _graph(b, [cat, sl])
    check(g, lambda bs, ss: [random_array(rng, (bs, ss, 6)), random_array(rng, (ss, 6))],
          [(1, 1), (3, 7), (9, 40), (2, 33)], seed)


@pytest.mark.parametrize("extent", [6, "seq"])
def test_row_softmax_rows_and_extent_dynamic(extent):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    n = S if extent == "seq" else 6
    x = b.input("x", (B, 5, n))
    m = b.add("reduce", x, axes=(2,), kind="max")
    e = b.add("exp", b.add("sub", x, b.add("broadcast_in_dim", m, shape=(B, 5, n), broadcast_dimensions=(0, 1))))
    s = b.add("reduce", e, axes=(2,), kind="sum")
    y = b.add("div", e, b.add("broadcast_in_dim", s, shape=(B, 5, n), broadcast_dimensions=(0, 1)))
    g = _graph(b, [y])
    sizes = [(1, 1), (3, 31), (20, 300), (2, 600), (2, 256)] if extent == "seq" else [(1, 0), (7, 0), (20, 0)]
    seen = {}
    check(g, lambda bs, ss: [random_array(rng, (bs, 5, ss if extent == "seq" else 6))], sizes, seed,
          kinds=["row"], force=lambda ls: seen.setdefault("launches", ls))
    if extent == "seq":     # rows up to 256 long get the warp-per-row kernel; longer ones the block kernel
        kinds = {ln.variant: ln.kernel.split("_")[1:3] for ln in seen["launches"]}
        assert kinds["seq<=256"] == ["row", "warp"] and kinds["generic"][1] != "warp"


def test_reduction_over_a_dynamic_axis():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (B, S, 3))
    g = _graph(b, [b.add("reduce", x, axes=(1,), kind="sum"), b.add("reduce", x, axes=(0, 2), kind="max")])
    check(g, lambda bs, ss: [random_array(rng, (bs, ss, 3))], [(1, 1), (5, 257), (12, 700), (3, 31)], seed,
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gemm_with_dynamic_m_and_batch(dtype):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (B, S, 24), dtype)
    w = b.constant(random_array(rng, (24, 40)).astype(np.float32 if dtype == "f32" else np.float16))
    y = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
    bias = b.constant(random_array(rng, (40,)).astype(np.float32 if dtype == "f32" else np.float16))
    y = b.add("tanh", b.add("add", y, b.add("broadcast_in_dim", bias, shape=(B, S, 40), broadcast_dimensions=(2,))))
    q = b.input("q", (B, S, 8), dtype)
    k = b.input("k", (B, 8, S), dtype)
    z = b.add("dot_general", q, k, lhs_batch=(0,), rhs_batch=(0,), lhs_contract=(2,), rhs_contract=(1,))  # (B, S, S)
    g = _graph(b, [y, z])
    npdt = np.float32 if dtype == "f32" else np.float16
    tol = 1e-4 if dtype == "f32" else 2e-2
    check(g, lambda bs, ss: [random_array(rng, (bs, ss, 24)).astype(npdt), random_array(rng, (bs, ss, 8)).astype(npdt),
                             random_array(rng, (bs, 8, ss)).astype(npdt)],
          [(1, 1), (2, 65), (6, 130), (3, 17)], seed, rtol=tol, atol=tol)


def test_conv_and_pool_with_dynamic_batch():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (B, 3, 9, 9))
    w = b.constant(random_array(rng, (8, 3, 3, 3)))
    c = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1)
    r = b.add("max", c, b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=(B, 8, 9, 9), broadcast_dimensions=()))
    p = b.add("reduce_window", r, kind="max", window=(1, 1, 3, 3), strides=(1, 1, 2, 2),
              padding=((0, 0), (0, 0), (1, 1), (1, 1)), dilations=(1, 1, 1, 1))
    g = _graph(b, [p])
    check(g, lambda bs, _: [random_array(rng, (bs, 3, 9, 9))], [(1, 0), (4, 0), (5, 0)], seed, rtol=1e-4, atol=1e-4)


def test_gather_and_sizes_known_at_run_time():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    table = b.constant(random_array(rng, (50, 6)))
    ids = b.input("ids", (B, S), "i64")
    emb = b.add("gather", table, ids, axis=0)                                       # (B, S, 6)
    sizes = b.add("convert", b.add("dim_values", values=(B, S, 6)), dtype="f32")     # [B, S, 6]
    seq_len = b.add("reshape", b.add("slice", sizes, start=(1,), limit=(2,), stride=(1,)), shape=())
    scaled = b.add("mul", emb, b.add("broadcast_in_dim", seq_len, shape=(B, S, 6), broadcast_dimensions=()))
    g = _graph(b, [scaled, sizes])
    check(g, lambda bs, ss: [rng.integers(-50, 50, (bs, ss)).astype(np.int64)], [(1, 1), (4, 70), (2, 9)], seed)


def test_slice_whose_start_moves_with_a_dynamic_dim():
    """x[:, -1] of a dynamic sequence (a decoder's last token): index math, not a fixed-offset view."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (B, S, 8))
    last = b.add("slice", x, start=(0, S - 1, 0), limit=(B, S, 8), stride=(1, 1, 1))
    w = b.constant(random_array(rng, (8, 5)))
    y = b.add("dot_general", b.add("tanh", last), w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
    g = _graph(b, [y])
    check(g, lambda bs, ss: [random_array(rng, (bs, ss, 8))], [(1, 1), (3, 17), (20, 700)], seed)
