"""StableHLO gather / dynamic_slice / dynamic_update_slice converters against jax on the CPU."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check, forms, run_engine  # noqa: E402

GATHERS = {
    "embedding": lambda x, i: x[i],
    "embedding_2d_ids": lambda x, i: x[i.reshape(2, 2)],
    "columns": lambda x, i: x[:, i],
    "last_axis_3d": lambda x, i: x.reshape(2, 3, 6)[..., i],
    "two_arrays": lambda x, i: x[i, i[::-1]],
    "array_and_slice": lambda x, i: x[i[:2], 1:4],
    "scalar_index": lambda x, i: x[i[0]],
    "take_along": lambda x, i: jnp.take_along_axis(x[:4], jnp.abs(i[:, None]) % 6 * jnp.ones((1, 3), jnp.int32), 1),
    "vmapped": lambda x, i: jax.vmap(lambda r, j: r[j])(x[:4], i),
    "clip_mode": lambda x, i: jnp.take(x, i * 3, axis=0, mode="clip"),
    "out_of_range_clamps": lambda x, i: lax.gather(
        x, (i[:, None] * 5), lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                                        start_index_map=(0,)), (1, 6),
        mode=lax.GatherScatterMode.CLIP),
}


@pytest.mark.parametrize("name", sorted(GATHERS))
def test_gather(name):
    rng, _ = fresh_rng()
    x = random_array(rng, (6, 6))
    idx = rng.integers(-6, 6, (4,)).astype(np.int32)
    check(GATHERS[name], x, idx)


def test_dynamic_slice_and_update():
    rng, _ = fresh_rng()
    x, u = random_array(rng, (5, 6)), random_array(rng, (2, 3))
    i = np.int32(rng.integers(0, 6))

    def f(x, u, i):
        return (lax.dynamic_slice(x, (1, 2), (3, 3)), lax.dynamic_slice(x, (i, i - 1), (2, 4)),
                lax.dynamic_update_slice(x, u, (3, 9)), lax.dynamic_update_slice(x, u, (i, 1)),
                lax.dynamic_slice_in_dim(x, i, 2, axis=1))
    check(f, x, u, i)


def test_embedding_engine(tmp_path):
    rng, seed = fresh_rng()
    table, ids = random_array(rng, (50, 8)), rng.integers(0, 50, (3, 5)).astype(np.int32)
    pos = random_array(rng, (5, 8))

    def f(table, pos, ids):
        h = table[ids] + pos
        return jax.nn.softmax(h @ table.T, axis=-1)[:, :, jnp.array([0, 7, 3])]
    path = tmp_path / "e.jaxexport"
    path.write_bytes(forms(f, table, pos, ids)["export"])
    outs, engine, _ = run_engine(path, [table, pos, ids])
    assert [s.name for s in engine.inputs] == ["table", "pos", "ids"]
    np.testing.assert_allclose(outs[0], np.asarray(jax.jit(f)(table, pos, ids)), rtol=1e-4, atol=1e-6,
                               err_msg=f"seed {seed}")
