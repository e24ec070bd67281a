"""dot_mma.cu's operand staging (mma_staging.py): every layout and path agrees with the interpreter.

A stored (m, k) or (k, m), B stored (n, k) or (k, n); runs that split into 16-byte chunks go by cp.async,
others per element; M, N, K tails; split-K; the sanitizing build; NVRTC for sm_80 and sm_90.
"""
from __future__ import annotations

import re

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
        assert (f"const unsigned {which}_s =" in src) == (runs[which] % 8 == 0)
        frag = "af[nb][i]" if which == "A" else "r4"
        assert (f"aotc_ldmatrix_x4_trans_at({frag}" in src) == (layout == "mn")
        assert (f"aotc_ldmatrix_x4_at({frag}" in src) == (layout == "k")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_batched_bf16_and_f16(dtype):
    graph, shapes = gemm("k", "mn", 24, 40, 64, dtype, batch=(3,))
    assert "aotc_cp_async_16_at(" in run(graph, shapes, dtype).source


def test_split_k_slices_stay_inside_their_split():
    graph, shapes = gemm("k", "mn", 16, 24, 1600)
    kernel = run(graph, shapes, "f16")
    assert kernel.splits > 1 and "aotc_cp_async_16_at(" in kernel.source


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
    assert "const unsigned A_s =" in src and "const unsigned B_s =" not in src
    assert "aotc_ldmatrix_x4_trans_at(r4" in src and "aotc_ldmatrix_x4_trans_at(af" not in src


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
    assert kernel.splits == 1 and "const unsigned A_s =" in kernel.source and "const unsigned B_s =" in kernel.source
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


def _launch_unaligned(graph, shapes, shift: int, np_dt=np.float16):
    """Run the graph's one kernel with its first input `shift` elements past a 16-byte boundary."""
    from aotc.fusion.regions import partition
    from aotc.kernels.host_compile import compile_host
    from aotc.kernels.host_exec import HostLibrary
    (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
    lib = HostLibrary(compile_host(codegen.module_source([kernel]), [kernel.name], sanitize=True))
    rng, seed = fresh_rng()
    ins = [random_array(rng, s).astype(np_dt) for s in shapes]
    raw = np.zeros(ins[0].size + 8, np_dt)
    base = (-raw.ctypes.data % 16) // raw.itemsize
    shifted = raw[base + shift:base + shift + ins[0].size].reshape(ins[0].shape)
    shifted[...] = ins[0]
    assert shifted.ctypes.data % 16 == 2 * shift
    (want,) = interpret(graph, ins)
    out = np.full(want.shape, np.nan, np.float32)
    lib.launch(kernel.name, kernel.grid, kernel.block, [shifted, *ins[1:], out])
    np.testing.assert_allclose(out, want, rtol=3e-2, atol=3e-2, err_msg=f"seed {seed}")
    return kernel


def test_an_unaligned_conv_input_takes_the_per_element_loop():
    """The implicit GEMM's input chunks are addressed per row and tap; bound 6 bytes off, the kernel's
    other copy of the K loop reads it per element (the sanitizer checks every access)."""
    g = GraphBuilder()
    x = g.input("x", (2, 9, 7, 16), "f16")
    w = g.input("w", (24, 3, 3, 16), "f16")
    y = g.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 0)), dilations=(1, 1), groups=1,
              layout="NHWC")
    kernel = _launch_unaligned(g.build([g.add("convert", y, dtype="f32")]), [(2, 9, 7, 16), (24, 3, 3, 16)], 3)
    assert kernel.name.startswith("aotc_dot_mma_") and "Ako" in kernel.source and "& 15) == 0" in kernel.source


def test_an_unaligned_transposed_input_takes_the_per_element_loop():
    kernel = _launch_unaligned(*gemm("mn", "mn", 40, 72, 136), shift=5)
    assert "aotc_ldmatrix_x4_trans_at(af" in kernel.source and "& 15) == 0" in kernel.source


@pytest.mark.parametrize("m,n,k", [(130, 72, 200), (64, 128, 64), (3, 56, 8)])
def test_batched_tiles_and_stages_cut_anywhere(m, n, k):
    """M and N that cut the 64x64 tile or fill it exactly (no row tests then), K that cuts the 64-deep stage."""
    graph, shapes = gemm("k", "mn", m, n, k, batch=(2,))
    src = run(graph, shapes, "f16").source
    assert "const unsigned A_s =" in src and "const unsigned B_s =" in src


def test_two_contracted_dims_stage_by_address_each_stage():
    """A (k1, k2, m): K unravels into two dims, so its chunks are addressed per stage, not hoisted."""
    g = GraphBuilder()
    a = g.input("a", (5, 24, 40), "f16")
    w = g.input("w", (48, 5, 24), "f16")
    d = g.add("dot_general", a, w, lhs_batch=(), rhs_batch=(), lhs_contract=(0, 1), rhs_contract=(1, 2))
    src = run(g.build([g.add("convert", d, dtype="f32")]), [(5, 24, 40), (48, 5, 24)], "f16").source
    assert "A_p0" not in src
    assert re.search(r"aotc_cp_async_16_at\(aotc_smem, A_s \+ st \* \d+ \+ l \* 2048, src, nbytes\)", src)


def test_a_fused_prologue_is_staged_per_element():
    """A converted from f32 in the GEMM's prologue is no plain load: A goes per element, B by cp.async."""
    g = GraphBuilder()
    a = g.input("a", (70, 96), "f32")
    w = g.input("w", (96, 40), "bf16")
    r = g.add("convert", a, dtype="bf16")
    d = g.add("dot_general", r, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    graph = g.build([g.add("convert", d, dtype="f32")])
    rng, seed = fresh_rng()
    ins = [random_array(rng, (70, 96)).astype(np.float32), random_array(rng, (96, 40)).astype(ml_dtypes.bfloat16)]
    (want,) = interpret(graph, ins)
    (got,), kernels, _ = run_on_host(graph, ins)
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2, err_msg=f"seed {seed}")
    (kernel,) = kernels
    assert "const unsigned A_s =" not in kernel.source and "const unsigned B_s =" in kernel.source


def test_split_k_with_splits_that_cut_a_stage():
    """K per split is whole 64-deep stages, but K = 2000 is not: the last split's last stage stops at kend."""
    graph, shapes = gemm("k", "k", 16, 24, 2000)
    kernel = run(graph, shapes, "f16")
    assert kernel.splits > 1 and "const unsigned A_s =" in kernel.source


def test_the_sm90_main_loop_keeps_the_tensor_cores_busy():
    """The profile's measure on the cubin: the K loop of a BERT-sized GEMM and of a ResNet 3x3 conv issues
    >= 24% HMMA (MATH_SHARE_FOR_PEAK is 25%), spills nothing and leaves room for 4 blocks an SM."""
    from aotc.fusion.regions import partition
    from aotc.kernels.nvrtc_compile import compile_device
    from aotc.kernels.resources import cubin_resources
    from aotc.profile import sass
    if sass.nvdisasm_path() is None:
        pytest.skip("nvdisasm is not installed")
    g = GraphBuilder()
    x = g.input("x", (8, 14, 14, 256), "f16")
    w = g.input("w", (256, 3, 3, 256), "f16")
    conv = g.build([g.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1),
                          groups=1, layout="NHWC")])
    for graph, floor in ((gemm("k", "mn", 4096, 768, 3072)[0], 0.27), (conv, 0.24)):
        (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
        cubin = compile_device(codegen.module_source([kernel]), "sm_90")
        (mix,) = sass.cubin_mix(cubin).values()
        (res,) = cubin_resources(cubin).values()
        assert mix["tensor_share"] >= floor and mix["local_ops"] == 0, mix
        assert res.registers <= 128
