"""Constant causal masks computed from the index (kernels/band_constants.py), never loaded.

band_of on hand-made arrays (offsets, bool, f16 -inf, what is no band); kernels whose
mask became a comparison (tensor-core attention, a loop kernel) against the interpreter
on fresh random inputs, with the mask gone from their parameters; a GEMM operand that
is a band stays a parameter.
"""
import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels.band_constants import Band, band_of
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng
from tests.kernels.test_attention_mma import _check, _inputs, mma_attention_graph


def causal(rows, cols, k=0, inside=0.0, outside=-np.inf, dtype=np.float32):
    return np.where(np.tril(np.ones((rows, cols)), k) > 0, inside, outside).astype(dtype)


def test_band_of_reads_the_diagonal_and_the_two_values():
    assert band_of(causal(6, 6)[None, None]) == Band(0, 0.0, -np.inf)
    assert band_of(causal(3, 8, k=5, outside=-1e9)) == Band(5, 0.0, np.float32(-1e9).item())
    assert band_of(causal(5, 5, k=-2, inside=1.0, outside=0.0)) == Band(-2, 1.0, 0.0)
    assert band_of(np.tril(np.ones((4, 7), bool), 2)) == Band(2, True, False)
    assert band_of(causal(4, 4, dtype=np.float16)) == Band(0, 0.0, -np.inf)
    assert band_of(np.stack([causal(4, 4)] * 3)) == Band(0, 0.0, -np.inf)         # repeated over a lead dim
    assert band_of(np.triu(np.ones((4, 4), np.float32))) == Band(-1, 0.0, 1.0)    # zeros below: j - i <= -1


def test_what_is_no_band():
    """(And a splat, which is one: the emitter writes its literal.)"""
    assert band_of(np.zeros((2, 4, 4), np.float32)) == Band(4, 0.0, 0.0)        # one value: a literal
    third = causal(4, 4)
    third[3, 0] = 5.0
    assert band_of(third) is None
    padding = np.zeros((4, 6), np.float32)
    padding[:, 4:] = -np.inf                                                    # a column boundary, no diagonal
    assert band_of(padding) is None
    assert band_of(np.stack([causal(4, 4), causal(4, 4, k=1)])) is None       # leading dims differ
    signed = causal(4, 4, outside=0.0)
    signed[np.triu_indices(4, 1)] = -0.0                                        # +0.0 inside, -0.0 outside
    assert band_of(signed) == Band(0, 0.0, -0.0)
    mixed = signed.copy()
    mixed[0, 3] = 0.0                                                           # bitwise a third pattern
    assert band_of(mixed) is None
    assert band_of(np.arange(4, dtype=np.float32)) is None


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_causal_attention_computes_its_mask(dt):
    rng, seed = fresh_rng()
    b, h, sq, sk, dh, dv = 1, 2, 70, 70, 64, 64
    graph = mma_attention_graph(b, h, sq, sk, dh, dv, dt, "causal")
    ins = _inputs(rng, b, h, sq, sk, dh, dv, dt, "causal")
    (got,), kernels, _ = run_on_host(graph, ins)
    (kernel,) = kernels
    assert kernel.name.startswith("aotc_attention_mma_")
    assert len(kernel.params) == 4 and " <= 0) ? " in kernel.source          # q, k, v, out: no mask param
    _check(got, interpret(graph, ins)[0], ins, dt, seed)


def test_offset_band_in_a_loop_kernel():
    """A decode-style mask (queries at the end of the keys: j <= i + 7) added in a loop kernel."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (3, 5, 12))
    m = b.constant(causal(5, 12, k=7, outside=-1e4))
    y = b.add("add", x, b.add("broadcast_in_dim", m, shape=(3, 5, 12), broadcast_dimensions=(1, 2)))
    graph = b.build([b.add("exp", y)])
    xs = [rng.standard_normal((3, 5, 12)).astype(np.float32)]
    (got,), kernels, _ = run_on_host(graph, xs)
    assert len(kernels[0].params) == 2 and " <= 7) ? " in kernels[0].source
    np.testing.assert_allclose(got, interpret(graph, xs)[0], rtol=1e-6, err_msg=f"seed {seed}")


def test_a_gemm_operand_band_stays_a_parameter():
    """GEMMs address their operands by pointer (cp.async, views): a band there is loaded as any constant."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (8, 16))
    w = b.constant(causal(16, 16, inside=1.0, outside=0.0))
    graph = b.build([b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))])
    xs = [rng.standard_normal((8, 16)).astype(np.float32)]
    (got,), kernels, _ = run_on_host(graph, xs)
    assert any(p is graph.nodes[0].inputs[1] for p in kernels[0].params)
    np.testing.assert_allclose(got, interpret(graph, xs)[0], rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")
