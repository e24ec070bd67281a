"""StableHLO reductions, pooling, dot_general and convolution converters against jax on the CPU."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from aotc.errors import UnsupportedError  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check, forms, run_engine  # noqa: E402

CONVS = {
    # name: (input shape, kernel shape, kwargs of lax.conv_general_dilated)
    "nchw_oihw": ((2, 3, 9, 8), (4, 3, 3, 3), dict(window_strides=(1, 1), padding="SAME")),
    "nhwc_hwio_stride": ((2, 9, 8, 3), (3, 2, 3, 5), dict(window_strides=(2, 1), padding=((1, 0), (2, 1)),
                                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    "dilated_grouped": ((1, 4, 11, 10), (6, 2, 3, 3), dict(window_strides=(1, 2), padding="VALID",
                                                          rhs_dilation=(2, 1), feature_group_count=2)),
    "depthwise": ((2, 7, 7, 6), (3, 3, 1, 6), dict(window_strides=(1, 1), padding="SAME", feature_group_count=6,
                                                  dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    "transposed": ((1, 3, 5, 4), (2, 3, 3, 3), dict(window_strides=(1, 1), padding=((2, 2), (1, 2)),
                                                   lhs_dilation=(2, 2))),
    "negative_pad": ((1, 2, 8, 8), (3, 2, 2, 2), dict(window_strides=(1, 1), padding=((-1, 0), (0, -2)))),
    "conv1d_nwc": ((2, 12, 3), (3, 3, 4), dict(window_strides=(2,), padding="SAME",
                                              dimension_numbers=("NWC", "WIO", "NWC"))),
    "conv3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(window_strides=(1, 1, 1), padding="VALID")),
    "out_layout": ((2, 3, 6, 6), (3, 3, 4, 3), dict(window_strides=(1, 1), padding="SAME",
                                                   dimension_numbers=("NCHW", "HWOI", "NHWC"))),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_convolution(name):
    rng, seed = fresh_rng()
    xs, ws, kw = CONVS[name]
    x, w = random_array(rng, xs), random_array(rng, ws)
    check(lambda x, w: lax.conv_general_dilated(x, w, **kw), x, w, rtol=1e-4, atol=1e-5)


def test_conv_transpose_with_reversed_kernel():
    rng, _ = fresh_rng()
    x, w = random_array(rng, (1, 6, 5, 3)), random_array(rng, (3, 3, 4, 3))
    f = lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),  # noqa
                                        transpose_kernel=True)
    check(f, x, w, rtol=1e-4, atol=1e-5)


DOTS = {
    "matvec": (lambda a, b: a @ b[:, 0], (4, 6), (6, 3)),
    "batched": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (3, 4, 5), (3, 5, 2)),
    "two_contract": (lambda a, b: jnp.einsum("ijk,jkl->il", a, b), (2, 3, 4), (3, 4, 5)),
    "batch_not_leading": (lambda a, b: jnp.einsum("ibj,jbk->bik", a, b), (4, 3, 5), (5, 3, 2)),
    "outer": (lambda a, b: jnp.einsum("i,j->ij", a[:, 0], b[0]), (4, 2), (2, 3)),
    "tensordot": (lambda a, b: jnp.tensordot(a, b, axes=([0], [1])), (4, 3), (5, 4)),
}


@pytest.mark.parametrize("name", sorted(DOTS))
def test_dot_general(name):
    rng, _ = fresh_rng()
    fn, sa, sb = DOTS[name]
    check(fn, random_array(rng, sa), random_array(rng, sb), rtol=1e-5, atol=1e-5)


def test_dot_preferred_element_type():
    rng, _ = fresh_rng()
    a = random_array(rng, (4, 8)).astype(jnp.bfloat16)
    b = random_array(rng, (8, 3)).astype(jnp.bfloat16)
    check(lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32), a, b, rtol=1e-5, atol=1e-5)


def test_reductions_with_init_and_multiple_inputs():
    rng, _ = fresh_rng()
    x = random_array(rng, (3, 4, 5))

    def f(x):
        s2 = lax.reduce((x, x * 2), (0.0, 1.0), lambda a, b: (a[0] + b[0], a[1] + b[1]), (1,))
        return (s2[0], s2[1], lax.reduce(x, -0.25, lax.max, (0, 2)), lax.reduce(x, 2.0, lax.mul, (2,)),
                jnp.argmax(x, axis=1), jnp.argmin(x.reshape(12, 5), axis=0), jnp.sum(x > 0, axis=2))
    check(f, x, rtol=1e-5, atol=1e-5)


def test_pooling_windows():
    rng, _ = fresh_rng()
    x = random_array(rng, (2, 3, 9, 8))

    def f(x):
        win, st = (1, 1, 3, 3), (1, 1, 2, 2)
        mx = lax.reduce_window(x, -jnp.inf, lax.max, win, st, "SAME")
        mn = lax.reduce_window(x, jnp.inf, lax.min, win, st, ((0, 0), (0, 0), (1, 1), (0, 1)))
        sm = lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 3), (1, 1, 1, 2), "VALID", window_dilation=(1, 1, 2, 1))
        return mx, mn, sm, lax.reduce_window(x, 0.0, lax.max, win, st, "VALID")   # relu-pool init
    check(f, x)


def test_window_products_with_zeros_and_negatives():
    """jnp.cumprod and a strided product window: exp(sum log|x|), signs and zeros counted apart."""
    rng, _ = fresh_rng()
    x = random_array(rng, (4, 9))
    x[1, 3] = 0.0
    x[2, ::2] = -np.abs(x[2, ::2])

    def f(x):
        return jnp.cumprod(x, axis=1), lax.reduce_window(x, 1.0, lax.mul, (2, 3), (1, 2), "SAME")
    check(f, x, rtol=2e-5, atol=1e-6)


def test_unsupported_reducers_are_reported():
    x = np.ones((3, 4), np.float32)
    f = lambda x: lax.reduce(x, 0.0, lambda a, b: a * 2 + b, (1,))  # noqa: E731
    with pytest.raises(UnsupportedError, match="stablehlo.reduce .*reduce body"):
        import_stablehlo(forms(f, x)["text"])
    g = lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 1), "VALID", base_dilation=(2, 1))  # noqa: E731
    with pytest.raises(UnsupportedError, match="base dilations"):
        import_stablehlo(forms(g, x)["text"])


def test_conv_and_pool_engine(tmp_path):
    rng, seed = fresh_rng()
    x, w = random_array(rng, (2, 7, 6, 4)), random_array(rng, (3, 3, 2, 6))

    def f(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=2, rhs_dilation=(2, 1))
        y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        return jnp.argmax(y, axis=-1), y.sum(axis=(1, 2))
    path = tmp_path / "c.mlir"
    path.write_bytes(forms(f, x, w)["text"])
    outs, _, _ = run_engine(path, [x, w])
    ref = jax.jit(f)(x, w)
    np.testing.assert_array_equal(outs[0], np.asarray(ref[0]), err_msg=f"seed {seed}")
    np.testing.assert_allclose(outs[1], np.asarray(ref[1]), rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}")
