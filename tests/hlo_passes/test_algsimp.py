import numpy as np
import pytest

from aotc.hlo_passes import algsimp, cse, dce
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret

from ._graphs import assert_same_fresh, assert_unchanged, counts, random_inputs, scalar_constant, snapshot


def simplify(g):
    out = dce.run(cse.run(algsimp.run(g)))
    verify(out)
    return out


def _bcast(b, value, shape, dtype="f32"):
    from aotc.ir import dtypes
    return b.add("broadcast_in_dim", scalar_constant(b, value, dtype=dtypes.from_name(dtype)), shape=shape,
                 broadcast_dimensions=())


def test_identities_disappear():
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    y = b.add("mul", x, _bcast(b, 1.0, (3, 4)))
    y = b.add("add", _bcast(b, 0.0, (3, 4)), y)
    y = b.add("sub", y, _bcast(b, 0.0, (3, 4)))
    y = b.add("div", y, _bcast(b, 1.0, (3, 4)))
    y = b.add("reshape", y, shape=(3, 4))
    y = b.add("transpose", y, permutation=(0, 1))
    y = b.add("convert", y, dtype="f32")
    y = b.add("slice", y, start=(0, 0), limit=(3, 4), stride=(1, 1))
    y = b.add("neg", b.add("neg", y))
    z = b.add("exp", y)
    g = b.build([z])
    snap = snapshot(g)
    out = simplify(g)
    assert_unchanged(g, snap)
    assert counts(out) == {"exp": 1} and out.nodes[0].inputs[0] is x
    assert_same_fresh(g, out, rtol=0)


def test_transpose_and_reshape_chains_compose():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t = b.add("transpose", b.add("transpose", x, permutation=(1, 2, 0)), permutation=(2, 0, 1))   # identity
    u = b.add("transpose", b.add("transpose", x, permutation=(1, 0, 2)), permutation=(0, 2, 1))   # composed
    r = b.add("reshape", b.add("reshape", x, shape=(6, 4)), shape=(4, 6))
    back = b.add("reshape", b.add("reshape", x, shape=(24,)), shape=(2, 3, 4))                     # cancels
    g = b.build([b.add("exp", t), u, r, b.add("exp", back)])
    out = simplify(g)
    assert counts(out) == {"exp": 2, "transpose": 1, "reshape": 1}
    assert all(n.inputs[0] is x for n in out.nodes if n.op == "exp")
    tr = next(n for n in out.nodes if n.op == "transpose")
    assert tr.inputs[0] is x and tr.attrs["permutation"] == (1, 2, 0)
    assert_same_fresh(g, out, rtol=0)


def test_convert_chains_only_where_exact():
    b = GraphBuilder()
    x = b.input("x", (8,), "f16")
    i = b.input("i", (8,), "i32")
    exact = b.add("convert", b.add("convert", x, dtype="f32"), dtype="f16")      # f16 -> f32 -> f16: x
    lossy = b.add("convert", b.add("convert", i, dtype="f32"), dtype="i32")      # i32 -> f32 loses bits: kept
    y = b.input("y", (8,))
    lossy2 = b.add("convert", b.add("convert", y, dtype="f16"), dtype="f32")     # must not fire
    g = b.build([b.add("neg", exact), lossy, lossy2])
    out = simplify(g)
    assert counts(out) == {"neg": 1, "convert": 4}
    assert next(n for n in out.nodes if n.op == "neg").inputs[0] is x
    assert_same_fresh(g, out, rtol=0)


@pytest.mark.parametrize("divisor,exact", [(4.0, True), (0.125, True), (3.0, False), (1e-3, False), (0.3, False)])
def test_division_by_constant_becomes_multiply_only_when_exact(divisor, exact):
    b = GraphBuilder()
    x = b.input("x", (5, 7))
    g = b.build([b.add("div", x, _bcast(b, divisor, (5, 7)))])
    out = simplify(g)
    assert counts(out) == ({"broadcast_in_dim": 1, "mul": 1} if exact else {"broadcast_in_dim": 1, "div": 1})
    feeds = random_inputs(g, 7)
    np.testing.assert_array_equal(interpret(out, feeds)[0], interpret(g, feeds)[0])      # bit for bit


def test_quantize_division_keeps_rounding_ties():
    """round(x / s) at values whose quotient is a tie in f32: x * fl(1/s) would move some off the tie."""
    b = GraphBuilder()
    x = b.input("x", (4096,))
    g = b.build([b.add("round_even", b.add("div", x, _bcast(b, 0.3, (4096,))))])
    out = simplify(g)
    s = np.float32(0.3)
    xs = (np.arange(4096, dtype=np.float32) - 2048 + np.float32(0.5)) * s      # k.5 quanta, rounded to f32
    want = np.round(xs / s)
    assert np.any(want != np.round(xs * (np.float32(1) / s)))      # the multiply would break some ties
    np.testing.assert_array_equal(interpret(out, {"x": xs})[0], want)


def test_per_element_divisor_and_what_stays_a_division():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    counts_ = b.constant(np.array([[1.0, 2.0, 4.0], [0.5, 8.0, 0.25]], np.float32), "n")     # powers of two
    inexact = b.constant(np.array([[1.0, 2.0, 3.0], [4.0, 6.0, 9.0]], np.float32), "m")
    xi = b.input("xi", (2, 3), "i32")
    h = b.input("h", (2, 3), "f16")
    g = b.build([b.add("div", x, counts_),
                 b.add("div", x, inexact),                                                 # inexact f32: never
                 b.add("div", xi, b.constant(np.full((2, 3), 2, np.int32), "two")),   # integer: never
                 b.add("div", h, b.constant(np.full((2, 3), 3, np.float16), "three")),  # inexact f16: never
                 b.add("div", x, x)])                                                   # not a constant
    out = simplify(g)
    assert counts(out) == {"mul": 1, "div": 4}
    assert_same_fresh(g, out, rtol=0)


def test_broadcast_simplification():
    b = GraphBuilder()
    x = b.input("x", (3,))
    y = b.input("y", (2, 3, 4))
    inner = b.add("broadcast_in_dim", x, shape=(3, 4), broadcast_dimensions=(0,))
    outer = b.add("broadcast_in_dim", inner, shape=(2, 3, 4), broadcast_dimensions=(1, 2))
    ones = b.constant(np.full((1,), 2.5, np.float32), "k")     # a (1,) splat: becomes a 0-d constant
    k = b.add("broadcast_in_dim", ones, shape=(2, 3, 4), broadcast_dimensions=(2,))
    kr = b.add("reshape", b.add("transpose", k, permutation=(2, 1, 0)), shape=(4, 6))
    g = b.build([b.add("add", outer, y), b.add("mul", kr, b.add("reshape", y, shape=(4, 6)))])
    out = simplify(g)
    bcasts = [n for n in out.nodes if n.op == "broadcast_in_dim"]
    assert counts(out) == {"broadcast_in_dim": 2, "add": 1, "reshape": 1, "mul": 1}
    assert bcasts[0].inputs[0] is x and bcasts[0].attrs["broadcast_dimensions"] == (1,)
    assert bcasts[1].inputs[0].shape == () and bcasts[1].attrs["shape"] == (4, 6)
    assert_same_fresh(g, out, rtol=0)


def test_must_not_fire():
    b = GraphBuilder()
    x = b.input("x", (4,))
    two = b.constant(np.array([1.0, 1.0, 1.0, 2.0], np.float32), "not_splat")
    zero = b.add("broadcast_in_dim", scalar_constant(b, 0.0), shape=(4,), broadcast_dimensions=())
    g = b.build([b.add("mul", x, two), b.add("mul", x, zero),      # x * 0 is not 0 for inf/NaN
                 b.add("sub", zero, x), b.add("transpose", b.add("reshape", x, shape=(2, 2)), permutation=(1, 0))])
    out = algsimp.run(g)
    assert list(out.nodes) == list(g.nodes)
    assert_same_fresh(g, out, rtol=0)


def test_graph_output_is_not_aliased_to_an_input():
    b = GraphBuilder()
    x = b.input("x", (4,))
    g = b.build([b.add("mul", x, _bcast(b, 1.0, (4,)))])
    out = simplify(g)
    assert counts(out)["mul"] == 1 and out.outputs[0] is g.outputs[0]


def test_select_with_a_constant_predicate_picks_its_operand():
    for flag in (False, True):
        b = GraphBuilder()
        x = b.input("x", (3, 4))
        y = b.add("exp", x)
        want = x if flag else y
        pred = b.add("broadcast_in_dim", b.constant(np.array(flag)), shape=(3, 4), broadcast_dimensions=())
        out = b.add("select", pred, x, y)
        g = algsimp.run(b.build([b.add("neg", out)]))
        (neg,) = [n for n in g.nodes if n.op == "neg"]
        assert neg.inputs[0] is want and not any(n.op == "select" for n in g.nodes)


def test_e8m0_round_trip_folds_only_where_code_0_survives():
    """e8m0 -> f32 -> e8m0 is x under round_mode down or nearest; under up, code 0 (2^-127, an f32
    subnormal with a mantissa bit) becomes code 1, so the chain stays. f16 -> f32 -> e8m0 folds to
    one convert that keeps its round_mode."""
    from aotc.ir import dtypes
    b = GraphBuilder()
    s = b.input("s", (256,), "f8e8m0fnu")
    h = b.input("h", (256,), "f16")
    outs = [b.add("convert", b.add("convert", s, dtype="f32"), dtype="f8e8m0fnu", round_mode=m)
            for m in ("up", "down", "nearest")]
    outs.append(b.add("convert", b.add("convert", h, dtype="f32"), dtype="f8e8m0fnu", round_mode="nearest"))
    g = b.build([b.add("reshape", o, shape=(16, 16)) for o in outs])
    out = simplify(g)
    prod = out.producers()
    ins = [prod[o].inputs[0] for o in out.outputs]
    assert ins[1] is out.inputs[0] and ins[2] is out.inputs[0]
    assert prod[prod[ins[0]].inputs[0]].op == "convert"      # up: the chain stays
    last = prod[ins[3]]
    assert last.inputs[0] is out.inputs[1] and last.attrs["round_mode"] == "nearest"
    feeds = {"s": np.arange(256, dtype=np.uint8).view(dtypes.f8e8m0fnu.np),
             "h": np.arange(256, dtype=np.uint16).view(np.float16) * np.float16(3)}
    want, got = interpret(g, feeds), interpret(out, feeds)
    for w, o in zip(want, got):
        assert np.array_equal(w.view(np.uint8), o.view(np.uint8))
    assert want[0].view(np.uint8)[0, 0] == 1 and want[1].view(np.uint8)[0, 0] == 0


def test_a_reshape_between_transposes_of_whole_groups_is_one_reshape():
    """ViT's patch tokens: an NHWC conv output, transposed to NCHW, flattened to [N, C, HW] and transposed
    to [N, HW, C], is the NHWC tensor reshaped; a partial cancel leaves one transpose of whole groups."""
    b = GraphBuilder()
    x = b.input("x", (1, 14, 14, 8))
    tokens = b.add("transpose", b.add("reshape", b.add("transpose", x, permutation=(0, 3, 1, 2)), shape=(1, 8, 196)),
                   permutation=(0, 2, 1))
    y = b.input("y", (2, 3, 4, 5))
    part = b.add("transpose", b.add("reshape", b.add("transpose", y, permutation=(0, 2, 3, 1)), shape=(2, 20, 3)),
                 permutation=(2, 0, 1))                                     # [3, 2, 20]: y's dim 1 first
    unit = b.add("reshape", b.add("transpose", b.input("z", (1, 6, 1, 4)), permutation=(2, 1, 0, 3)), shape=(24,))
    g = b.build([b.add("exp", tokens), b.add("exp", part), b.add("exp", unit)])
    out = simplify(g)
    assert counts(out) == {"exp": 3, "reshape": 3, "transpose": 1}
    (tr,) = [n for n in out.nodes if n.op == "transpose"]
    assert tr.attrs["permutation"] == (1, 0, 2) and tr.inputs[0].shape == (2, 3, 20)
    assert_same_fresh(g, out, rtol=0)


@pytest.mark.parametrize("perm,shape", [((0, 2, 1), (2, 12)),     # merges dims the transpose swapped
                                        ((1, 0, 2), (12, 2))])    # splits across the swap
def test_a_reshape_across_a_real_transpose_stays(perm, shape):
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    r = b.add("reshape", b.add("transpose", x, permutation=perm), shape=shape)
    g = b.build([b.add("exp", b.add("transpose", r, permutation=(1, 0)))])
    out = simplify(g)
    assert counts(out) == {"exp": 1, "reshape": 1, "transpose": 2}
    assert_same_fresh(g, out, rtol=0)
