"""StableHLO shifts, atan2, real/imag, chlo inverse trig and batch norms against jax / the spec's formulas."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from aotc.ir.interpreter import interpret  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check, close  # noqa: E402


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_shifts(dtype):
    rng, _ = fresh_rng()
    bits = 8 * np.dtype(dtype).itemsize
    x = random_array(rng, (40,), dtype, low=np.iinfo(dtype).min, high=np.iinfo(dtype).max)
    n = rng.integers(0 if dtype == np.uint8 else -2, bits + 3, (40,)).astype(dtype)
    check(lambda x, n: (lax.shift_left(x, n), lax.shift_right_arithmetic(x, n), lax.shift_right_logical(x, n)),
          x, n)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_bit_counts(dtype):
    rng, _ = fresh_rng()
    info = np.iinfo(dtype)
    x = np.concatenate([random_array(rng, (30,), dtype, low=info.min, high=info.max),
                        np.array([0, 1, info.max, info.min, -1 if info.min else 7], dtype)])
    check(lambda x: (lax.population_count(x), lax.clz(x)), x)


def test_atan2_with_signed_zeros_and_infinities():
    rng, _ = fresh_rng()
    edge = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
    y = np.concatenate([random_array(rng, (30,)), np.repeat(edge, 7)])
    x = np.concatenate([random_array(rng, (30,)), np.tile(edge, 7)])
    check(lambda y, x: jnp.arctan2(y, x), y, x, rtol=1e-6, atol=1e-6)


def test_inverse_trig():
    rng, _ = fresh_rng()
    x = random_array(rng, (50,), low=-0.99, high=0.99)
    check(lambda x: (jnp.arcsin(x), jnp.arccos(x), jnp.arctan(x * 10)), x)


def test_real_and_imag_of_floats():
    rng, _ = fresh_rng()
    x = random_array(rng, (3, 4))
    g = import_stablehlo("""
func.func @main(%x: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
  %0 = stablehlo.real %x : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %1 = stablehlo.imag %x : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0, %1 : tensor<3x4xf32>, tensor<3x4xf32>
}""")
    re, im = interpret(g, [x])
    np.testing.assert_array_equal(re, x)
    np.testing.assert_array_equal(im, np.zeros_like(x))


_BN = """
func.func @main(%x: tensor<2x3x4xf32>, %s: tensor<3xf32>, %o: tensor<3xf32>, %m: tensor<3xf32>,
                %v: tensor<3xf32>, %dy: tensor<2x3x4xf32>)
    -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>,
        tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0 = "stablehlo.batch_norm_inference"(%x, %s, %o, %m, %v) {epsilon = 0.001 : f32, feature_index = 1 : i64}
      : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>
  %1:3 = "stablehlo.batch_norm_training"(%x, %s, %o) {epsilon = 0.001 : f32, feature_index = 1 : i64}
      : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %2:3 = "stablehlo.batch_norm_grad"(%x, %s, %m, %v, %dy) {epsilon = 0.001 : f32, feature_index = 1 : i64}
      : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>)
      -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>)
  return %0, %1#0, %1#1, %1#2, %2#0, %2#1, %2#2 : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<3xf32>,
      tensor<3xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
}"""


def test_batch_norms():
    """Against jax: inference/training written out; grad (given the batch statistics) is the vjp of training."""
    rng, seed = fresh_rng()
    x, dy = random_array(rng, (2, 3, 4)), random_array(rng, (2, 3, 4))
    s, o, m = random_array(rng, (3,)), random_array(rng, (3,)), random_array(rng, (3,))
    v = random_array(rng, (3,), low=0.5, high=2.0)
    bm, bv = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    got_inference = interpret(import_stablehlo(_BN), [x, s, o, m, v, dy])[0]
    got = interpret(import_stablehlo(_BN), [x, s, o, bm, bv, dy])[1:]
    b = lambda t: t[None, :, None]  # noqa: E731
    norm = lambda x, s, m, v: (x - b(m)) / jnp.sqrt(b(v) + 1e-3) * b(s)  # noqa: E731
    _, vjp = jax.vjp(lambda x, s: norm(x, s, x.mean(axis=(0, 2)), x.var(axis=(0, 2))), x, s)
    gx, gs = vjp(dy)
    close(got_inference, np.asarray(norm(x, s, m, v) + b(o)), 1e-5, 1e-6, f"inference, seed {seed}")
    ref = [norm(x, s, bm, bv) + b(o), bm, bv, gx, gs, dy.sum(axis=(0, 2))]
    for k, (a, r) in enumerate(zip(got, ref, strict=True)):
        close(a, np.asarray(r, np.float32), 1e-4, 1e-5, f"output {k}, seed {seed}")
