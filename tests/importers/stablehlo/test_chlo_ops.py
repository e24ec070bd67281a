"""The chlo dialect: every op jaxlib registers is imported or refused with its reason; the rest against jax."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from aotc.errors import UnsupportedError  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo, importer  # noqa: E402
from aotc.importers.stablehlo.chlo_ops import BROADCASTING  # noqa: E402
from aotc.importers.stablehlo.support import chlo_registry_ops  # noqa: E402
from aotc.ir.interpreter import interpret  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check, close  # noqa: E402


def test_every_registered_chlo_op_is_imported_or_has_a_reason():
    importer.load_converters()
    ops = [f"chlo.{n}" for n in chlo_registry_ops()]
    assert len(ops) >= 50 and "chlo.square" in ops
    missing = [n for n in ops if n not in importer.CONVERTERS and n not in importer.UNSUPPORTED]
    assert not missing, missing
    assert set(importer.UNSUPPORTED) <= set(ops)          # no stale reasons
    assert not set(importer.UNSUPPORTED) & set(importer.CONVERTERS)


_T = "tensor<3x4x{t}>"


def _program(op: str, operands: list[str], result: str, attrs: str = "") -> str:
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operands))
    uses = ", ".join(f"%a{i}" for i in range(len(operands)))
    return (f"func.func @main({args}) -> {result} {{\n"
            f"  %0 = \"{op}\"({uses}) {attrs} : ({', '.join(operands)}) -> {result}\n"
            f"  return %0 : {result}\n}}")


_JAX = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div, "remainder": lax.rem,
        "power": lax.pow, "maximum": lax.max, "minimum": lax.min, "and": lax.bitwise_and, "or": lax.bitwise_or,
        "xor": lax.bitwise_xor, "atan2": lax.atan2, "shift_left": lax.shift_left,
        "shift_right_arithmetic": lax.shift_right_arithmetic, "shift_right_logical": lax.shift_right_logical,
        "compare": lax.lt, "next_after": lax.nextafter, "polygamma": lax.polygamma, "zeta": lax.zeta}
_INT = {"and", "or", "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical"}


def _operand(rng, name, shape, dtype):
    if name in _INT:
        return rng.integers(-40, 40, shape).astype(dtype) if "shift" not in name else \
            rng.integers(0, 12, shape).astype(dtype)
    if name == "zeta":
        return random_array(rng, shape, low=1.5, high=4).astype(dtype)
    return random_array(rng, shape, low=0.5, high=3).astype(dtype)


@pytest.mark.parametrize("name", sorted(set(BROADCASTING) - {"select"}))
def test_broadcasting_binary_ops(name):
    """(4,) against (3, 4) through broadcast_dimensions, and (3, 1) against (3, 4) numpy-style."""
    assert name in _JAX
    rng, _ = fresh_rng()
    dt, t = (np.int32, "i32") if name in _INT else (np.float32, "f32")
    out_t = "i1" if name == "compare" else t
    attrs = "{comparison_direction = #chlo<comparison_direction LT>}" if name == "compare" else ""
    for lhs_shape, rhs_shape, bdims in (((4,), (3, 4), "[1]"), ((3, 4), (3, 1), None)):
        lt = f"tensor<{'x'.join(map(str, lhs_shape))}x{t}>"
        rt = f"tensor<{'x'.join(map(str, rhs_shape))}x{t}>"
        extra = attrs
        if bdims:
            bd = f"broadcast_dimensions = array<i64: {bdims[1:-1]}>"
            extra = "{" + ", ".join(filter(None, [attrs.strip("{}"), bd])) + "}"
        g = import_stablehlo(_program(f"chlo.broadcast_{name}", [lt, rt], f"tensor<3x4x{out_t}>", extra))
        a, b = _operand(rng, name, lhs_shape, dt), _operand(rng, name, rhs_shape, dt)
        if name == "zeta":
            a = a + 1.0
        if name == "polygamma":
            a = np.floor(a)
        got = interpret(g, [a, b])[0]
        want = np.asarray(_JAX[name](*np.broadcast_arrays(a, b)))
        close(got, want, 2e-5, 1e-6, name)


def test_broadcast_select_and_compare_type():
    rng, _ = fresh_rng()
    g = import_stablehlo("""
func.func @main(%p: tensor<4xi1>, %a: tensor<3x4xf32>, %b: tensor<f32>) -> tensor<3x4xf32> {
  %0 = chlo.broadcast_select %p, %a, %b : (tensor<4xi1>, tensor<3x4xf32>, tensor<f32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}""")
    p = rng.integers(0, 2, (4,)).astype(bool)
    a, b = random_array(rng, (3, 4)), random_array(rng, ())
    np.testing.assert_array_equal(interpret(g, [p, a, b])[0], np.where(p, a, b))


def test_constants_square_conj():
    rng, _ = fresh_rng()
    g = import_stablehlo("""
func.func @main(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2xi32>) {
  %0 = "chlo.constant_like"(%x) {value = 2.5 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = chlo.square %x : tensor<2x3xf32> -> tensor<2x3xf32>
  %2 = chlo.conj %1 : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = stablehlo.add %0, %2 : tensor<2x3xf32>
  %4 = chlo.constant dense<[7, -3]> : tensor<2xi32>
  return %3, %2, %4 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2xi32>
}""")
    x = random_array(rng, (2, 3))
    s, sq, c = interpret(g, [x])
    np.testing.assert_allclose(s, x * x + 2.5, rtol=1e-6)
    np.testing.assert_array_equal(sq, x * x)
    np.testing.assert_array_equal(c, [7, -3])
    check(lambda x: lax.square(x) + lax.square(x.astype(jnp.int32)), x)


@pytest.mark.parametrize("t,dtype", [("i32", np.int32), ("i64", np.int64), ("i8", np.int8), ("ui8", np.uint8)])
def test_mulhi(t, dtype):
    rng, _ = fresh_rng()
    info = np.iinfo(dtype)
    ty = f"tensor<64x{t}>"
    g = import_stablehlo(_program("chlo.mulhi", [ty, ty], ty))
    a = rng.integers(info.min, info.max, (64,), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, (64,), dtype=dtype, endpoint=True)
    a[:4], b[:4] = [info.min, info.max, -1 if info.min else 1, info.min], [info.min, info.max, info.max, 1]
    bits = 8 * np.dtype(dtype).itemsize
    want = np.array([(int(x) * int(y)) >> bits for x, y in zip(a, b)]).astype(dtype)
    np.testing.assert_array_equal(interpret(g, [a, b])[0], want)


def test_next_after_against_jax():
    rng, _ = fresh_rng()
    edge_x = np.float32([0, 0, -0.0, 1, np.nan, 2, -1, np.inf])
    edge_y = np.float32([1, -1, 1, 1, 0, np.nan, -np.inf, 0])
    x = np.concatenate([random_array(rng, (40,)), edge_x])
    y = np.concatenate([random_array(rng, (40,)), edge_y])
    check(lax.nextafter, x, y, rtol=0, atol=0)


@pytest.mark.parametrize("op,operands,result,reason", [
    ("chlo.broadcast_complex", ["tensor<3xf32>", "tensor<3xf32>"], "tensor<3xcomplex<f32>>", "complex"),
    ("chlo.next_after", ["tensor<3xf16>", "tensor<3xf16>"], "tensor<3xf16>", "f32 only"),
])
def test_unsupported_forms_are_refused_by_name(op, operands, result, reason):
    with pytest.raises(UnsupportedError, match=reason) as e:
        import_stablehlo(_program(op, operands, result))
    assert op in str(e.value)


def test_scan_is_refused_with_its_reason():
    text = """
func.func @main(%x: tensor<4xf32>, %i: tensor<f32>) -> (tensor<4xf32>, tensor<f32>) {
  %0:2 = "chlo.scan"(%x, %i) ({
  ^bb0(%a: tensor<f32>, %c: tensor<f32>):
    %s = stablehlo.add %a, %c : tensor<f32>
    stablehlo.return %s, %s : tensor<f32>, tensor<f32>
  }) {dimension = 0 : i64, operandSegmentSizes = array<i32: 1, 1>, resultSegmentSizes = array<i32: 1, 1>}
      : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<f32>
}"""
    with pytest.raises(UnsupportedError, match="chlo.scan.*decomposition"):
        import_stablehlo(text)


@pytest.mark.parametrize("sizes", [[2, 1, 3], [0, 4, 1]])
def test_ragged_dot_as_jax_lowers_it_for_gpus(sizes):
    """jax emits chlo.ragged_dot for GPU/TPU targets (its CPU lowering expands it); rows past the groups are 0."""
    rng, _ = fresh_rng()
    lhs, rhs = random_array(rng, (7, 4)), random_array(rng, (3, 4, 5))
    gs = np.array(sizes, np.int32)
    text = jax.jit(lax.ragged_dot).trace(lhs, rhs, gs).lower(lowering_platforms=("cuda",)).as_text()
    assert "chlo.ragged_dot" in text
    g = import_stablehlo(text)
    close(interpret(g, [lhs, rhs, gs])[0], np.asarray(lax.ragged_dot(lhs, rhs, gs)), 1e-5, 1e-5)


def test_ragged_dot_other_modes_are_refused():
    text = """
func.func @main(%a: tensor<2x6x4xf32>, %b: tensor<3x2x4x5xf32>, %g: tensor<2x3xi32>) -> tensor<2x6x5xf32> {
  %0 = "chlo.ragged_dot"(%a, %b, %g) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [0],
      rhs_batching_dimensions = [1], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [2],
      lhs_ragged_dimensions = [1], rhs_group_dimensions = [0]>}
      : (tensor<2x6x4xf32>, tensor<3x2x4x5xf32>, tensor<2x3xi32>) -> tensor<2x6x5xf32>
  return %0 : tensor<2x6x5xf32>
}"""
    with pytest.raises(UnsupportedError, match="chlo.ragged_dot.*no batch dims"):
        import_stablehlo(text)


def test_broadcasting_ops_on_dynamic_dims():
    text = """
func.func @main(%a: tensor<?x4xf32>, %b: tensor<4xf32>, %c: tensor<?x1xf32>) -> (tensor<?x4xf32>, tensor<?x4xi1>) {
  %0 = chlo.broadcast_add %a, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %1 = chlo.broadcast_compare %0, %c {comparison_direction = #chlo<comparison_direction GT>}
      : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xi1>
  return %0, %1 : tensor<?x4xf32>, tensor<?x4xi1>
}"""
    with pytest.raises(UnsupportedError, match=r"chlo.broadcast_compare .*arg0_dim0, arg2_dim0 broadcast"):
        import_stablehlo(text, dynamic={"arg0_dim0": (1, 8), "arg2_dim0": (1, 8)})   # 1 or not at run time?
    g = import_stablehlo(text.replace("%c: tensor<?x1xf32>", "%c: tensor<1x1xf32>").replace(
        "tensor<?x1xf32>) -> tensor<?x4xi1>", "tensor<1x1xf32>) -> tensor<?x4xi1>"), dynamic={"arg0_dim0": (1, 8)})
    rng, _ = fresh_rng()
    for n in (1, 5):
        a, b, c = random_array(rng, (n, 4)), random_array(rng, (4,)), random_array(rng, (1, 1))
        s, gt = interpret(g, [a, b, c])
        np.testing.assert_allclose(s, a + b, rtol=1e-6)
        np.testing.assert_array_equal(gt, (a + b) > c)
