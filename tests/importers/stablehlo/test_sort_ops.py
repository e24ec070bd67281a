"""StableHLO sort / chlo.top_k / map against jax on the CPU (NaN, signed zeros and ties included)."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from aotc.errors import UnsupportedError  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from aotc.ir.interpreter import interpret  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check, close, forms, run_engine, want  # noqa: E402

SORTS = {   # x (3, 7) f32 with ties, NaN, -0/+0 and inf; k (3, 7) i32
    "sort": lambda x, k: jnp.sort(x),
    "sort_axis0_descending": lambda x, k: jnp.sort(x, axis=0, descending=True),
    "argsort_stable": lambda x, k: jnp.argsort(x, stable=True),
    "sort_int": lambda x, k: (jnp.sort(k, axis=1), x[0]),
    "lexsort": lambda x, k: jnp.lexsort((x, k)),
    "key_value": lambda x, k: lax.sort((k, x), num_keys=1),
    "two_keys": lambda x, k: lax.sort((k % 3, x, k), num_keys=2),
    "top_k": lambda x, k: lax.top_k(x, 3),
    "top_k_int_all": lambda x, k: (lax.top_k(k, 7), x[0]),
    "top_k_3d": lambda x, k: lax.top_k(jnp.stack([x, x * 2 - 1]), 2),
}


@pytest.mark.parametrize("name", sorted(SORTS))
def test_sort(name):
    rng, _ = fresh_rng()
    x = np.round(random_array(rng, (3, 7)) * 2).astype(np.float32)        # rounding makes ties
    x.flat[rng.choice(21, 4, replace=False)] = [np.nan, -0.0, 0.0, np.inf]
    k = rng.integers(-5, 5, (3, 7)).astype(np.int32)
    check(SORTS[name], x, k)


def test_map():
    rng, seed = fresh_rng()
    a, b = random_array(rng, (2, 5)), random_array(rng, (2, 5))
    g = import_stablehlo("""
func.func @main(%a: tensor<2x5xf32>, %b: tensor<2x5xf32>) -> tensor<2x5xf32> {
  %0 = "stablehlo.map"(%a, %b) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %c = stablehlo.constant dense<2.0> : tensor<f32>
      %m = stablehlo.multiply %x, %c : tensor<f32>
      %s = stablehlo.maximum %m, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}""")
    close(interpret(g, [a, b])[0], np.maximum(a * 2, b), 0, 0, f"seed {seed}")


def test_non_elementwise_comparator_is_reported():
    text = """
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.sort"(%a) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %r = stablehlo.reshape %x : (tensor<f32>) -> tensor<1xf32>
      %s = stablehlo.reshape %r : (tensor<1xf32>) -> tensor<f32>
      %c = stablehlo.compare LT, %s, %y : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
  }) {dimension = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}"""
    with pytest.raises(UnsupportedError, match="sort comparator body uses stablehlo.reshape"):
        import_stablehlo(text)


def test_top_k_and_argsort_engine():
    rng, seed = fresh_rng()
    logits = random_array(rng, (2, 9))

    def f(logits):
        v, i = lax.top_k(jax.nn.log_softmax(logits), 4)
        return v, i, jnp.argsort(logits, axis=-1)
    outs, _, _ = run_engine(forms(f, logits)["export"], [logits])
    for k, (got, ref) in enumerate(zip(outs, want(f, logits), strict=True)):
        close(got, ref, 1e-5, 1e-6, f"output {k}, seed {seed}")
