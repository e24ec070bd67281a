"""StableHLO while (unrolled), case and if (if-converted) against jax on the CPU."""
from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from aotc.errors import UnsupportedError  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import check, close, forms, run_engine, want  # noqa: E402

PROGRAMS = {   # x (3,) f32, xs (4, 3) f32
    "fori_loop": lambda x, xs: lax.fori_loop(0, 5, lambda i, c: c * 0.5 + i * xs[i % 4], x),
    "scan": lambda x, xs: lax.scan(lambda c, a: (jnp.tanh(c + a), c.sum()), x, xs),
    "reverse_scan": lambda x, xs: lax.scan(lambda c, a: (c * a, c), x, xs, reverse=True),
    "nested_loops": lambda x, xs: lax.fori_loop(
        0, 3, lambda i, c: lax.scan(lambda cc, a: (jnp.sin(cc * a) + i, None), c, xs)[0], x),
    "cond_traced": lambda x, xs: lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: jnp.exp(v), x + xs[0]),
    "switch_traced_out_of_range": lambda x, xs: lax.switch(
        (xs[0, 0] > 0).astype(jnp.int32) * 7 - 2, [lambda v: v, lambda v: v * 3, lambda v: jnp.cos(v)], x),
    "cond_in_loop": lambda x, xs: lax.fori_loop(
        0, 4, lambda i, c: lax.cond(i % 2 == 0, lambda v: v + xs[i], lambda v: v * xs[i], c), x),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_control_flow(name):
    rng, _ = fresh_rng()
    x, xs = random_array(rng, (3,)), random_array(rng, (4, 3))
    text = jax.jit(PROGRAMS[name]).lower(x, xs).as_text()
    assert "stablehlo.while" in text or "stablehlo.case" in text
    check(PROGRAMS[name], x, xs, rtol=1e-5, atol=1e-5)


def test_static_condition_inlines_one_branch():
    text = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %p = stablehlo.constant dense<false> : tensor<i1>
  %0 = "stablehlo.if"(%p) ({
    %a = stablehlo.exponential %x : tensor<3xf32>
    stablehlo.return %a : tensor<3xf32>
  }, {
    %b = stablehlo.negate %x : tensor<3xf32>
    stablehlo.return %b : tensor<3xf32>
  }) : (tensor<i1>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"""
    g = import_stablehlo(text)
    ops = [n.op for n in g.nodes]
    assert "neg" in ops and "exp" not in ops


def test_data_dependent_loop_and_unsupported_body_ops_are_reported():
    rng, _ = fresh_rng()
    x = random_array(rng, (3,))
    f = lambda x: lax.while_loop(lambda c: c.sum() < 100, lambda c: c * 2 + 1, x)  # noqa: E731
    with pytest.raises(UnsupportedError, match="stablehlo.while .*loop condition depends on input values"):
        import_stablehlo(forms(f, x)["text"])
    g = lambda x: lax.fori_loop(0, 3, lambda i, c: c.at[i].apply(jnp.cos), x)  # noqa: E731
    with pytest.raises(UnsupportedError, match=r"^1 unsupported item.*stablehlo.scatter \(.*stablehlo.cosine"):
        import_stablehlo(forms(g, x)["text"])   # found inside the loop body by the pre-scan


def test_scan_rnn_engine():
    """A scanned RNN cell with a data-dependent cond, compiled and run on the cpu device."""
    rng, seed = fresh_rng()
    w, xs, h = random_array(rng, (4, 4)) * 0.5, random_array(rng, (6, 4)), random_array(rng, (4,))

    def rnn(w, xs, h):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return lax.cond(h.sum() > 0, lambda v: v, lambda v: -v, h), h.max()
        return lax.scan(cell, h, xs)
    outs, _, _ = run_engine(forms(rnn, w, xs, h)["export"], [w, xs, h])
    for k, (got, ref) in enumerate(zip(outs, want(rnn, w, xs, h), strict=True)):
        close(got, ref, 1e-5, 1e-5, f"output {k}, seed {seed}")
