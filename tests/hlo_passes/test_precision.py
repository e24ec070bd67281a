import numpy as np
import pytest

from aotc.errors import AotcError
from aotc.hlo_passes import precision
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir import dtypes
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.bench.models.small import transformer_block
from tests.helpers.rng import fresh_rng, random_array

from ._graphs import assert_same_fresh, assert_unchanged, counts, snapshot


def _layer_norm_linear(scale=1.0):
    """x (4, 64) -> LayerNorm (sum, d*d, rsqrt) -> Linear -> softmax."""
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (4, 64))
    n = b.constant(np.full((4,), 1 / 64, np.float32), "inv_n")
    mean = b.add("mul", b.add("reduce", x, axes=(1,), kind="sum", name="ln"), n, name="ln")
    d = b.add("sub", x, b.add("broadcast_in_dim", mean, shape=(4, 64), broadcast_dimensions=(0,), name="ln"), name="ln")
    var = b.add("mul", b.add("reduce", b.add("mul", d, d, name="ln"), axes=(1,), kind="sum", name="ln"), n, name="ln")
    inv = b.add("rsqrt", b.add("add", var, b.constant(np.full((4,), 1e-5, np.float32)), name="ln"), name="ln")
    y = b.add("mul", d, b.add("broadcast_in_dim", inv, shape=(4, 64), broadcast_dimensions=(0,), name="ln"), name="ln")
    w = b.constant(random_array(rng, (64, 16)) * 0.1, "w")
    z = b.add("dot_general", y, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,), name="fc")
    m = b.add("broadcast_in_dim", b.add("reduce", z, axes=(1,), kind="max", name="sm"), shape=(4, 16),
              broadcast_dimensions=(0,), name="sm")
    e = b.add("exp", b.add("sub", z, m, name="sm"), name="sm")
    s = b.add("broadcast_in_dim", b.add("reduce", e, axes=(1,), kind="sum", name="sm"), shape=(4, 16),
              broadcast_dimensions=(0,), name="sm")
    return b.build([b.add("div", e, s, name="sm")])


@pytest.mark.parametrize("prec", ["fp16", "bf16"])
def test_low_precision_keeps_sums_in_f32(prec):
    low = precision.PRECISIONS[prec]
    g = _layer_norm_linear()
    snap = snapshot(g)
    out = precision.make(prec)(g)
    verify(out)
    assert_unchanged(g, snap)
    assert [v.type for v in out.inputs] == [v.type for v in g.inputs] and out.outputs == g.outputs
    by_op = {}
    for n in out.nodes:
        by_op.setdefault(n.op, []).append(n)
    assert all(n.output.dtype == dtypes.f32 for n in by_op["reduce"] if n.attrs["kind"] == "sum")
    assert all(n.output.dtype == low for n in by_op["reduce"] if n.attrs["kind"] == "max")
    assert all(n.output.dtype == low and n.inputs[1].dtype == low for n in by_op["dot_general"])
    assert by_op["rsqrt"][0].output.dtype == dtypes.f32
    squares = [n for n in by_op["mul"] if n.inputs[0] is n.inputs[1]]
    assert len(squares) == 1 and squares[0].output.dtype == dtypes.f32          # d*d in f32
    assert all(a.dtype != np.float32 for v, a in out.constants.items() if v.shape == (64, 16))   # weights
    assert_same_fresh(g, out, rtol=3e-2 if prec == "bf16" else 4e-3, atol=1e-3)


def test_large_activations_do_not_overflow_in_fp16():
    g = _layer_norm_linear()
    out = precision.make("fp16")(g)
    x = np.random.default_rng(0).normal(0, 1000.0, (4, 64)).astype(np.float32)  # d*d ~ 1e6 > 65504
    (want,), (got,) = interpret(g, [x]), interpret(out, [x])
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("prec", ["fp16", "bf16"])
def test_out_of_range_constants_clamp_instead_of_turning_infinite(prec):
    """A mask of float32's lowest value (transformers' finfo.min) must not become -inf: a fully masked
    row would softmax to NaN instead of the model's uniform row."""
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    mask = b.constant(np.array([[np.finfo(np.float32).min] * 8, [0.0] * 8], np.float32), "mask")
    s = b.add("add", x, mask)
    e = b.add("exp", b.add("sub", s, b.add("broadcast_in_dim", b.add("reduce", s, kind="max", axes=(1,)),
                                          shape=(2, 8), broadcast_dimensions=(0,))))
    g = b.build([b.add("div", e, b.add("broadcast_in_dim", b.add("reduce", e, kind="sum", axes=(1,)), shape=(2, 8),
                                         broadcast_dimensions=(0,)))])
    out = precision.make(prec)(g)
    low = [a for a in out.constants.values() if a.shape == (2, 8)]
    assert low and all(np.isfinite(a.astype(np.float32)).all() for a in low)
    x_in = random_array(fresh_rng()[0], (2, 8))
    (got,) = interpret(out, [x_in])
    assert np.isfinite(got.astype(np.float32)).all()
    np.testing.assert_allclose(got.astype(np.float32)[0], 1 / 8, rtol=1e-2)


def test_keep_fp32_by_node_name_and_unknown_names():
    g = _layer_norm_linear()
    out = precision.make("fp16", ["fc"])(g)
    dot = next(n for n in out.nodes if n.op == "dot_general")
    assert dot.output.dtype == dtypes.f32 and dot.inputs[1].dtype == dtypes.f32
    with pytest.raises(AotcError, match="--keep-fp32 names nope, which match no node"):
        precision.make("fp16", ["nope"])(g)
    with pytest.raises(AotcError, match="unknown precision 'fp64'"):
        precision.make("fp64")


def test_must_not_fire():
    g = _layer_norm_linear()
    assert list(precision.make("fp32")(g).nodes) == list(g.nodes)
    once = precision.make("fp16")(g)
    twice = precision.make("fp16")(once)          # nothing left in f32 to convert: idempotent
    assert counts(twice) == counts(once)
    b = GraphBuilder()                             # integer graphs are untouched
    i = b.input("i", (5,), "i32")
    g2 = b.build([b.add("mul", i, i)])
    assert list(precision.make("bf16")(g2).nodes) == list(g2.nodes)


def test_transformer_block_fp16_close_to_f32():
    g = import_onnx(transformer_block()[0])
    out = precision.make("fp16")(g)
    verify(out)
    assert counts(out)["convert"] > counts(g).get("convert", 0)
    assert_same_fresh(g, out, rtol=2e-2, atol=2e-2)


def test_tf32_marks_dense_gemms_and_convs_only():
    """--precision tf32 changes no dtype: f32 GEMMs and dense convs get precision='tf32', the rest stays."""
    g = _layer_norm_linear()
    out = precision.make("tf32")(g)
    verify(out)
    assert [n.attrs.get("precision") for n in out.nodes if n.op == "dot_general"] == ["tf32"]
    assert counts(out) == counts(g) and all(v.dtype == dtypes.f32 for n in out.nodes for v in n.outputs)
    assert_same_fresh(g, out, rtol=1e-2, atol=1e-3)
    kept = precision.make("tf32", ["fc"])(g)
    assert all("precision" not in n.attrs for n in kept.nodes)
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, 6, 8, 8))
    dense = b.add("convolution", x, b.constant(random_array(rng, (4, 6, 3, 3))), strides=(1, 1),
                  padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1)
    dw = b.add("convolution", x, b.constant(random_array(rng, (6, 1, 3, 3))), strides=(1, 1),
               padding=((1, 1), (1, 1)), dilations=(1, 1), groups=6)
    convs = precision.make("tf32")(b.build([dense, dw]))
    assert [n.attrs.get("precision") for n in convs.nodes if n.op == "convolution"] == ["tf32", None]


def test_tf32_leaves_attention_gemms_in_f32():
    """The flash-attention kernel cannot honor operand rounding, so its two GEMMs are not marked."""
    g = import_onnx(transformer_block()[0])
    out = precision.make("tf32")(g)
    from aotc.patterns.attention import find_attention
    matches = find_attention(out)
    assert matches
    att = {n for m in matches.values() for n in (m.qk, m.pv)}
    marks = {n: n.attrs.get("precision") for n in out.nodes if n.op == "dot_general"}
    assert all(marks[n] is None for n in att) and any(p == "tf32" for n, p in marks.items() if n not in att)


@pytest.mark.parametrize("prec", ["fp16", "bf16"])
def test_bitcast_keeps_reading_f32(prec):
    """f32 -> i32 bit reinterpretation must see the f32 bits, not a low-precision copy."""
    b = GraphBuilder()
    x = b.input("x", (4, 5))
    bits = b.add("bitcast_convert", x, dtype="i32")
    g = b.build([bits, b.add("tanh", b.add("exp", x))])
    out = precision.make(prec)(g)
    verify(out)
    xin = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    np.testing.assert_array_equal(interpret(out, [xin])[0], interpret(g, [xin])[0])
