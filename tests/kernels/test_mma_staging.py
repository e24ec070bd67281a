"""dot_mma.cu's operand staging (mma_staging.py): every layout and path agrees with the interpreter.

A stored (m, k) or (k, m), B stored (n, k) or (k, n); runs that split into 16-byte chunks go by cp.async,
others per element; M, N, K tails; split-K; the sanitizing build; NVRTC for sm_80 and sm_90.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from aotc.kernels.mma_staging import can_stage_async, choose_layout
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array


def gemm(a_layout: str, b_layout: str, m: int, n: int, k: int, dtype: str = "f16", batch=()):
    """(graph, input shapes) of relu(A @ B) with A and B stored as the layouts say."""
    nb = len(batch)
    a_shape = batch + ((m, k) if a_layout == "k" else (k, m))
    b_shape = batch + ((n, k) if b_layout == "k" else (k, n))
    g = GraphBuilder()
    a = g.input("a", a_shape, dtype)
    w = g.input("w", b_shape, dtype)
    d = g.add("dot_general", a, w, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
              lhs_contract=(nb + (1 if a_layout == "k" else 0),), rhs_contract=(nb + (1 if b_layout == "k" else 0),))
    return g.build([g.add("convert", g.add("max", d, g.add("neg", d)), dtype="f32")]), [a_shape, b_shape]


def run(graph, shapes, dtype):
    rng, seed = fresh_rng()
    np_dt = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    ins = [random_array(rng, s).astype(np_dt) for s in shapes]
    (want,) = interpret(graph, ins)
    (got,), kernels, _ = run_on_host(graph, ins)
    assert np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2, err_msg=f"seed {seed}")
    (kernel,) = [k for k in kernels if k.name.startswith("aotc_dot_mma_")]
    return kernel


@pytest.mark.parametrize("a_layout", ["k", "mn"])
@pytest.mark.parametrize("b_layout", ["k", "mn"])
@pytest.mark.parametrize("m,n,k", [(72, 88, 40), (70, 90, 40), (72, 88, 36)])
def test_every_layout_and_path_matches_the_interpreter(a_layout, b_layout, m, n, k):
    graph, shapes = gemm(a_layout, b_layout, m, n, k)
    src = run(graph, shapes, "f16").source
    runs = {"A": k if a_layout == "k" else m, "B": k if b_layout == "k" else n}
    for which, layout in (("A", a_layout), ("B", b_layout)):
        assert (f"aotc_cp_async_16(&{which}s" in src) == (runs[which] % 8 == 0)
        frag = "af[nb][i]" if which == "A" else "r4"
        assert (f"aotc_ldmatrix_x4_trans({frag}" in src) == (layout == "mn")
        assert (f"aotc_ldmatrix_x4({frag}" in src) == (layout == "k")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_batched_bf16_and_f16(dtype):
    graph, shapes = gemm("k", "mn", 24, 40, 64, dtype, batch=(3,))
    assert "aotc_cp_async_16(" in run(graph, shapes, dtype).source


def test_split_k_slices_stay_inside_their_split():
    graph, shapes = gemm("k", "mn", 16, 24, 1600)
    kernel = run(graph, shapes, "f16")
    assert kernel.splits > 1 and "aotc_cp_async_16(" in kernel.source


def test_the_sanitizer_finds_no_race_in_the_pipeline(monkeypatch):
    monkeypatch.setenv("AOTC_SANITIZE", "1")
    monkeypatch.setenv("AOTC_SANITIZE_ORDER", "reverse")
    for a_layout, b_layout, k in [("k", "mn", 72), ("mn", "k", 36)]:
        graph, shapes = gemm(a_layout, b_layout, 66, 72, k)
        run(graph, shapes, "f16")


def test_nvrtc_compiles_the_pipeline_for_sm80_and_sm90():
    from aotc.kernels.nvrtc_compile import compile_device_with_ptx
    graph, shapes = gemm("mn", "k", 72, 88, 40)
    kernel = run(graph, shapes, "f16")
    for arch in ("sm_80", "sm_90"):
        cubin, ptx = compile_device_with_ptx(codegen.module_source([kernel]), arch)
        assert cubin and b"cp.async.cg.shared.global" in ptx and b"ldmatrix.sync.aligned.m8n8.x4.trans" in ptx
        assert b"mma.sync.aligned.m16n8k16" in ptx


def test_a_transposed_operand_stages_along_its_memory():
    """B = transpose(wt) with wt stored (k, n): read per element (index math), in the n-major layout."""
    g = GraphBuilder()
    a = g.input("a", (40, 48), "f16")
    wt = g.input("wt", (48, 56), "f16")
    w = g.add("transpose", wt, permutation=(1, 0))                          # (n, k), n contiguous
    d = g.add("dot_general", a, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(1,))
    src = run(g.build([g.add("convert", d, dtype="f32")]), [(40, 48), (48, 56)], "f16").source
    assert "aotc_cp_async_16(&As" in src and "aotc_cp_async_16(&Bs" not in src
    assert "aotc_ldmatrix_x4_trans(r4" in src and "aotc_ldmatrix_x4_trans(af" not in src


def test_layout_and_chunk_rules():
    assert choose_layout(1, [1], [0]) == "k"          # A (m, k)
    assert choose_layout(1, [0], [1]) == "mn"         # B (k, n)
    assert choose_layout(2, [1], [0, 2]) == "k"       # two free dims: rows of k are the only runs
    assert can_stage_async("k", [1], 2, 64) and not can_stage_async("k", [1], 2, 60)
    assert not can_stage_async("k", [0], 2, 64)       # k is not the contiguous dim
    assert can_stage_async("mn", [0], 2, 128) and not can_stage_async("mn", [0], 2, 12)


def test_an_unaligned_bound_input_is_staged_per_element():
    """A caller's buffer need not be 16-byte aligned: the kernel checks and reads it per element."""
    from aotc.fusion.regions import partition
    from aotc.kernels.host_compile import compile_host
    from aotc.kernels.host_exec import HostLibrary
    graph, shapes = gemm("k", "mn", 24, 40, 64)
    (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
    assert kernel.splits == 1 and "aotc_cp_async_16(&As" in kernel.source and "aotc_cp_async_16(&Bs" in kernel.source
    lib = HostLibrary(compile_host(codegen.module_source([kernel]), [kernel.name], sanitize=True))
    rng, seed = fresh_rng()
    a, w = (random_array(rng, s).astype(np.float16) for s in shapes)
    raw = np.zeros(a.size + 1, np.float16)
    shifted = raw[1:].reshape(a.shape)                     # 2 bytes past an aligned start
    shifted[...] = a
    assert shifted.ctypes.data % 16 == 2
    out = np.full((24, 40), np.nan, np.float32)
    lib.launch(kernel.name, kernel.grid, kernel.block, [shifted, w, out])   # the sanitizer: nothing misaligned
    (want,) = interpret(graph, [a, w])
    np.testing.assert_allclose(out, want, rtol=3e-2, atol=3e-2, err_msg=f"seed {seed}")
