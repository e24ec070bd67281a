"""Generated kernels on the narrow and wide dtypes (float8, int4/uint4, f64, i16/u16/u32/u64),
run on the host emulation against the interpreter.

Fresh random inputs (seed in the message), outputs poisoned by run_on_host.
Float8 results must match bit for bit: the kernels round with aotc_convert.cuh,
the interpreter with ml_dtypes, and both round the same f32 value once.
"""
import ml_dtypes
import numpy as np
import pytest

from aotc.ir import dtypes
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng


def _same(got, want, seed, exact=True):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if exact:
            gb, wb = np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(w).view(np.uint8)
            assert np.array_equal(gb, wb), f"output {i} ({g.dtype}), seed {seed}"
        else:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0, err_msg=f"output {i}, seed {seed}")


@pytest.mark.parametrize("f8", [d.name for d in dtypes.FLOAT8])
def test_float8_convert_round_trip_and_ops(f8):
    rng, seed = fresh_rng()
    d = dtypes.from_name(f8)
    hi = dtypes.float_limits(d)[0]
    b = GraphBuilder()
    x = b.input("x", (783,), "f32")
    q_sat = b.add("convert", x, dtype=f8, saturate=True)
    q_raw = b.add("convert", x, dtype=f8)
    back = b.add("convert", q_sat, dtype="f16")
    m = b.add("max", q_sat, b.add("convert", b.add("neg", x), dtype=f8, saturate=True))
    gt = b.add("compare", q_sat, m, direction="LT")
    graph = b.build([q_sat, q_raw, back, m, gt])
    xs = (rng.standard_normal(783) * hi / 3).astype(np.float32)
    xs[:4] = [np.inf, -np.inf, 2 * hi, -3 * hi]
    got, _, _ = run_on_host(graph, [xs])
    _same(got, interpret(graph, [xs]), seed)


def test_float8_input_to_f32_and_reduce():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (50, 7), "f8e4m3fn")
    s = b.add("reduce", x, kind="max", axes=(1,))
    f = b.add("mul", b.add("convert", x, dtype="f32"), b.add("convert", x, dtype="f32"))
    graph = b.build([s, f])
    xs = (rng.standard_normal((50, 7)) * 40).astype(ml_dtypes.float8_e4m3fn)
    got, _, _ = run_on_host(graph, [xs])
    _same(got, interpret(graph, [xs]), seed)


def test_e8m0_scales_convert_in_every_round_mode_and_move():
    """f32 -> e8m0 in each round mode (saturating or not) inside one region, then decoded to f32, f16
    and bf16, max/compare on the scales, and an e8m0 input transposed and decoded: bit for bit."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (24, 33), "f32")
    s = b.input("s", (33, 24), "f8e8m0fnu")
    outs = []
    for mode in dtypes.E8M0_ROUND_MODES:
        for sat in (False, True):
            q = b.add("convert", x, dtype="f8e8m0fnu", round_mode=mode, saturate=sat)
            outs += [q, b.add("convert", q, dtype="f32")]
    q = outs[0]
    st = b.add("transpose", s, permutation=(1, 0))
    outs += [b.add("convert", q, dtype="f16"), b.add("convert", q, dtype="bf16"), b.add("max", q, st),
             b.add("compare", q, st, direction="LT"), b.add("convert", st, dtype="f32")]
    graph = b.build(outs)
    xs = (rng.standard_normal((24, 33)) * np.exp2(rng.integers(-140, 128, (24, 33)))).astype(np.float32)
    xs.flat[:6] = [np.inf, -np.nan, 0.0, 3.0e38, 2.0**-127, 1.5]
    ss = rng.integers(0, 256, (33, 24), dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    got, _, _ = run_on_host(graph, [xs, ss])
    want = interpret(graph, [xs, ss])
    # f16/bf16 NaN: CUDA's __float2half gives 0x7fff, numpy 0x7e00; any NaN is a NaN there
    for i in (12, 13):
        g, w = got[i].astype(np.float32), want[i].astype(np.float32)
        assert got[i].dtype == want[i].dtype and np.isnan(w).any(), f"output {i}, seed {seed}"
        assert np.array_equal(g, w, equal_nan=True), f"output {i}, seed {seed}"
    _same(got[:12] + got[14:], want[:12] + want[14:], seed)


def test_int4_and_uint4_convert_and_select():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (3, 50), "f32")
    y = b.input("y", (3, 50), "i4")
    xi = b.add("convert", x, dtype="i4")
    mx = b.add("max", xi, y)
    u = b.add("convert", mx, dtype="u4")
    wide = b.add("convert", u, dtype="i32")
    graph = b.build([xi, mx, u, wide])
    xs = (rng.standard_normal((3, 50)) * 12).astype(np.float32)
    ys = rng.integers(-8, 8, (3, 50)).astype(ml_dtypes.int4)
    got, _, _ = run_on_host(graph, [xs, ys])
    _same(got, interpret(graph, [xs, ys]), seed)


def test_f64_elementwise_and_reduce_run_in_double():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (50, 783), "f64")
    y = b.input("y", (50, 783), "f64")
    e = b.add("add", b.add("mul", x, y), b.add("div", x, b.add("abs", y)))
    r = b.add("rem", e, y)
    s = b.add("reduce", e, kind="sum", axes=(1,))
    mn = b.add("reduce", x, kind="min", axes=(0, 1))
    lit = b.add("mul", x, b.constant(np.full((50, 783), 1.0 + 2**-40)))
    graph = b.build([e, r, mn, lit, b.add("convert", x, dtype="f32"), s])
    xs, ys = rng.standard_normal((50, 783)), rng.standard_normal((50, 783)) + 3.0
    got, _, _ = run_on_host(graph, [xs, ys])
    want = interpret(graph, [xs, ys])
    _same(got[:-1], want[:-1], seed)
    # the sum's order differs, so its error follows its terms' magnitudes (at most 783 ulps of sum |e|), not
    # its own: a row that cancels to near 0 failed rtol 1e-12 now and then; a wrong term is off by ~|e|
    assert got[-1].dtype == np.float64
    err = np.abs(got[-1] - want[-1]) / np.abs(want[0]).sum(axis=1)
    assert err.max() <= 1e-12, f"seed {seed}: {err.max():.2e}"


@pytest.mark.parametrize("dt", ["i16", "u16", "u32", "u64"])
def test_wide_integers_arithmetic_bits_and_compare(dt):
    rng, seed = fresh_rng()
    npdt = dtypes.from_name(dt).np
    info = np.iinfo(npdt)
    b = GraphBuilder()
    x = b.input("x", (783,), dt)
    y = b.input("y", (783,), dt)
    ops_ = [b.add(op, x, y) for op in ("add", "sub", "mul", "div", "rem", "max", "min", "and", "xor")]
    sh = b.add("shift_right", x, b.add("and", y, b.constant(np.full(783, 15, npdt))))
    cmp = b.add("compare", x, y, direction="GE")
    red = b.add("reduce", x, kind="max", axes=(0,))
    graph = b.build([*ops_, sh, cmp, red, b.add("convert", x, dtype="f32")])
    xs = rng.integers(info.min, info.max, 783, dtype=npdt, endpoint=True)
    ys = rng.integers(info.min, info.max, 783, dtype=npdt, endpoint=True)
    ys[ys == 0] = 3
    got, _, _ = run_on_host(graph, [xs, ys])
    _same(got, interpret(graph, [xs, ys]), seed)
