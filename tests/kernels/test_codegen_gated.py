"""Gated epilogues (SwiGLU over one GEMM's two column halves) on the host emulation, every GEMM template."""
import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_codegen import check


def gated_mlp(m, k, f, dtype="f32", bias=False, precision=None, norm=False):
    """y = silu(D[..., :F]) * D[..., F:], D = x @ [Wg | Wu] (+ bias): what merge-dots makes of LLaMA's MLP."""
    from tests.helpers.norms import rms_norm
    b = GraphBuilder()
    x, w = b.input("x", (2, m, k), dtype), b.input("w", (k, 2 * f), dtype)
    h = rms_norm(b, x, b.input("g", (k,), dtype)) if norm else x
    d = b.add("dot_general", h, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,),
              **({"precision": precision} if precision else {}))
    if bias:
        d = b.add("add", d, b.add("broadcast_in_dim", b.input("bias", (2 * f,), dtype), shape=d.shape,
                                  broadcast_dimensions=(2,)))
    g = b.add("slice", d, start=(0, 0, 0), limit=(2, m, f), stride=(1, 1, 1))
    u = b.add("slice", d, start=(0, 0, f), limit=(2, m, 2 * f), stride=(1, 1, 1))
    y = b.add("mul", b.add("mul", g, b.add("logistic", g)), u)
    shapes = [(2, m, k), (k, 2 * f)] + ([(k,)] if norm else []) + ([(2 * f,)] if bias else [])
    return b.build([y]), shapes


@pytest.mark.parametrize("m,k,f,dtype,bias,precision,norm,splits", [
    (5, 33, 48, "f32", True, None, False, 1),       # F not a multiple of the 32-column half tile
    (50, 70, 100, "f32", False, None, True, 1),     # RMSNorm prologue too: one kernel for LLaMA's MLP input
    (3, 40, 17, "f16", True, None, False, 1),       # mma layout
    (9, 24, 70, "f32", False, "tf32", False, 1),
    (4, 1024, 40, "f32", True, None, False, 8),     # split-K: partials in the interleaved column order
])
def test_gated_epilogue(m, k, f, dtype, bias, precision, norm, splits):
    rng, seed = fresh_rng()
    graph, shapes = gated_mlp(m, k, f, dtype, bias, precision, norm)
    np_dt = np.float16 if dtype == "f16" else np.float32
    ins = [random_array(rng, s).astype(np_dt) for s in shapes]
    ins[0] = ins[0] / np.sqrt(k).astype(np_dt)
    tol = 3e-2 if dtype == "f16" else (3e-3 if precision else 1e-4)
    (kern,) = check(graph, ins, seed, rtol=tol, atol=tol, kinds=["dot"])
    assert kern.region.gated == f and kern.splits == splits
    assert kern.grid[0] == -(-f // 32)                 # 32 output columns (64 kernel columns) a block

