"""Gated epilogues (SwiGLU over one GEMM's two column halves) on the host emulation, every GEMM template."""
import numpy as np
import pytest

from aotc.fusion.region import GatedPayload
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
    (4, 1024, 40, "f32", True, None, False, 4),     # split-K (partials within 10%), interleaved columns
])
def test_gated_epilogue(m, k, f, dtype, bias, precision, norm, splits):
    rng, seed = fresh_rng()
    graph, shapes = gated_mlp(m, k, f, dtype, bias, precision, norm)
    np_dt = np.float16 if dtype == "f16" else np.float32
    ins = [random_array(rng, s).astype(np_dt) for s in shapes]
    ins[0] = ins[0] / np.sqrt(k).astype(np_dt)
    tol = 3e-2 if dtype == "f16" else (3e-3 if precision else 1e-4)
    (kern,) = check(graph, ins, seed, rtol=tol, atol=tol, kinds=["dot"])
    assert kern.region.payload.width == f and kern.splits == splits
    assert kern.grid[0] == -(-f // 32)                 # 32 output columns (64 kernel columns) a block



def lstm_cell(m, k, f, dtype="f32", precision=None):
    """One LSTM step as the ONNX importer unrolls it: gates = xw + h @ R (i, o, f, c blocks of F),
    c_t = f * c + i * g, h_t = o * tanh(c_t); c_t is read again (the next step) beside h_t."""
    b = GraphBuilder()
    h, r = b.input("h", (m, k), dtype), b.input("r", (k, 4 * f), dtype)
    xw, c = b.input("xw", (m, 4 * f), dtype), b.input("c", (m, f), dtype)
    d = b.add("dot_general", h, r, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,),
              **({"precision": precision} if precision else {}))

    def gate(g):
        block = dict(start=(0, g * f), limit=(m, (g + 1) * f), stride=(1, 1))
        return b.add("add", b.add("slice", d, **block), b.add("slice", xw, **block))
    i, o, fg, cand = (gate(g) for g in range(4))
    c_t = b.add("add", b.add("mul", b.add("logistic", fg), c),
                b.add("mul", b.add("logistic", i), b.add("tanh", cand)))
    h_t = b.add("mul", b.add("logistic", o), b.add("tanh", c_t))
    nxt = b.add("mul", c_t, c_t)          # c_t used outside the cell: an extra root
    return b.build([h_t, nxt]), [(m, k), (k, 4 * f), (m, 4 * f), (m, f)]


def _run_cell(built, k, dtype, precision, kinds):
    """Fresh inputs (h scaled by 1/sqrt(K)), the host run vs the interpreter; the kernels."""
    graph, shapes = built
    rng, seed = fresh_rng()
    np_dt = np.float16 if dtype == "f16" else np.float32
    ins = [random_array(rng, s).astype(np_dt) for s in shapes]
    ins[0] = ins[0] / np.sqrt(k).astype(np_dt)
    tol = 3e-2 if dtype == "f16" else (3e-3 if precision else 1e-4)
    return check(graph, ins, seed, rtol=tol, atol=tol, kinds=kinds)


@pytest.mark.parametrize("m,k,f,dtype,precision,splits", [
    (3, 20, 50, "f32", None, 1),          # F not a multiple of the 16-column gate tile
    (1, 64, 64, "f32", None, 1),          # the batch-1 LSTM step
    (5, 40, 17, "f16", None, 1),          # mma layout
    (9, 24, 30, "f32", "tf32", 1),
    (2, 2048, 16, "f32", None, 16),       # split-K: partials in the interleaved column order
])
def test_lstm_cell_in_the_gemm_epilogue(m, k, f, dtype, precision, splits):
    """The four gate blocks of the recurrent GEMM meet in one thread; the kernel writes h_t and c_t."""
    kernels = _run_cell(lstm_cell(m, k, f, dtype, precision), k, dtype, precision, ["dot", "loop"])
    cell = next(kern for kern in kernels if kern.region.kind == "dot")
    assert cell.region.payload == GatedPayload(f, 4) and cell.splits == splits
    assert [v.shape for v in cell.region.extra_roots] == [(m, f)]
    assert cell.grid[0] == -(-f // 16)                 # 16 output columns (64 kernel columns) a block


def test_lstm_cell_kernels_compile_for_the_gpu():
    """The 4-gate epilogue through NVRTC on every GEMM template (SIMT, f16 mma, tf32)."""
    from aotc.fusion.regions import partition
    from aotc.kernels import codegen
    from aotc.kernels.nvrtc_compile import compile_device
    kernels = []
    for dtype, precision in (("f32", None), ("f16", None), ("f32", "tf32")):
        graph, _ = lstm_cell(3, 32, 40, dtype, precision)
        kernels += [codegen.generate(graph, r) for r in partition(graph) if r.payload_as(GatedPayload)]
    assert sorted(k.name.rsplit("_", 1)[0] for k in kernels) == ["aotc_dot", "aotc_dot_mma", "aotc_dot_tf32"]
    assert compile_device(codegen.module_source(kernels), "sm_80")[:4] == b"\x7fELF"


def gru_step(m, f, dtype="f32"):
    """One GRU step (linear_before_reset=0) as the importer unrolls it: D = h @ [Rz | Rr];
    r * h feeds the second GEMM, whose epilogue reads the update block z."""
    b = GraphBuilder()
    h, r1 = b.input("h", (m, f), dtype), b.input("r1", (f, 2 * f), dtype)
    r2, xw = b.input("r2", (f, f), dtype), b.input("xw", (m, 3 * f), dtype)
    d = b.add("dot_general", h, r1, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))

    def block(v, g):
        return b.add("slice", v, start=(0, g * f), limit=(m, (g + 1) * f), stride=(1, 1))
    z = b.add("logistic", b.add("add", block(d, 0), block(xw, 0)))
    r = b.add("logistic", b.add("add", block(d, 1), block(xw, 1)))
    rh = b.add("mul", r, h)
    d2 = b.add("dot_general", rh, r2, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    cand = b.add("tanh", b.add("add", d2, block(xw, 2)))
    one = b.add("broadcast_in_dim", b.constant(np.ones((), np.float32 if dtype == "f32" else np.float16)),
                shape=(m, f), broadcast_dimensions=())
    h_t = b.add("add", b.add("mul", b.add("sub", one, z), cand), b.add("mul", z, h))
    return b.build([h_t]), [(m, f), (f, 2 * f), (f, f), (m, 3 * f)]


@pytest.mark.parametrize("m,f,dtype", [(3, 50, "f32"), (1, 64, "f32"), (2, 40, "f16")])
def test_gru_reset_gate_loop_runs_in_the_first_gemm(m, f, dtype):
    """Two kernels a step: the first GEMM computes r * h in its epilogue and writes the update block
    z for the second GEMM's epilogue; neither the GEMM result nor r * h's loop has a launch of its own."""
    rng, seed = fresh_rng()
    graph, shapes = gru_step(m, f, dtype)
    np_dt = np.float16 if dtype == "f16" else np.float32
    ins = [random_array(rng, s).astype(np_dt) for s in shapes]
    tol = 3e-2 if dtype == "f16" else 1e-4
    first, second = check(graph, ins, seed, rtol=tol, atol=tol, kinds=["dot", "dot"])
    assert first.region.payload == GatedPayload(f, 2)
    assert [v.shape for v in first.region.extra_roots] == [(m, f)]
    assert first.region.extra_roots[0] in second.region.inputs


def gru_step_linear_before_reset(m, k, f, dtype="f32", precision=None):
    """A GRU step as PyTorch exports it (linear_before_reset=1): one GEMM D = h @ [Rz | Rr | Rn] gives
    all three blocks; n = tanh(xn + r * (D_n + bn)), h_t = (1 - z) * n + z * h."""
    b = GraphBuilder()
    h, r = b.input("h", (m, k), dtype), b.input("r", (k, 3 * f), dtype)
    xw, hp, bn = b.input("xw", (m, 3 * f), dtype), b.input("hp", (m, f), dtype), b.input("bn", (m, f), dtype)
    d = b.add("dot_general", h, r, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,),
              **({"precision": precision} if precision else {}))

    def block(v, g):
        return b.add("slice", v, start=(0, g * f), limit=(m, (g + 1) * f), stride=(1, 1))
    z = b.add("logistic", b.add("add", block(d, 0), block(xw, 0)))
    rg = b.add("logistic", b.add("add", block(d, 1), block(xw, 1)))
    n = b.add("tanh", b.add("add", block(xw, 2), b.add("mul", rg, b.add("add", block(d, 2), bn))))
    h_t = b.add("add", b.add("sub", n, b.add("mul", z, n)), b.add("mul", z, hp))
    return b.build([h_t]), [(m, k), (k, 3 * f), (m, 3 * f), (m, f), (m, f)]


@pytest.mark.parametrize("m,k,f,dtype,precision", [
    (3, 20, 50, "f32", None), (1, 64, 64, "f32", None), (5, 40, 17, "f16", None), (2, 24, 30, "f32", "tf32")])
def test_gru_cell_with_three_blocks_in_the_gemm_epilogue(m, k, f, dtype, precision):
    """k = 3 blocks use the 4-gate layout with the last slot's weights never loaded: one kernel a step."""
    (cell,) = _run_cell(gru_step_linear_before_reset(m, k, f, dtype, precision), k, dtype, precision, ["dot"])
    assert cell.region.payload == GatedPayload(f, 3)
    assert cell.grid[0] == -(-f // 16)
