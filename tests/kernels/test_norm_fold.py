"""A pre-norm GEMM's LayerNorm/RMSNorm folded into its constant weights (kernels/norm_fold.py).

The 16-bit GEMM reads raw x (cp.async), W' = diag(gamma) W, and the epilogue applies
rstd * acc - mean * rstd * c1 + c2 from the statistics pre-pass. Host build against
the interpreter on fresh random inputs with a nonzero row mean, poisoned outputs
(run_on_host), f16 and bf16, split-K, dynamic rows and gated epilogues; rows whose
mean is 100 standard deviations against an f64 reference; and the cases that keep the
prologue (f32 and tf32 among them).
"""
import ml_dtypes
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.dims import DimRange, sym
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from tests.helpers.host_run import run_on_host
from tests.helpers.norms import layer_norm, matmul, rms_norm
from tests.helpers.rng import fresh_rng

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
# bf16: the graph rounds the mean, x - mean, the normalized and the scaled x to 8-bit mantissas, the fold only
# gamma * W: their difference reached 0.69x a bound of 0.1 within 40 draws (rows of 64). A lost mean term is off
# by ~|mean| |g . w|, a few units on rows_with_offsets.
TOL = {"f32": 2e-4, "f16": 3e-2, "bf16": 1.5e-1}


def norm_gemm(rng, rows, k, n, dtype="f32", norm="layer", transposed=False, weights_const=True, **kw):
    """y = norm(x) @ W + bias with constant gamma, beta, W (stored (n, k) and transposed when `transposed`,
    as ONNX Gemm's transB); `weights_const` False makes W an input."""
    b = GraphBuilder()
    x = b.input("x", rows + (k,), dtype)
    g = b.constant(rng.uniform(0.5, 1.5, k).astype(NP[dtype]), "gamma")
    w_shape = (n, k) if transposed else (k, n)
    w_data = (rng.standard_normal(w_shape) / np.sqrt(k)).astype(NP[dtype])
    w = b.constant(w_data, "w") if weights_const else b.input("w", w_shape, dtype)
    if transposed:
        w = b.add("transpose", w, permutation=(1, 0))
    if norm == "layer":
        h = layer_norm(b, x, g, b.constant(rng.uniform(-1, 1, k).astype(NP[dtype]), "beta"))
    else:
        h = rms_norm(b, x, g)
    y = matmul(b, h, w, **kw)
    bias = b.constant(rng.standard_normal(n).astype(NP[dtype]), "bias")
    y = b.add("add", y, b.add("broadcast_in_dim", bias, shape=y.shape, broadcast_dimensions=(len(y.shape) - 1,)))
    return b.build([y]), ([] if weights_const else [w_data])


def rows_with_offsets(rng, shape, dtype, offset=3.0):
    """x whose rows have means of a few standard deviations: the mean term of the fold matters."""
    x = rng.uniform(-2, 2, shape) + offset * rng.standard_normal(shape[:-1] + (1,))
    return x.astype(NP[dtype])


def _folded(kernel) -> bool:
    """The GEMM reads no normalized A: its stats are indexed by output rows only, and W' is a derived param."""
    return bool(kernel.derived) and "am - m0" not in kernel.source and "m - m0]" in kernel.source


@pytest.mark.parametrize("rows,k,n,dtype,norm,transposed,kind", [
    ((70,), 96, 72, "f16", "layer", False, "aotc_dot_mma_"),
    ((2, 33), 80, 50, "f16", "rms", True, "aotc_dot_mma_"),
    ((67,), 64, 80, "bf16", "layer", True, "aotc_dot_mma_"),
    ((50,), 128, 40, "f16", "rms", False, "aotc_dot_mma_"),
])
def test_folded_gemm_matches_the_interpreter(rows, k, n, dtype, norm, transposed, kind):
    rng, seed = fresh_rng()
    graph, _ = norm_gemm(rng, rows, k, n, dtype, norm, transposed)
    x = rows_with_offsets(rng, rows + (k,), dtype)
    (got,), kernels, _ = run_on_host(graph, [x])
    (gemm,) = kernels
    assert gemm.name.startswith(kind) and _folded(gemm)
    names = {v.name for v in gemm.params}
    assert not names & {"gamma", "beta"} and "w" not in names                  # W' stands in for W
    assert len(gemm.derived) == (3 if norm == "layer" else 1)                  # W', and c1, c2 for LayerNorm
    x_param = gemm.params.index(graph.inputs[0])                               # A is staged by cp.async again
    assert f"aotc_cp_async_16_at(aotc_smem, A_s + st * " in gemm.source
    assert f"src = p{x_param} + " in gemm.source
    want = interpret(graph, [x])[0]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=TOL[dtype], atol=TOL[dtype],
                               err_msg=f"seed {seed}")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_folded_gemm_in_the_split_k_finishing_block(dtype):
    """Few rows and a long norm row split K: the block that adds the partials applies the correction."""
    rng, seed = fresh_rng()
    graph, _ = norm_gemm(rng, (9,), 4096, 48, dtype)
    x = rows_with_offsets(rng, (9, graph.inputs[0].shape[-1]), dtype)
    (got,), kernels, counters = run_on_host(graph, [x], runs=2)
    assert kernels[0].splits > 1 and _folded(kernels[0]) and not counters.any()
    np.testing.assert_allclose(got.astype(np.float32), interpret(graph, [x])[0].astype(np.float32),
                               rtol=TOL[dtype], atol=TOL[dtype], err_msg=f"seed {seed}")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_folded_gemm_with_dynamic_rows(dtype):
    """Rows = batch x seq, both dynamic: one build at several shapes (and the bucket variants share W')."""
    rng, seed = fresh_rng()
    graph, _ = norm_gemm(rng, (sym("batch"), sym("seq")), 64, 40, dtype)
    graph.dims = {"batch": DimRange(1, 4), "seq": DimRange(1, 80)}
    sizes = [(1, 1), (3, 37), (4, 80)]
    sets = [[rows_with_offsets(rng, (bs, ss, 64), dtype)] for bs, ss in sizes]
    results, kernels, _ = run_on_host(graph, None, shapes=sets)
    assert _folded(kernels[0])
    for ins, (got,), size in zip(sets, results, sizes):
        want = interpret(graph, ins)[0]
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=TOL[dtype],
                                   atol=TOL[dtype], err_msg=f"at {size}, seed {seed}")


def test_regenerating_a_region_reuses_its_derived_weights():
    """Bucket variants generate a region again: W', c1 and c2 are the same Values, placed once."""
    rng, _ = fresh_rng()
    graph, _ = norm_gemm(rng, (20,), 64, 40, "f16")
    (region,) = partition(graph)
    first, again = codegen.generate(graph, region), codegen.generate(graph, region)
    assert list(first.derived) == list(again.derived) and len(first.derived) == 3


@pytest.mark.parametrize("dtype,tol", [("f16", 2e-2), ("bf16", 1e-1)])
def test_rows_with_a_mean_of_a_hundred_deviations(dtype, tol):
    """|mean| / std = 100: x @ W' and mean * c1 nearly cancel. c1 sums the rounded W', so W''s rounding
    cancels too, and the f32 accumulator keeps the rest; against LayerNorm in f64 of the same x, gamma,
    beta and W (the interpreter's 16-bit LayerNorm is no reference here: its x - mean rounds to 2^-11 x 100
    std). Summing the unrounded W' instead fails at f16 (0.047)."""
    rng, seed = fresh_rng()
    rows, k, n = 33, 256, 48
    graph, _ = norm_gemm(rng, (rows,), k, n, dtype)
    x = (rng.standard_normal((rows, k)) + 100.0 * np.sign(rng.standard_normal((rows, 1)))).astype(NP[dtype])
    (got,), kernels, _ = run_on_host(graph, [x])
    assert _folded(kernels[0])
    c = {v.name: np.asarray(a, np.float64) for v, a in graph.constants.items()}
    x64 = x.astype(np.float64)
    h = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * c["gamma"] + c["beta"]
    want = h @ c["w"] + c["bias"]
    err = np.abs(got.astype(np.float64) - want) / (1 + np.abs(want))
    assert err.max() < tol, f"seed {seed}: {err.max()}"


def _prologue_kept(graph):
    (region,) = [r for r in partition(graph) if r.kind == "dot"]
    k = codegen.generate(graph, region)
    return not k.derived and "am - m0" in k.source


def test_the_prologue_stays_where_the_fold_does_not_apply():
    rng, _ = fresh_rng()
    # weights computed at run time: nothing to fold them into
    assert _prologue_kept(norm_gemm(rng, (20,), 64, 40, "f16", weights_const=False)[0])
    # f32 keeps the exact prologue: the fold's f32 cancellation costs more accuracy than it saves time
    assert _prologue_kept(norm_gemm(rng, (20,), 64, 40, "f32")[0])
    # tf32 would round raw x at staging, an error the mean term scales by |mean| / std
    assert _prologue_kept(norm_gemm(rng, (20,), 64, 40, "f32", precision="tf32")[0])
    # a weight another node reads too (a tied embedding) would ship twice
    b = GraphBuilder()
    x = b.input("x", (20, 64), "f16")
    w = b.constant(rng.standard_normal((64, 40)).astype(np.float16), "w")
    h = layer_norm(b, x, b.constant(rng.uniform(0.5, 1.5, 64).astype(np.float16), "gamma"))
    assert _prologue_kept(b.build([matmul(b, h, w), b.add("abs", w)]))
    # LN(x) * x: x twice in one product is not affine in x
    b = GraphBuilder()
    x = b.input("x", (20, 64), "f16")
    h = b.add("mul", layer_norm(b, x, b.constant(rng.uniform(0.5, 1.5, 64).astype(np.float16), "gamma")), x)
    graph = b.build([matmul(b, h, b.constant(rng.standard_normal((64, 40)).astype(np.float16), "w"))])
    regions = [r for r in partition(graph) if r.kind == "dot"]
    assert all(not codegen.generate(graph, r).derived for r in regions)


@pytest.mark.parametrize("dtype,norm", [("bf16", "layer"), ("f16", "rms"), ("f16", "layer")])
def test_folded_norm_under_a_gated_epilogue(dtype, norm):
    """LLaMA's MLP input: RMSNorm into the merged gate/up GEMM with SwiGLU as its gated epilogue
    (codegen_gated.py); with LayerNorm each gate's accumulator gets its own column's correction."""
    rng, seed = fresh_rng()
    m, k, f = 37, 96, 40
    b = GraphBuilder()
    x = b.input("x", (2, m, k), dtype)
    gam = rng.uniform(0.5, 1.5, k).astype(NP[dtype])
    bet = rng.uniform(-1, 1, k).astype(NP[dtype]) if norm == "layer" else None
    gamma = b.constant(gam, "gamma")
    h = rms_norm(b, x, gamma) if norm == "rms" else layer_norm(b, x, gamma, b.constant(bet, "beta"))
    wv = (rng.standard_normal((k, 2 * f)) / np.sqrt(k)).astype(NP[dtype])
    d = b.add("dot_general", h, b.constant(wv, "w"), lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
    bv = rng.standard_normal(2 * f).astype(NP[dtype])
    d = b.add("add", d, b.add("broadcast_in_dim", b.constant(bv, "bias"), shape=d.shape, broadcast_dimensions=(2,)))
    g = b.add("slice", d, start=(0, 0, 0), limit=(2, m, f), stride=(1, 1, 1))
    u = b.add("slice", d, start=(0, 0, f), limit=(2, m, 2 * f), stride=(1, 1, 1))
    graph = b.build([b.add("mul", b.add("mul", g, b.add("logistic", g)), u)])
    xa = rows_with_offsets(rng, (2, m, k), dtype)
    (got,), kernels, _ = run_on_host(graph, [xa])
    (gemm,) = kernels
    assert gemm.region.payload.width == f and _folded(gemm) and len(gemm.derived) == (1 if norm == "rms" else 3)
    # the fold rounds gamma * W to 16 bits and nothing else before the f32 accumulator: it is held to one
    # 16-bit rounding of a GEMM operand off the f64 result. The interpreter follows the graph, which
    # rounds the mean, x - mean, the normalized and the scaled x to 16 bits each: it gets 3x (seed
    # 226340861, bf16: the interpreter 0.145 off, the folded kernel 0.033, 0.115 apart)
    x64 = xa.astype(np.float64)
    if norm == "rms":
        h64 = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * gam.astype(np.float64)
    else:
        h64 = ((x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
               * gam.astype(np.float64) + bet.astype(np.float64))
    w64 = wv.astype(np.float64)
    pre = h64 @ w64 + bv.astype(np.float64)
    unit = 2.0 ** -8 if dtype == "bf16" else 2.0 ** -11
    err = 2 * unit * (np.abs(h64) @ np.abs(w64)) + unit * np.abs(pre)      # an operand's rounding, the sum's
    gate, up = pre[..., :f], pre[..., f:]
    silu = gate / (1 + np.exp(-gate))
    true = silu * up
    bound = 1.1 * np.abs(up) * err[..., :f] + np.abs(silu) * err[..., f:] + 3 * unit * np.abs(true) + 1e-3
    for name, out, limit in (("kernel", got, 1), ("interpreter", interpret(graph, [xa])[0], 3)):
        worst = np.max(np.abs(out.astype(np.float64) - true) / bound)
        assert worst <= limit, f"seed {seed}: the {name} is {worst:.2f}x its rounding bound off the f64 result"
