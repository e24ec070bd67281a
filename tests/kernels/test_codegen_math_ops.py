"""The elementwise ops added for ONNX conformance (inverse/hyperbolic trig, bit shifts, bitcasts) on the host emulation.

Generated kernels vs the interpreter, poisoned outputs, shapes off the block
size (783 elements), fresh random inputs; shifts include out-of-range counts
(negative, equal to and past the bit width), which must saturate like ONNX.
"""
import numpy as np

from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_codegen import check

_DOMAIN = {"asin": (-0.99, 0.99), "acos": (-0.99, 0.99), "atanh": (-0.95, 0.95), "acosh": (1.0, 6.0),
           "tan": (-1.4, 1.4)}


_TRIG = ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]


def test_trig_kernels():
    """All nine ops, f32 and f16, in one graph (one host build)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    outs, feeds = [], []
    for op in _TRIG:
        lo, hi = _DOMAIN.get(op, (-3.0, 3.0))
        xs = random_array(rng, (3, 261), np.float32, lo, hi)
        outs += [b.add(op, b.input(f"x_{op}", (3, 261))), b.add(op, b.input(f"h_{op}", (3, 261), "f16"))]
        feeds += [xs, xs.astype(np.float16)]
    check(b.build(outs), feeds, seed, rtol=2e-3, atol=2e-3, kinds=["loop"] * len(outs))


def test_shift_kernels_saturate_out_of_range():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    outs, feeds = [], []
    for dt, npdt in (("i8", np.int8), ("i32", np.int32), ("i64", np.int64), ("u8", np.uint8)):
        npdt = np.dtype(npdt)
        bits = 8 * npdt.itemsize
        info = np.iinfo(npdt)
        x = b.input(f"x_{dt}", (783,), dt)
        s = b.input(f"s_{dt}", (783,), dt)
        outs += [b.add("shift_left", x, s), b.add("shift_right", x, s)]
        xs = rng.integers(max(info.min, -1000), min(info.max, 1000), 783, endpoint=True).astype(npdt)
        ss = rng.integers(-3 if info.min < 0 else 0, bits + 3, 783, endpoint=True).astype(npdt)
        ss[:4] = [0, bits - 1, bits, bits + 1]
        feeds += [xs, ss]
    check(b.build(outs), feeds, seed, kinds=["loop"] * len(outs))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def test_bitcast_kernels_keep_every_bit():
    """bitcast_convert between every same-width pair of IR dtypes, alone and fused into arithmetic.

    Raw bit patterns cover NaNs (signalling ones too), infinities, denormals
    and negative zero; the results must equal the interpreter's (numpy's
    `view`) bit for bit.
    """
    rng, seed = fresh_rng()
    b = GraphBuilder()
    outs, feeds = [], []

    def raw(dt, n=783):
        return rng.integers(0, 256, n * np.dtype(dt).itemsize, dtype=np.uint8).view(dt)

    pairs = [("f32", "i32", np.float32), ("i32", "f32", np.int32), ("i8", "u8", np.int8), ("u8", "i8", np.uint8),
             ("bool", "u8", np.bool_), ("bool", "i8", np.bool_), ("u8", "bool", np.uint8), ("i64", "i64", np.int64)]
    for src, dst, npdt in pairs:
        x = b.input(f"x_{src}_{dst}", (783,), src)
        outs.append(b.add("bitcast_convert", x, dtype=dst))
        feeds.append(random_array(rng, 783, np.bool_) if npdt == np.bool_ else raw(npdt))
    # fused: the exponent field of x * y, and a float built from integer bits then scaled
    x, y = b.input("fx", (3, 261)), b.input("fy", (3, 261))
    bits = b.add("bitcast_convert", b.add("mul", x, y), dtype="i32")
    outs.append(b.add("and", bits, b.constant(np.full((3, 261), 0x7F800000, np.int32))))
    k = b.input("k", (3, 261), "i32")
    outs.append(b.add("mul", b.add("bitcast_convert", b.add("add", k, k), dtype="f32"), x))
    feeds += [random_array(rng, (3, 261)), random_array(rng, (3, 261)),
              rng.integers(0x00800000, 0x1F000000, (3, 261)).astype(np.int32)]
    graph = b.build(outs)
    want = interpret(graph, feeds)
    got, kernels, _ = run_on_host(graph, feeds)
    assert all(k.region.kind == "loop" for k in kernels)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {i}"
        np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=f"output {i}, seed {seed}")


def test_integer_powers_are_multiplications_with_the_sign_of_the_base():
    """pow(x, 2|3|4|-1) (gelu_new's x**3, RMSNorm's x**2) on negative bases: no powf, exact signs.

    powf is kept for other exponents; a fractional power of a negative base is NaN, as numpy says.
    """
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (783,))
    outs = [b.add("pow", x, b.add("broadcast_in_dim", b.constant(np.float32(e)), shape=(783,),
                                  broadcast_dimensions=()))
            for e in (2.0, 3.0, 4.0, -1.0, 2.5)]
    xs = random_array(rng, (783,), np.float32, -3.0, 3.0)
    xs[:4] = [-2.0, -0.0, 0.0, -1e-3]
    got, kernels, _ = run_on_host(b.build(outs), [xs])
    source = "\n".join(k.source for k in kernels)
    assert source.count("powf(") == 1, "only the x ** 2.5 may call powf"
    want = interpret(b.build(outs), [xs])
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=3e-7, atol=0, equal_nan=True, err_msg=f"output {i}, seed {seed}")
    assert got[1][0] == -8.0 and got[0][0] == 4.0 and got[3][0] == -0.5
    assert np.signbit(got[1][1]) and got[3][1] == -np.inf and np.isnan(got[4][0])
