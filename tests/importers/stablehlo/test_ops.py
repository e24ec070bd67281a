"""StableHLO elementwise and shape converters, each against jax on the CPU."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check, run_engine, forms  # noqa: E402

UNARY = {
    "exp": jnp.exp, "log": lambda x: jnp.log(jnp.abs(x) + 0.1), "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
    "rsqrt": lambda x: lax.rsqrt(jnp.abs(x) + 0.1), "sqrt": lambda x: jnp.sqrt(jnp.abs(x)),
    "erf": lax.erf, "erfc": lax.erfc, "expm1": jnp.expm1, "log1p": lambda x: jnp.log1p(jnp.abs(x)),
    "cbrt": jnp.cbrt, "tan": lambda x: jnp.tan(0.5 * x), "sinh": jnp.sinh, "cosh": jnp.cosh,
    "asinh": jnp.arcsinh, "acosh": lambda x: jnp.arccosh(jnp.abs(x) + 1.5), "atanh": lambda x: jnp.arctanh(0.9 * jnp.tanh(x)),
    "round": jnp.round, "round_afz": lax.round, "floor": jnp.floor, "ceil": jnp.ceil, "sign": jnp.sign,
    "sin": jnp.sin, "cos": jnp.cos, "neg_abs": lambda x: -jnp.abs(x),
    "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False), "softplus": jax.nn.softplus,
    "elu": jax.nn.elu, "selu": jax.nn.selu, "isfinite": lambda x: jnp.isfinite(x / (x > 0.5)),
    "isinf": lambda x: jnp.isinf(x / (x > 0.5)), "pow": lambda x: jnp.abs(x) ** 1.7,
    "rem": lambda x: jnp.fmod(x, 0.7), "minmax": lambda x: jnp.minimum(jnp.maximum(x, -0.5), 0.5),
    "clip": lambda x: jnp.clip(x, -1.0, 1.0), "reduce_precision": lambda x: lax.reduce_precision(x, 8, 7),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    rng, seed = fresh_rng()
    x = random_array(rng, (3, 17)) * 2
    check(UNARY[name], x, rtol=2e-5, atol=2e-6)


def test_expm1_log1p_exact_near_zero():
    x = np.array([1e-9, -3e-8, 1e-4, 0.5, -20.0, 80.0], np.float32)
    check(lambda v: (jnp.expm1(v), jnp.log1p(jnp.abs(v))), x, rtol=1e-6, atol=0)


def test_compare_select_and_logic():
    rng, _ = fresh_rng()
    a, b = random_array(rng, (4, 5)), random_array(rng, (4, 5))

    def f(a, b):
        m = (a > b) | ((a <= 0) ^ (b != a)) & ~(a == b)
        return jnp.where(m, a, b), jnp.where(a.sum() > 0, a, b), m
    check(f, a, b)


def test_convert_between_dtypes():
    rng, _ = fresh_rng()
    x = random_array(rng, (3, 7)) * 10

    def f(x):
        i = x.astype(jnp.int32)
        return i, x.astype(jnp.bfloat16), x.astype(jnp.float16).astype(jnp.float32), (i % 3).astype(bool), \
            (x > 0).astype(jnp.float32)
    check(f, x, rtol=1e-2)


def test_shape_ops():
    rng, seed = fresh_rng()
    x = random_array(rng, (2, 3, 4))

    def f(x):
        t = jnp.transpose(x, (2, 0, 1)).reshape(4, 6)
        c = jnp.concatenate([x, x * 2, x[:, :1]], axis=1)
        b = jnp.broadcast_to(x[:, None, :, :1], (2, 5, 3, 4))
        io = lax.broadcasted_iota(jnp.int32, (3, 4), 1) + jnp.arange(3, dtype=jnp.int32)[:, None]
        return t, c, b, x[::-1, :, 1:3], jnp.flip(x, (0, 2)), io, x[..., ::3]
    check(f, x)


def test_broadcast_with_unsorted_dims():
    text = b"""func.func @main(%a: tensor<3x2xf32>) -> tensor<2x4x3xf32> {
      %0 = stablehlo.broadcast_in_dim %a, dims = [2, 0] : (tensor<3x2xf32>) -> tensor<2x4x3xf32>
      return %0 : tensor<2x4x3xf32>
    }"""
    from aotc.importers.stablehlo import import_stablehlo
    from aotc.ir.interpreter import interpret
    a = fresh_rng()[0].standard_normal((3, 2)).astype(np.float32)
    (got,) = interpret(import_stablehlo(text), [a])
    np.testing.assert_array_equal(got, np.broadcast_to(a.T[:, None, :], (2, 4, 3)))


def test_pad_interior_and_negative():
    rng, _ = fresh_rng()
    x = random_array(rng, (3, 5))

    def f(x):
        return (lax.pad(x, 1.5, ((1, 2, 1), (-1, 0, 2))), lax.pad(x, 0.0, ((0, -1, 0), (2, -3, 0))),
                jnp.pad(x, ((1, 1), (0, 2)), mode="edge"))
    check(f, x)


def test_pad_and_elementwise_on_engine(tmp_path):
    """Decompositions survive the whole path (passes, fusion, kernels) on the cpu device."""
    rng, seed = fresh_rng()
    x = random_array(rng, (4, 9))

    def f(x):
        y = lax.pad(x, -1.0, ((0, 1, 1), (2, -1, 0)))
        return jnp.expm1(y) + jnp.log1p(jnp.abs(y)) + lax.erfc(y), jnp.flip(x, 1) * jnp.cbrt(x)
    path = tmp_path / "p.mlirbc"
    path.write_bytes(forms(f, x)["bytecode"])
    outs, _, _ = run_engine(path, [x])
    for got, ref in zip(outs, jax.jit(f)(x)):
        np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


def test_custom_call_sharding_is_identity():
    text = b"""func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{replicated}"} : (tensor<4xf32>) -> tensor<4xf32>
      %1 = stablehlo.custom_call @lapack_sgetrf(%0) : (tensor<4xf32>) -> tensor<4xf32>
      return %1 : tensor<4xf32>
    }"""
    from aotc.errors import UnsupportedError
    from aotc.importers.stablehlo import import_stablehlo
    with pytest.raises(UnsupportedError, match="1 unsupported.*lapack_sgetrf"):
        import_stablehlo(text)
    from aotc.ir.interpreter import interpret
    g = import_stablehlo(text.replace(b"%1 = stablehlo.custom_call @lapack_sgetrf(%0)", b"%1 = stablehlo.abs %0")
                         .replace(b"%1 = stablehlo.abs %0 : (tensor<4xf32>) -> tensor<4xf32>",
                                  b"%1 = stablehlo.abs %0 : tensor<4xf32>"))
    a = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(interpret(g, [a])[0], np.abs(a))


def test_bitcast_convert_same_width():
    rng, _ = fresh_rng()
    x = random_array(rng, (3, 7))
    i = rng.integers(-2**31, 2**31, (3, 7)).astype(np.int32)

    def f(x, i):
        bits = lax.bitcast_convert_type(x * 2.0, jnp.int32)
        return (bits, bits & 0x7F800000, lax.bitcast_convert_type(i, jnp.float32),
                lax.bitcast_convert_type(i.astype(jnp.int8), jnp.uint8), lax.bitcast_convert_type(x, jnp.float32))
    g = check(f, x, i)
    assert sum(n.op == "bitcast_convert" for n in g.nodes) == 3     # f32 -> f32 is no node


@pytest.mark.parametrize("src,result,match", [
    ("f32", "4x2xbf16", "element widths differ"),                 # a wider source gains a minor dimension
    ("f16", "4xbf16", "NaN bit patterns"),
    ("i8", "4x8xi1", "i1 is one bit wide"),
])
def test_bitcast_convert_rejects_other_pairs(src, result, match):
    from aotc.errors import UnsupportedError
    from aotc.importers.stablehlo import import_stablehlo
    text = f"""func.func @main(%a: tensor<4x{src}>) -> tensor<{result}> {{
      %0 = stablehlo.bitcast_convert %a : (tensor<4x{src}>) -> tensor<{result}>
      return %0 : tensor<{result}>
    }}""".encode()
    with pytest.raises(UnsupportedError, match=match):
        import_stablehlo(text)
