"""A post-LN block's LayerNorm recomputed by its GEMMs (fusion/regions.py epilogue_norm_plan): no row kernel.

s1 = x + a @ W1 + b1 is GEMM 1's epilogue; h1 = LN(s1) is GEMM 2's norm prologue and GEMM 3's
epilogue norm (s2 = h1 + f @ W3 + b3): GEMM 3 takes the row statistics of s1 in its pre-pass
(codegen_norm_prologue.norm_row_stats, over s1's row, not GEMM 3's K) and evaluates LN(s1)[r, c]
per output element. Host build against the interpreter, fresh random inputs, poisoned outputs
(run_on_host), on every GEMM template: SIMT, mma (f16, bf16), tf32, split-K, dynamic M.
"""
import ml_dtypes
import numpy as np
import pytest

from aotc.fusion import regions
from aotc.fusion.regions import partition
from aotc.ir import dims as D
from aotc.ir.dims import DimRange, sym
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.host_run import run_on_host
from tests.helpers.norms import layer_norm, matmul
from tests.helpers.rng import fresh_rng, random_array

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _bias(b, d, v):
    return b.add("add", d, b.add("broadcast_in_dim", v, shape=d.shape, broadcast_dimensions=(len(d.shape) - 1,)))


def post_ln_block(rows, k, n, f, dtype="f32", precision=None, norm_in_f32=False, act="abs", consts=None):
    """x (rows, n), a (rows, k) -> s2 = LN(x + a W1 + b1) + act(LN(...) W2 + b2) W3 + b3, BERT's shape.

    `act`: GEMM 2's epilogue activation. `consts`: name -> array of the weights that are constants, not
    inputs (g, beta, w2: what norm_fold.py folds).

    `norm_in_f32`: the norm computes in f32 from the f16 sum, as the fp16 pass leaves BERT's."""
    b = GraphBuilder()
    kw = {"precision": precision} if precision else {}
    consts = consts or {}

    def weight(name, shape):
        return b.constant(consts[name], name) if name in consts else b.input(name, shape, dtype)

    x, a = b.input("x", rows + (n,), dtype), b.input("a", rows + (k,), dtype)
    w1, b1 = b.input("w1", (k, n), dtype), b.input("b1", (n,), dtype)
    g, beta = weight("g", (n,)), weight("beta", (n,))
    w2, b2 = weight("w2", (n, f)), b.input("b2", (f,), dtype)
    w3, b3 = b.input("w3", (f, n), dtype), b.input("b3", (n,), dtype)
    s1 = b.add("add", x, _bias(b, matmul(b, a, w1, **kw), b1))
    if norm_in_f32:
        g32, beta32 = b.add("convert", g, dtype="f32"), b.add("convert", beta, dtype="f32")
        h1 = b.add("convert", layer_norm(b, b.add("convert", s1, dtype="f32"), g32, beta32), dtype=dtype)
    else:
        h1 = layer_norm(b, s1, g, beta)
    ff = b.add(act, _bias(b, matmul(b, h1, w2, **kw), b2))
    s2 = b.add("add", h1, _bias(b, matmul(b, ff, w3, **kw), b3))
    return b.build([s2])


def block_inputs(rng, rows, k, n, f, dtype="f32"):
    shapes = [rows + (n,), rows + (k,), (k, n), (n,), (n,), (n,), (n, f), (f,), (f, n), (n,)]
    scale = {2: 1 / np.sqrt(k), 6: 1 / np.sqrt(n), 8: 1 / np.sqrt(f)}
    out = []
    for i, s in enumerate(shapes):
        v = random_array(rng, s, low=-3, high=5) if i == 0 else random_array(rng, s) * scale.get(i, 1.0)
        out.append(v.astype(NP[dtype]))
    return out


def _norm_kernels(kernels):
    """(GEMM 2: the norm prologue, GEMM 3: the epilogue norm): both hold the row statistics pre-pass."""
    assert sorted(k.region.kind for k in kernels) == ["dot", "dot", "dot"], [k.region.kind for k in kernels]
    with_stats = [k for k in kernels if "aotc_rs[" in k.source]
    assert len(with_stats) == 2
    return with_stats


@pytest.fixture(autouse=True)
def post_ln_fold(monkeypatch):
    """The fold is taken where GEMM 2 is 16-bit with constant weights (regions._constant_weights), which
    code generation folds the norm into (norm_fold.py); these blocks take their weights as inputs (and run
    f32 too), so GEMM 2 normalizes A in its prologue: the epilogue norm is tested beside either prologue."""
    monkeypatch.setattr(regions, "_constant_weights", lambda *a: True)


@pytest.mark.parametrize("rows,k,n,f,dtype,precision,kind", [
    ((3,), 33, 50, 17, "f32", None, "aotc_dot_"),              # a few rows, n not a tile multiple
    ((2, 65), 20, 70, 33, "f32", None, "aotc_dot_"),           # rows across two m tiles
    ((50,), 40, 783, 64, "f32", None, "aotc_dot_"),            # a norm row longer than a warp's 32 x 24
    ((70,), 48, 96, 40, "f16", None, "aotc_dot_mma_"),
    ((67,), 32, 72, 48, "bf16", None, "aotc_dot_mma_"),
    ((130,), 64, 65, 48, "f32", "tf32", "aotc_dot_tf32_"),
])
def test_post_ln_block_has_no_row_kernel(rows, k, n, f, dtype, precision, kind):
    rng, seed = fresh_rng()
    graph = post_ln_block(rows, k, n, f, dtype, precision)
    ins = block_inputs(rng, rows, k, n, f, dtype)
    want = interpret(graph, ins)[0]
    (got,), kernels, _ = run_on_host(graph, ins)
    prologue, epilogue = _norm_kernels(kernels)
    assert all(k.name.startswith(kind) for k in (prologue, epilogue))
    assert epilogue.region.anchor.inputs[0].shape[-1] == f        # GEMM 3: its K is f, the norm's row n
    # f16/bf16: s1 and h1 round to 2^-11 / 2^-8 of |h1| <~ 4 in both; the GEMMs sum f products of such
    # operands (worst over 6 seeds: 0.0057 f16, 0.036 bf16, 3.7e-6 f32, relative to 1 + |want|); a wrong
    # row statistic would be off by O(1)
    tol = {"f16": 3e-2, "bf16": 1e-1}.get(dtype, 1e-2 if precision else 2e-4)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol,
                               err_msg=f"seed {seed}")


def test_epilogue_norm_in_f32_of_an_f16_sum():
    """BERT under --precision fp16: the LayerNorm runs in f32 on convert(s1), its result converted back."""
    rng, seed = fresh_rng()
    rows, k, n, f = (70,), 48, 96, 40
    graph = post_ln_block(rows, k, n, f, "f16", norm_in_f32=True)
    ins = block_inputs(rng, rows, k, n, f, "f16")
    (got,), kernels, _ = run_on_host(graph, ins)
    _norm_kernels(kernels)
    np.testing.assert_allclose(got.astype(np.float32), interpret(graph, ins)[0].astype(np.float32),
                               rtol=3e-2, atol=3e-2, err_msg=f"seed {seed}")


@pytest.mark.parametrize("dtype,kind", [("f32", "aotc_dot_"), ("f16", "aotc_dot_mma_")])
def test_epilogue_norm_in_the_split_k_finishing_block(dtype, kind):
    """GEMM 3 with a long K and few rows splits K; the block that adds the partials runs the epilogue and
    reads the stats its own pre-pass left in shared memory."""
    rng, seed = fresh_rng()
    rows, k, n, f = ((49,), 24, 70, 3001) if dtype == "f32" else ((50,), 32, 72, 4000)
    graph = post_ln_block(rows, k, n, f, dtype)
    ins = block_inputs(rng, rows, k, n, f, dtype)
    (got,), kernels, counters = run_on_host(graph, ins, runs=2)
    _, epilogue = _norm_kernels(kernels)
    assert epilogue.name.startswith(kind) and epilogue.splits > 1 and not counters.any()
    tol = 3e-2 if dtype == "f16" else 2e-4
    np.testing.assert_allclose(got.astype(np.float32), interpret(graph, ins)[0].astype(np.float32),
                               rtol=tol, atol=tol, err_msg=f"seed {seed}")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_epilogue_norm_with_dynamic_rows(dtype):
    """Rows = batch x seq, both dynamic: the pre-pass guards rows past M; one build, several shapes."""
    rng, seed = fresh_rng()
    B, S = sym("batch"), sym("seq")
    graph = post_ln_block((B, S), 24, 70, 40, dtype)
    graph.dims = {"batch": DimRange(1, 8), "seq": DimRange(1, 100)}
    sizes = [(1, 1), (3, 37), (8, 100), (2, 64)]
    sets = [block_inputs(rng, (bs, ss), 24, 70, 40, dtype) for bs, ss in sizes]
    results, kernels, _ = run_on_host(graph, None, shapes=sets)
    _norm_kernels(kernels)
    tol = 3e-2 if dtype == "f16" else 2e-4
    for ins, (got,), size in zip(sets, results, sizes):
        want = interpret(graph, ins)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol,
                                   err_msg=f"at {size}, seed {seed}")
    assert D.symbols(kernels[0].region.root.shape)


def test_norm_read_by_a_non_gemm_kernel_stays_a_row_kernel():
    """h1 also feeds a reduction (not a GEMM operand nor an epilogue): it is materialized once."""
    b = GraphBuilder()
    x, a = b.input("x", (20, 50)), b.input("a", (20, 30))
    s1 = b.add("add", x, matmul(b, a, b.input("w1", (30, 50))))
    h1 = layer_norm(b, s1, b.input("g", (50,)), b.input("beta", (50,)))
    s2 = b.add("add", h1, matmul(b, h1, b.input("w2", (50, 50))))
    total = b.add("reduce", h1, axes=(0,), kind="sum")
    found = partition(b.build([s2, total]))
    assert [r.kind for r in found].count("row") == 1
    assert not any("recomputed in the epilogue" in w for r in found for w in r.reasons)


def test_norm_whose_gemm_rows_differ_stays_a_row_kernel():
    """h1's other user is a GEMM reading it as its rhs (rows contracted, not the GEMM's m): no fold."""
    b = GraphBuilder()
    x, a = b.input("x", (50, 50)), b.input("a", (50, 30))
    s1 = b.add("add", x, matmul(b, a, b.input("w1", (30, 50))))
    h1 = layer_norm(b, s1, b.input("g", (50,)), b.input("beta", (50,)))
    y = b.add("add", h1, matmul(b, b.input("p", (50, 50)), h1))        # p @ h1: h1 is the rhs
    found = partition(b.build([b.add("abs", matmul(b, h1, b.input("w2", (50, 8)))), y]))
    assert [r.kind for r in found].count("row") == 1
    assert not any("recomputed in the epilogue" in w for r in found for w in r.reasons)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_the_fold_needs_foldable_weights(dtype, monkeypatch):
    """Weights computed at run time (or f32, which norm_fold.py does not fold) keep the norm one row
    kernel: GEMM 2 would normalize every A element in its main loop (the profile model's 2-4x) instead of
    running on raw s with W' folded."""
    monkeypatch.undo()
    consts = {} if dtype == "f16" else dict(zip(("g", "beta", "w2"), block_inputs(fresh_rng()[0], (20,), 16,
                                                                                  48, 24)[4:7]))
    found = partition(post_ln_block((20,), 16, 48, 24, dtype, consts=consts))
    assert sorted(r.kind for r in found) == ["dot", "dot", "dot", "row"]
    assert not any("recomputed in the epilogue" in w for r in found for w in r.reasons)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_post_ln_block_with_constant_weights_folds_both_ends(dtype):
    """BERT's case: constant gamma, beta and W2. GEMM 2 runs on raw s1 with the norm folded into W2, GEMM 3
    recomputes LN(s1) in its epilogue; both from the same statistics pre-pass over s1's rows."""
    rng, seed = fresh_rng()
    rows, k, n, f = (70,), 48, 96, 40
    ins = block_inputs(rng, rows, k, n, f, dtype)
    consts = {"g": ins[4], "beta": ins[5], "w2": ins[6]}
    graph = post_ln_block(rows, k, n, f, dtype, consts=consts)
    ins = ins[:4] + ins[7:]
    (got,), kernels, _ = run_on_host(graph, ins)
    prologue, epilogue = _norm_kernels(kernels)
    assert prologue.derived and "am - m0" not in prologue.source      # folded: A is raw s1
    assert not epilogue.derived
    tol = {"f16": 3e-2, "bf16": 1e-1}[dtype]
    np.testing.assert_allclose(got.astype(np.float32), interpret(graph, ins)[0].astype(np.float32),
                               rtol=tol, atol=tol, err_msg=f"seed {seed}")
