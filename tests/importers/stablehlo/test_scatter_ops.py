"""StableHLO scatter / select_and_scatter converters against jax on the CPU (and one engine on the cpu device)."""
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

_ROWS = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                    scatter_dims_to_operand_dims=(0,))

# x (6, 5) f32, i (5,) i32 with duplicates and out-of-range values, v (5, 5) f32
SCATTERS = {
    "set": lambda x, i, v: x.at[i].set(v),
    "add": lambda x, i, v: x.at[i].add(v),
    "mul": lambda x, i, v: x.at[i].mul(v),
    "min": lambda x, i, v: x.at[i].min(v),
    "max": lambda x, i, v: x.at[i].max(v),
    "scalar_index": lambda x, i, v: x.at[2].add(v[0]) + i[0],
    "scalar_index_traced": lambda x, i, v: x.at[i[0] % 6].set(v[1]),
    "column_set": lambda x, i, v: x.at[:, 2].set(v[:, 0].sum() * i[:1].astype(jnp.float32)),
    "row_add_traced": lambda x, i, v: x.at[i[1] % 6, :].add(v[0]),
    "element_pairs_set": lambda x, i, v: x.at[i, (i + 1) % 5].set(v[:, 0]),
    "element_column_add": lambda x, i, v: x.at[i, 2].add(v[:, 0]),
    "partial_window": lambda x, i, v: x.at[i[0] % 6, 1:3].mul(v[0, :2]),
    "clip_mode": lambda x, i, v: x.at[i].set(v, mode="clip"),
    "drop_mode_add": lambda x, i, v: x.at[i].add(v, mode="drop"),
    "promise_in_bounds": lambda x, i, v: x.at[i % 6].max(v, mode="promise_in_bounds"),
    "sorted_unique_flags": lambda x, i, v: lax.scatter_add(
        x, jnp.arange(0, 5, 2, dtype=jnp.int32)[:, None], jnp.concatenate([v[:3], v[:3, :1]], 1) * i[0],
        lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(1,),
                                    scatter_dims_to_operand_dims=(1,)),
        indices_are_sorted=True, unique_indices=True),
    "window_drops_when_partly_out": lambda x, i, v: lax.scatter_add(   # a 2-row window at 5 is dropped
        x, jnp.array([[4], [5], [-1], [2]], jnp.int32) + i[:1, None] * 0, jnp.stack([v[:2]] * 4),
        _ROWS, mode=lax.GatherScatterMode.FILL_OR_DROP),
    "vmapped_batching_dims": lambda x, i, v: jax.vmap(lambda r, j, u: r.at[j].add(u))(x[:5], i % 5, v[:, 0]),
    "3d_columns": lambda x, i, v: x.reshape(2, 3, 5).at[:, i[:2] % 3, 1:4].add(v[:2, :3]),
}


@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_scatter(name):
    rng, seed = fresh_rng()
    x, v = random_array(rng, (6, 5)), random_array(rng, (5, 5))
    i = np.array([1, 3, 1, -2, 9], np.int32)
    i[:] = rng.permutation(i)
    assert '"stablehlo.scatter"' in jax.jit(SCATTERS[name]).lower(x, i, v).as_text()
    check(SCATTERS[name], x, i, v)


def test_set_with_duplicates_takes_the_last_update():
    """StableHLO leaves the winner implementation-defined; aotc takes the last, as XLA on the CPU does."""
    rng, seed = fresh_rng()
    x, v = random_array(rng, (4, 3)), random_array(rng, (5, 3))
    i = np.array([2, 0, 2, 2, 0], np.int32)
    g = import_stablehlo(forms(lambda x, i, v: x.at[i].set(v), x, i, v)["text"])
    got = interpret(g, [x, i, v])[0]
    ref = x.copy()
    ref[2], ref[0] = v[3], v[4]
    np.testing.assert_array_equal(got, ref, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(got, want(lambda x, i, v: x.at[i].set(v), x, i, v)[0])


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.bool_])
def test_scatter_integer_and_bool(dtype):
    rng, _ = fresh_rng()
    x, v = random_array(rng, (5, 4), dtype), random_array(rng, (6, 4), dtype)
    i = rng.integers(0, 5, (6,)).astype(np.int32)

    def f(x, i, v):
        if dtype == np.bool_:
            return x.at[i].set(v), x.at[i].max(v), x.at[i].min(v)
        return x.at[i].add(v), x.at[i].max(v), x.at[i].min(v), x.at[i].set(v)
    check(f, x, i, v)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_scatter_and_pool_gradient(dtype):
    import ml_dtypes
    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng, _ = fresh_rng()
    x, v, img = random_array(rng, (6, 4)).astype(dt), random_array(rng, (8, 4)).astype(dt), \
        random_array(rng, (1, 6, 6, 2)).astype(dt)
    i = rng.integers(0, 6, (8,)).astype(np.int32)
    check(lambda x, i, v: (x.at[i].add(v), x.at[i].max(v), x.at[i].set(v)), x, i, v, rtol=2e-2, atol=2e-2)
    pool = lambda img: lax.reduce_window(img, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # noqa: E731
    check(jax.grad(lambda img: jnp.sum(pool(img).astype(jnp.float32))), img, rtol=2e-2, atol=2e-2)


def test_embedding_gradient_scatter_add():
    rng, _ = fresh_rng()
    table, w = random_array(rng, (7, 4)), random_array(rng, (3, 5, 4))
    ids = rng.integers(0, 7, (3, 5)).astype(np.int32)            # 15 ids over 7 rows: duplicates
    loss = lambda table, ids, w: jnp.sum(jnp.tanh(table[ids]) * w)  # noqa: E731
    g = check(jax.grad(loss), table, ids, w, rtol=1e-5, atol=1e-5)
    assert any(n.op == "reduce" for n in g.nodes)


# ----------------------------------------------------------------- select_and_scatter

POOLS = {   # (window, strides, padding) of a max pool over NHWC / NCHW
    "3x3_s2_same": ((1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
    "2x2_s2_valid": ((1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
    "3x3_s1_overlapping": ((1, 3, 3, 1), (1, 1, 1, 1), "VALID"),
    "nchw_asymmetric_pad": ((1, 1, 3, 2), (1, 1, 2, 1), ((0, 0), (0, 0), (1, 1), (0, 1))),
}


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name", sorted(POOLS))
def test_max_pool_gradient(name, ties):
    rng, _ = fresh_rng()
    win, st, padding = POOLS[name]
    x = random_array(rng, (2, 7, 6, 3))
    if ties:   # many equal maxima: the first one in row-major window order gets the gradient
        x = np.round(x).astype(np.float32)

    def loss(x):
        y = lax.reduce_window(x, -jnp.inf, lax.max, win, st, padding)
        return jnp.sum(y * jnp.arange(y.size, dtype=jnp.float32).reshape(y.shape))
    assert "stablehlo.select_and_scatter" in jax.jit(jax.grad(loss)).lower(x).as_text()
    check(jax.grad(loss), x)


def test_min_pool_gradient():
    rng, _ = fresh_rng()
    x = np.round(random_array(rng, (5, 6))).astype(np.float32)
    check(jax.grad(lambda x: jnp.sum(lax.reduce_window(x, jnp.inf, lax.min, (2, 2), (1, 2), "VALID") ** 2)), x)


_PADDED = """
func.func @main(%src: tensor<3x3xf32>, %x: tensor<5x6xf32>) -> tensor<5x6xf32> {
  %init = stablehlo.constant dense<0.5> : tensor<f32>
  %0 = "stablehlo.select_and_scatter"(%x, %src, %init) <{padding = dense<[[1, 0], [1, 1]]> : tensor<2x2xi64>,
      window_dimensions = array<i64: 2, 3>, window_strides = array<i64: 2, 2>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<5x6xf32>, tensor<3x3xf32>, tensor<f32>) -> tensor<5x6xf32>
  return %0 : tensor<5x6xf32>
}
"""


def test_select_and_scatter_padding_attribute_and_init():
    """Padding positions never get selected; compared with jax padding the operand with -inf itself."""
    from jax._src.lax.windowed_reductions import _select_and_scatter_add
    rng, seed = fresh_rng()
    src, x = random_array(rng, (3, 3)), random_array(rng, (5, 6))
    got = interpret(import_stablehlo(_PADDED), [src, x])[0]
    ref = jax.jit(lambda s, x: _select_and_scatter_add(s, x, lax.ge_p, (2, 3), (2, 2), ((1, 0), (1, 1))))(src, x)
    close(got, np.asarray(ref) + np.float32(0.5), 1e-6, 1e-6, f"seed {seed}")


# ----------------------------------------------------------------- errors and the engine

def test_unsupported_bodies_are_reported_together():
    rng, _ = fresh_rng()
    x, i = random_array(rng, (4, 6)), np.array([1, 2, 1], np.int32)
    f = lambda x, i: jax.lax.reduce_precision(x.at[i].apply(jnp.sin), 5, 2)  # noqa: E731
    with pytest.raises(UnsupportedError) as e:
        import_stablehlo(forms(f, x, i)["text"])
    msg = str(e.value)
    assert msg.startswith("2 unsupported item(s)"), msg
    assert "stablehlo.scatter (" in msg and "stablehlo.sine" in msg and "stablehlo.reduce_precision (" in msg
    assert "test_scatter_ops.py" in msg      # each with its location


def test_training_step_engine():
    """Embedding-gradient scatter-add and a max-pool gradient compiled and run on the cpu device."""
    rng, seed = fresh_rng()
    table, img = random_array(rng, (9, 4)), random_array(rng, (1, 6, 6, 2))
    ids = rng.integers(0, 9, (2, 6)).astype(np.int32)

    def grads(table, img, ids):
        def loss(table, img):
            pooled = lax.reduce_window(img, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
            return jnp.sum(table[ids] ** 2) + jnp.sum(pooled * jnp.sum(table))
        return jax.grad(loss, argnums=(0, 1))(table, img)
    outs, engine, _ = run_engine(forms(grads, table, img, ids)["export"], [table, img, ids])
    for k, (got, ref) in enumerate(zip(outs, want(grads, table, img, ids), strict=True)):
        close(got, ref, 1e-5, 1e-5, f"output {k}, seed {seed}")
