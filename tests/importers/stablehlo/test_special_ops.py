"""chlo special functions (lgamma, digamma, erf_inv, bessel_i1e, zeta, polygamma) against jax, poles included."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402

from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check  # noqa: E402


def _mix(rng, ranges, edges=()):
    parts = [random_array(rng, (n,), low=lo, high=hi) for lo, hi, n in ranges]
    return np.concatenate(parts + [np.array(edges, np.float32)]).astype(np.float32)


def test_lgamma():
    rng, _ = fresh_rng()
    x = _mix(rng, [(-20, 20, 200), (0.01, 3, 60), (1e3, 1e6, 30)], [0, -0.0, -1, -2, 1, 2, 0.5, np.inf, -np.inf])
    check(lax.lgamma, x, rtol=2e-5, atol=1e-5)


def test_digamma():
    rng, _ = fresh_rng()
    x = _mix(rng, [(-20, 20, 200), (0.01, 3, 60), (1e3, 1e6, 30)], [0, -1, -2, 1, 2, 0.5, np.inf])
    check(lax.digamma, x, rtol=2e-5, atol=1e-5)


def test_erf_inv():
    rng, _ = fresh_rng()
    x = _mix(rng, [(-1, 1, 200), (0.99, 1, 30), (-1, -0.999, 30)], [1, -1, 0])
    check(lax.erf_inv, x, rtol=2e-5, atol=1e-6)


def test_bessel_i1e_both_branches():
    rng, _ = fresh_rng()
    x = _mix(rng, [(-40, 40, 200), (-1, 1, 30), (11, 13, 30)], [0, 12, -12, 1e4, -1e4, np.inf])
    check(lax.bessel_i1e, x, rtol=2e-5, atol=1e-6)


def test_zeta():
    rng, _ = fresh_rng()
    s = _mix(rng, [(1.05, 8, 200)], [1.0, 0.5, 3.0, 2.0, 2.0, 4.0, 2.5, 5.0, 3.0, 2.0, 3.5])
    q = _mix(rng, [(0.1, 10, 200)], [1.0, 1.0, 0.0, -2.0, 0.0, -3.0, -1.0, -4.0, -1.5, -1.5, -2.5])
    check(lax.zeta, s, q, rtol=1e-4, atol=1e-6)


def test_polygamma():
    rng, _ = fresh_rng()
    n = np.concatenate([rng.integers(0, 5, 200).astype(np.float32), np.float32([1.5, -1, 0, 2, 1, 3, 0, 1])])
    x = _mix(rng, [(0.2, 8, 200)], [3.0, 3.0, -1.5, 0.0, 0.0, -2.0, -1.0, -1.5])
    check(lax.polygamma, n, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn", [lax.lgamma, lax.digamma, lax.bessel_i1e])
def test_half_precision_computes_in_f32(fn):
    rng, _ = fresh_rng()
    x = random_array(rng, (64,), low=0.3, high=9).astype(jax.numpy.bfloat16)
    check(fn, x, rtol=1e-2, atol=1e-2)


def test_special_functions_on_the_cpu_engine():
    """The decompositions compile into kernels and run on the cpu device as the interpreter says."""
    from tests.importers.stablehlo.test_importer import close, run_engine, want
    rng, _ = fresh_rng()
    x, y = random_array(rng, (4, 33), low=0.1, high=5), random_array(rng, (4, 33), low=-0.9, high=0.9)

    def f(x, y):
        return (lax.lgamma(x) + lax.digamma(x) * lax.bessel_i1e(y * 20), lax.erf_inv(y), lax.nextafter(x, y),
                lax.polygamma(lax.round(x), x))

    outs, _, _ = run_engine(jax.jit(f).lower(x, y).as_text().encode(), [x, y])
    for i, (got, ref) in enumerate(zip(outs, want(f, x, y), strict=True)):
        close(got, ref, 2e-5, 1e-5, f"output {i}")
