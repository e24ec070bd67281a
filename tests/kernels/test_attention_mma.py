"""The tensor-core flash-attention kernel (attention_mma.cu) on the host emulation vs the interpreter.

Query and key counts cut the 64-, 32- and 16-row blocks and the staged key tiles (32 keys a warp, 16 at
dh 128; times the key split) (1, 17, 50, 64, 129); the forms (block_form: rows, key splits) are the
chooser's at these small grids (16 rows, keys split 4 ways) and forced: 64/32/16 rows with the keys shared
(1, 2 or 4 warps), 32 rows split 2 ways, 16 rows split 2 ways (2 warps); a split with shares wholly past
the last key (17 keys over 4 x 32). Head dims 64 and 128, V's apart from Q's; Q/K/V arrive through
transposes (prologue index math, per-element staging); the score chain carries a scale and an additive
mask (BERT's (1 - m) * -10000) or a boolean Where with -inf (fully masked rows included: the
interpreter's NaN, which the split's merge keeps: 0 / 0) or a causal 0 / -inf (rows whose later key
shares score no finite value); the arena is NaN-poisoned by run_on_host.

Tolerance: the kernel rounds P to the region's dtype before P.V (|dO| <= u max|V|, sum P = 1), and the
interpreter rounds S, the scaled scores, exp, the row sum, P and O to it (the scores' rounding moves P
by up to |x| u with |x| of a few units), so the two differ by a few u max|V|: 8 u max|V| with
u = 2^-11 (f16) or 2^-8 (bf16). A key split rounds each share's P against its own max (the same relative
rounding) and merges in f32, a few f32 ulps more. A misplaced fragment, key or share weight moves outputs
by O(max|V| / sk).
"""
import ml_dtypes
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen, codegen_attention_mma
from aotc.kernels.nvrtc_compile import compile_device
from aotc.kernels.resources import cubin_resources
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng
from tests.kernels.test_codegen import _softmax

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
UNIT = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8}


def _const(g, x, dt, shape, dims=()):
    c = g.constant(np.asarray(x, np.float32))
    if dt != "f32":
        c = g.add("convert", c, dtype=dt)
    return g.add("broadcast_in_dim", c, shape=shape, broadcast_dimensions=dims)


def mma_attention_graph(b, h, sq, sk, dh, dv, dt="f16", mask=None):
    """BERT's layout: Q and V (B, S, H, D) transposed to heads, K already (B, H, D, S); `mask` None,
    "add" ((B, S) float: (1 - m) * -10000 added), "where" ((B, S) bool: where(m, x, -inf)) or "causal" (a
    constant (S, S) 0 / -inf added: keys j <= i)."""
    g = GraphBuilder()
    q = g.input("q", (b, sq, h, dh), dt)
    k = g.input("k", (b, h, dh, sk), dt)
    v = g.input("v", (b, sk, h, dv), dt)
    qt = g.add("transpose", q, permutation=(0, 2, 1, 3))
    vt = g.add("transpose", v, permutation=(0, 2, 1, 3))
    s = g.add("dot_general", qt, k, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,))
    x = g.add("mul", s, _const(g, 1 / np.sqrt(dh), dt, s.shape))
    if mask == "add":
        m = g.input("mask", (b, sk), dt)
        bias = g.add("mul", g.add("sub", _const(g, 1.0, dt, m.shape), m), _const(g, -10000.0, dt, m.shape))
        x = g.add("add", x, g.add("broadcast_in_dim", bias, shape=s.shape, broadcast_dimensions=(0, 3)))
    elif mask == "where":
        m = g.input("mask", (b, sk), "bool")
        mb = g.add("broadcast_in_dim", m, shape=s.shape, broadcast_dimensions=(0, 3))
        x = g.add("select", mb, x, _const(g, -np.inf, dt, s.shape))
    elif mask == "causal":                       # key j <= query i: a constant 0 / -inf added
        c = g.constant(np.where(np.tril(np.ones((sq, sk))) > 0, 0.0, -np.inf).astype(np.float32))
        c = c if dt == "f32" else g.add("convert", c, dtype=dt)
        x = g.add("add", x, g.add("broadcast_in_dim", c, shape=s.shape, broadcast_dimensions=(2, 3)))
    p = _softmax(g, x, (3,))
    o = g.add("dot_general", p, vt, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,))
    out = g.add("reshape", g.add("transpose", o, permutation=(0, 2, 1, 3)), shape=(b, sq, h * dv))
    return g.build([out])


def _inputs(rng, b, h, sq, sk, dh, dv, dt, mask):
    t = NP[dt]
    ins = [rng.standard_normal((b, sq, h, dh)).astype(t), rng.standard_normal((b, h, dh, sk)).astype(t),
           rng.standard_normal((b, sk, h, dv)).astype(t)]
    if mask == "add":
        ins.append((rng.random((b, sk)) < 0.8).astype(t))
    elif mask == "where":
        keep = rng.random((b, sk)) < 0.8
        keep[:, 0] = True
        if b > 1:
            keep[0] = False                      # batch 0: every row fully masked -> NaN, as interpreted
        ins.append(keep)
    return ins


def _run(b, h, sq, sk, dh, dv, dt, mask=None):
    rng, seed = fresh_rng()
    graph = mma_attention_graph(b, h, sq, sk, dh, dv, dt, mask)
    ins = _inputs(rng, b, h, sq, sk, dh, dv, dt, mask)
    want = interpret(graph, ins)[0]
    (got,), kernels, _ = run_on_host(graph, ins)
    return got, want, kernels, ins, seed


def _check(got, want, ins, dt, seed):
    g32, w32 = got.astype(np.float32), want.astype(np.float32)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert (np.isnan(g32) == np.isnan(w32)).all(), f"NaN pattern differs (seed {seed})"
    tol = 8 * UNIT[dt] * float(np.abs(ins[2].astype(np.float32)).max())
    np.testing.assert_allclose(g32, w32, rtol=0, atol=tol, err_msg=f"seed {seed}")


@pytest.mark.parametrize("b,h,sq,sk,dh,dv,dt,mask", [
    (2, 3, 17, 50, 64, 64, "f16", "add"),
    (1, 2, 129, 64, 64, 64, "bf16", None),
    (2, 2, 1, 129, 64, 64, "f16", "where"),
    (2, 1, 64, 17, 64, 128, "bf16", "add"),
    (1, 2, 50, 33, 128, 64, "f16", None),
    (1, 1, 65, 40, 128, 128, "bf16", "where"),
])
def test_mma_attention_matches_the_interpreter(b, h, sq, sk, dh, dv, dt, mask):
    """The chooser's form: at these grids (at most 12 blocks of 64 rows) 16 rows a block, keys split 4 ways."""
    got, want, kernels, ins, seed = _run(b, h, sq, sk, dh, dv, dt, mask)
    (kernel,) = kernels
    assert kernel.name.startswith("aotc_attention_mma_")
    assert kernel.block == (128, 1, 1) and kernel.grid[0] == b * h * -(-sq // 16)
    w32 = want.astype(np.float32)
    if mask == "where" and b > 1:
        assert np.isnan(w32[0]).all()            # the fully masked batch entry
    assert not np.isnan(w32[1:] if mask == "where" and b > 1 else w32).any()
    _check(got, want, ins, dt, seed)


@pytest.mark.parametrize("rows,splits,b,h,sq,sk,dh,dv,dt,mask", [
    (64, 1, 2, 3, 17, 50, 64, 64, "f16", "add"),
    (64, 1, 2, 1, 129, 40, 128, 128, "bf16", "where"),
    (32, 1, 2, 2, 50, 33, 64, 64, "bf16", "where"),
    (32, 1, 1, 2, 65, 17, 128, 64, "f16", "add"),
    (16, 1, 2, 1, 33, 50, 64, 128, "f16", None),
    (16, 4, 2, 2, 33, 17, 64, 64, "f16", "where"),     # shares 1-3 wholly past the 17 keys
    (16, 4, 1, 2, 40, 200, 128, 128, "bf16", "add"),   # 4 tiles of 64 keys, the last cut mid-share
    (32, 2, 2, 2, 50, 129, 64, 64, "bf16", "where"),
    (32, 2, 1, 3, 65, 96, 128, 64, "f16", None),       # whole key tiles: no key bound test
    (16, 2, 2, 1, 17, 70, 64, 128, "f16", "add"),      # 2 warps, both splitting the keys
    (16, 4, 1, 2, 128, 128, 64, 64, "f16", "causal"),  # early rows: shares with no finite score merged
    (32, 2, 2, 1, 70, 70, 128, 128, "bf16", "causal"),
])
def test_each_block_form_matches_the_interpreter(rows, splits, b, h, sq, sk, dh, dv, dt, mask, monkeypatch):
    """Every block form on partial query tiles, masks and both head widths (the grid here would pick 16 x 4)."""
    monkeypatch.setattr(codegen_attention_mma, "block_form", lambda nbatch, sq: (rows, splits))
    got, want, kernels, ins, seed = _run(b, h, sq, sk, dh, dv, dt, mask)
    (kernel,) = kernels
    assert kernel.name.startswith("aotc_attention_mma_")
    assert kernel.block == (2 * rows * splits, 1, 1) and kernel.grid[0] == b * h * -(-sq // rows)
    if mask == "where" and b > 1:
        assert np.isnan(want[0].astype(np.float32)).all()
    _check(got, want, ins, dt, seed)


def test_the_chooser_splits_keys_at_small_grids_only():
    """BERT-base at batch 1 (12 heads x 128 queries): 24 blocks of 64 rows fill 96 of the 528 SM partitions,
    96 blocks of 16 rows with the keys split 4 ways fill 384; at batch 32, 768 blocks fill 97% and the
    split gains nothing: 64 rows. A dynamic batch is judged at its largest. One query keeps 3 of the 64-row
    block's 4 warps idle: split at any grid."""
    from aotc.ir.dims import DimRange, dim_ranges, sym
    form = codegen_attention_mma.block_form
    assert form(12, 128) == (16, 4)
    assert form(384, 128) == (64, 1)
    assert form(2, 1) == (16, 4)
    with dim_ranges({"batch": DimRange(1, 64)}):
        assert form(12 * sym("batch"), 128) == (64, 1)
    with dim_ranges({"batch": DimRange(1, 2)}):       # 96 blocks of 32 rows split 2 ways fill 73%, as
        assert form(12 * sym("batch"), 128) == (32, 2)  # 192 of 16 x 4 do in two rounds
    # where a split raises the fill less than SPLIT_GAIN, the 64-row form stays: 132 blocks fill 100%
    assert codegen_attention_mma.key_splits(132, 64) == 1


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_inspect_shows_the_kernel_as_tensor_core_math(dt):
    from aotc.kernels.kernel_math import kernel_math
    from aotc.package.inspect import uses_tensor_cores
    graph = mma_attention_graph(1, 2, 8, 8, 64, 64, dt)
    (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
    assert uses_tensor_cores(kernel.name) and kernel_math(kernel) == dt


def test_other_head_dims_and_f32_keep_the_simt_kernel():
    from aotc.kernels.kernel_math import kernel_math
    for dh, dt in ((32, "f16"), (64, "f32"), (96, "bf16")):
        graph = mma_attention_graph(1, 2, 8, 8, dh, dh, dt)
        (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
        assert kernel.name.startswith("aotc_attention_") and not kernel.name.startswith("aotc_attention_mma_")
        assert kernel_math(kernel) == "f32"


@pytest.mark.parametrize("b,rows,splits", [(1, 16, 4), (2, 32, 2), (8, 64, 1), (1, 16, 1), (2, 32, 1)])
@pytest.mark.parametrize("dh", [64, 128])
def test_mma_attention_compiles_without_local_memory(dh, b, rows, splits, monkeypatch):
    """BERT-shaped (12 heads, 128 tokens) at batch 1, 2 and 8, each block form (the chooser's at batch 1,
    16 x 4, and forced)."""
    monkeypatch.setattr(codegen_attention_mma, "block_form", lambda nbatch, sq: (rows, splits))
    graph = mma_attention_graph(b, 12, 128, 128, dh, dh, "f16", "add")
    kernels = [codegen.generate(graph, r) for r in partition(graph)]
    assert [k.block for k in kernels if k.name.startswith("aotc_attention_mma_")] == [(2 * rows * splits, 1, 1)]
    source = codegen.module_source(kernels)
    for arch in ("sm_80", "sm_90"):
        (res,) = [r for name, r in cubin_resources(compile_device(source, arch)).items()
                  if name.startswith("aotc_attention_mma_")]
        assert res.local_bytes == 0
        # 65536 registers an SM: 4 blocks of 128 threads (25% occupancy) at dh 64, 3 (18.75%) at dh 128; fewer
        # warps a block (min_blocks 1): 255, the most a thread has
        assert res.registers <= ((128 if dh == 64 else 168) if rows // 16 * splits == 4 else 255)


def test_mma_attention_with_dynamic_batch_and_sequence():
    """One build over batch 1..4 and sequence 1..200 (kernel arguments), run at shapes that cut the tiles."""
    from aotc.ir import dims as D
    from aotc.ir.dims import DimRange, dim_ranges, sym
    ranges = {"batch": DimRange(1, 4), "seq": DimRange(1, 200)}
    rng, seed = fresh_rng()
    with dim_ranges(ranges):
        graph = mma_attention_graph(sym("batch"), 2, sym("seq"), sym("seq"), 64, 64, "f16", "add")
        graph.dims = {k: r for k, r in ranges.items() if any(k in D.symbols(v.shape) for v in graph.inputs)}
    sizes = [(1, 1), (3, 33), (2, 129)]
    sets = [_inputs(rng, b, 2, s, s, 64, 64, "f16", "add") for b, s in sizes]
    results, kernels, _ = run_on_host(graph, None, shapes=sets)
    # judged at batch 4 x 200 queries: 32 blocks of 64 rows fill 24% of the partitions, 104 of 16 rows x 4 79%
    assert [k.block for k in kernels if k.name.startswith("aotc_attention_mma_")] == [(128, 1, 1)]
    assert codegen_attention_mma.block_form(2 * 4, 200) == (16, 4)
    for ins, (got,), size in zip(sets, results, sizes):
        want = interpret(graph, ins)[0].astype(np.float32)
        tol = 8 * UNIT["f16"] * float(np.abs(ins[2].astype(np.float32)).max())
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=0, atol=tol, err_msg=f"{size}, seed {seed}")


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_bert_engine_with_64_wide_heads_runs_the_mma_kernel(precision, tmp_path):
    """End to end: an exported-layout BERT encoder (2 heads of 64, 40 tokens: a partial key tile, the
    additive mask from a 0/1 input) compiled at fp16/bf16, run by the engine on the cpu device, vs
    onnxruntime in fp32 (test_precision.py's bounds for BERT)."""
    import aotc.compiler
    from aotc.bench.models.small import bert_encoder
    from aotc.package.runtime_binding import Engine
    ort = pytest.importorskip("onnxruntime")
    model, feeds = bert_encoder(batch=2, seq=40, layers=1, d=128, heads=2, ffn=64)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    path = tmp_path / "m.engine"
    result = aotc.compiler.compile(model, path, arch="none", precision=precision)
    assert any(k.startswith("aotc_attention_mma_") for k in result.plan.kernels)
    engine = Engine(str(path))
    outs = engine.create_context(device="cpu").run(feeds)
    for spec, w in zip(engine.outputs, want):
        got = outs[spec.name].astype(np.float64)
        err = float(np.max(np.abs(got - w)) / max(np.max(np.abs(w)), 1e-30))
        assert err <= {"fp16": 1e-2, "bf16": 5e-2}[precision], f"{spec.name}: rel error {err:.2e}"

