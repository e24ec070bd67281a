"""mma_views.py: a GEMM operand that is a region's transposes and reshapes of a parameter goes by cp.async
when its chunks are aligned runs of the parameter and its offset splits into row and k parts; the
interpreter agrees, also unaligned and where the view does not qualify."""
from __future__ import annotations

import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels.mma_views import chunks_and_split
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_mma_staging import _launch_unaligned


def heads_back(batch: int, heads: int, seq: int, dh: int, n: int, perm=(0, 2, 1, 3)):
    """(graph, shapes) of reshape(transpose(ctx)) @ w: BERT's attention output projection."""
    g = GraphBuilder()
    ctx = g.input("ctx", (batch, heads, seq, dh), "f16")
    shape = [ctx.shape[p] for p in perm]
    w = g.input("w", (shape[2] * shape[3], n), "f16")
    t = g.add("transpose", ctx, permutation=perm)
    a = g.add("reshape", t, shape=(batch, shape[1], shape[2] * shape[3]))
    d = g.add("dot_general", a, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
    return g.build([g.add("convert", d, dtype="f32")]), [(batch, heads, seq, dh), (shape[2] * shape[3], n)]


def run(graph, shapes):
    rng, seed = fresh_rng()
    ins = [random_array(rng, s).astype(np.float16) for s in shapes]
    (want,) = interpret(graph, ins)
    (got,), kernels, _ = run_on_host(graph, ins)
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2, err_msg=f"seed {seed}")
    (kernel,) = [k for k in kernels if k.name.startswith("aotc_dot_mma_")]
    return kernel


@pytest.mark.parametrize("batch,heads,seq,dh,n", [(2, 3, 40, 64, 72), (1, 12, 32, 64, 96), (3, 2, 9, 16, 24)])
def test_heads_transposed_back_stage_by_cp_async(batch, heads, seq, dh, n):
    kernel = run(*heads_back(batch, heads, seq, dh, n))
    assert "const unsigned A_s =" in kernel.source and "Vr0" in kernel.source


def test_a_view_whose_k_runs_are_short_stays_per_element():
    """Heads of 4 values: 8 consecutive k span two heads, far apart in the parameter."""
    kernel = run(*heads_back(1, 6, 24, 4, 40))
    assert "const unsigned A_s =" not in kernel.source


def test_a_view_whose_k_mixes_with_m_stays_per_element():
    """(seq, heads) swapped into k's low dims: 8 consecutive k walk the sequence, stride dh apart."""
    kernel = run(*heads_back(1, 8, 16, 8, 40, perm=(0, 3, 1, 2)))
    assert "const unsigned A_s =" not in kernel.source


def test_an_unaligned_view_takes_the_per_element_loop():
    kernel = _launch_unaligned(*heads_back(2, 3, 40, 64, 72), shift=1)
    assert "Vr0" in kernel.source and "& 15) == 0" in kernel.source


def test_the_exact_conditions():
    offs = np.arange(2 * 4 * 16).reshape(2, 4, 16)                 # plain (b, m, k)
    assert chunks_and_split(offs, [0], [1], [2])
    heads = np.arange(3 * 5 * 16).reshape(3, 5, 16).transpose(1, 0, 2).reshape(5, 48)  # (m, heads x 16)
    assert chunks_and_split(heads, [], [0], [1])
    assert not chunks_and_split(offs[:, :, 1:9], [0], [1], [2])    # runs start off a 16-byte boundary
    across = np.arange(2 * 8 * 16).reshape(2, 8, 16).transpose(0, 2, 1)   # k runs 16 apart
    assert not chunks_and_split(across, [0], [1], [2])
    mixed = np.arange(8 * 8).reshape(8, 8)
    mixed[1] = mixed[1][::-1] + 0                                 # row 1's runs reversed: not m + k
    assert not chunks_and_split(mixed, [], [0], [1])
