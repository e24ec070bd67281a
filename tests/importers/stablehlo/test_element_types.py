"""StableHLO programs on the wider set of element types (ui32, f64, float8, i16), against jax.

jax.random's threefry runs on ui32 (shifts, xor, bitcast to f32), so a
program that draws random numbers from a key is the ui32 test; the engine
runs it on the cpu device too.
"""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from aotc.ir.interpreter import interpret  # noqa: E402
from tests.helpers.rng import fresh_rng  # noqa: E402
from tests.importers.stablehlo.test_importer import check, run_engine, want  # noqa: E402


def _random_uniform(x):
    key = jax.random.key_data(jax.random.PRNGKey(7))
    k = jax.random.wrap_key_data(key + x[0].astype(jnp.uint32))
    return jax.random.uniform(k, (5, 9)), jax.random.bits(k, (4,), jnp.uint32)


def test_jax_random_on_ui32_matches_jax_in_interpreter_and_engine():
    x = np.array([3], np.int32)
    check(_random_uniform, x, rtol=0, atol=0)
    text = jax.jit(_random_uniform).lower(x).as_text().encode()
    got, _, _ = run_engine(text, [x])
    for g, w in zip(got, want(_random_uniform, x)):
        assert g.dtype == w.dtype and np.array_equal(g, w)


def test_f64_and_i16_elementwise():
    jax.config.update("jax_enable_x64", True)
    try:
        rng, seed = fresh_rng()
        x = rng.standard_normal((3, 7))
        i = rng.integers(-300, 300, (3, 7)).astype(np.int16)
        fn = lambda a, b: (jnp.sqrt(jnp.abs(a)) * a + 1e-12, (b * 3) >> 2, a.astype(jnp.float32))  # noqa: E731
        check(fn, x, i, rtol=1e-15, atol=0)
    finally:
        jax.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("dt", [jnp.float8_e4m3fn, jnp.float8_e5m2])
def test_float8_convert_round_trips_like_jax(dt):
    rng, seed = fresh_rng()
    x = (rng.standard_normal((4, 33)) * 30).astype(np.float32)
    fn = lambda a: (a.astype(dt), a.astype(dt).astype(jnp.float32) * 2)  # noqa: E731
    text = jax.jit(fn).lower(x).as_text().encode()
    got = interpret(import_stablehlo(text), [x])
    for g, w in zip(got, want(fn, x)):
        assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8)), f"seed {seed}"
    eng, _, _ = run_engine(text, [x])
    assert np.array_equal(eng[0].view(np.uint8), got[0].view(np.uint8)) and np.array_equal(eng[1], got[1])


def test_partition_and_replica_id_are_zero_on_one_device():
    text = b"""
func.func @main(%x: tensor<2xui32>) -> tensor<2xui32> {
  %p = stablehlo.partition_id : tensor<ui32>
  %r = stablehlo.replica_id : tensor<ui32>
  %s = stablehlo.add %p, %r : tensor<ui32>
  %b = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<ui32>) -> tensor<2xui32>
  %y = stablehlo.add %x, %b : tensor<2xui32>
  return %y : tensor<2xui32>
}"""
    x = np.array([5, 2**32 - 1], np.uint32)
    assert np.array_equal(interpret(import_stablehlo(text), [x])[0], x)
