"""dot_mma.cu's block-tile variants (split_k.MMA_TILES, mma_staging.tile_slots) against the interpreter.

Each test pins one tile by narrowing split_k.MMA_TILES to it (codegen_dot_mma.mma_tiling reads it), then
runs the host emulation on fresh random inputs into poisoned outputs: both operand layouts (the 32-wide
"mn" tile packs two k rows a physical row), M/N/K that cut the tile and the 64-deep stage, batch > 1, a
fused prologue and epilogue, split-K, the implicit-GEMM conv, a view staged by cp.async, an unaligned bound
input, the sanitizer; and on the cubin the sm_90 main loop's HMMA share, spills and registers, and on the
profiling host build the shared-memory bank conflicts.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen, split_k
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_mma_staging import _launch_unaligned, gemm

SMALL = [(64, 32), (32, 64), (32, 32)]          # 64x64 is every other dot_mma test's tile


@pytest.fixture
def pin(monkeypatch):
    def pin_tile(tile):
        monkeypatch.setattr(split_k, "MMA_TILES", (tile,))
    return pin_tile


def _check(graph, ins, tile, tol=3e-2, seed=None, **kw):
    (want,) = interpret(graph, ins)
    (got,), kernels, counters = run_on_host(graph, ins, **kw)
    assert np.isfinite(got).all(), "unwritten outputs"
    np.testing.assert_allclose(got.astype(np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol,
                               err_msg=f"tile {tile} seed {seed}")
    (kernel,) = [k for k in kernels if k.name.startswith("aotc_dot_mma_")]
    bm, bn = tile
    assert f"block tile {bm}x{bn}" in kernel.source and kernel.block == (128, 1, 1)
    assert not counters.any(), "a split-K tile counter was left non-zero"
    return kernel


def _inputs(shapes, dtype="f16", scale=1.0):
    rng, seed = fresh_rng()
    np_dt = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    return [(random_array(rng, s) * scale).astype(np_dt) for s in shapes], seed


@pytest.mark.parametrize("tile", SMALL)
@pytest.mark.parametrize("a_layout,b_layout", [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")])
def test_every_layout_on_every_tile(pin, tile, a_layout, b_layout):
    """M, N cut the tile, K cuts the 64-deep stage; batch 2; a relu epilogue."""
    pin(tile)
    graph, shapes = gemm(a_layout, b_layout, 40, 72, 136, batch=(2,))
    ins, _ = _inputs(shapes)
    kernel = _check(graph, ins, tile)
    bm, bn = tile
    assert kernel.grid == (-(-72 // bn), -(-40 // bm), 2)
    src = kernel.source
    assert "const unsigned A_s =" in src and "const unsigned B_s =" in src
    assert f"float acc[{bm // 32}][{bn // 16}][4];" in src
    assert ("aotc_ldmatrix_x4_trans_at(r4" in src) == (b_layout == "mn")


@pytest.mark.parametrize("tile", SMALL)
def test_per_element_staging_and_a_fused_prologue(pin, tile):
    """A converted from f32 (per element, both layouts' flat index), B stored (k, n) with N = 36: its rows
    are not whole 16-byte chunks, so it goes per element too; bf16."""
    pin(tile)
    g = GraphBuilder()
    a = g.input("a", (50, 96), "f32")
    w = g.input("w", (96, 36), "bf16")
    d = g.add("dot_general", g.add("convert", a, dtype="bf16"), w, lhs_batch=(), rhs_batch=(),
              lhs_contract=(1,), rhs_contract=(0,))
    graph = g.build([g.add("convert", g.add("tanh", d), dtype="f32")])
    rng, seed = fresh_rng()
    ins = [random_array(rng, (50, 96)).astype(np.float32), random_array(rng, (96, 36)).astype(ml_dtypes.bfloat16)]
    kernel = _check(graph, ins, tile, seed=seed)
    assert "const unsigned A_s =" not in kernel.source and "const unsigned B_s =" not in kernel.source


@pytest.mark.parametrize("tile", SMALL)
def test_split_k_on_every_tile(pin, tile):
    """A few tiles and a deep K: split in whole 64-deep stages, partials summed in split order."""
    pin(tile)
    graph, shapes = gemm("k", "mn", 30, 40, 2000)
    ins, seed = _inputs(shapes, scale=0.2)
    kernel = _check(graph, ins, tile, seed=seed, runs=2)
    assert kernel.splits > 1 and "aotc_split_last" in kernel.source
    (again,), _, _ = run_on_host(graph, ins)
    (first,), _, _ = run_on_host(graph, ins)
    np.testing.assert_array_equal(first, again)


@pytest.mark.parametrize("tile", SMALL)
def test_implicit_gemm_conv_on_every_tile(pin, tile):
    """NHWC 3x3 conv with padding, 2 images: A by cp.async per pixel row and tap."""
    pin(tile)
    g = GraphBuilder()
    x = g.input("x", (2, 7, 6, 16), "f16")
    w = g.input("w", (40, 3, 3, 16), "f16")
    y = g.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1,
              layout="NHWC")
    graph = g.build([g.add("convert", y, dtype="f32")])
    ins, seed = _inputs([(2, 7, 6, 16), (40, 3, 3, 16)], scale=0.5)
    kernel = _check(graph, ins, tile, seed=seed)
    assert "Ako" in kernel.source


@pytest.mark.parametrize("tile", SMALL)
def test_unaligned_bound_input_on_every_tile(pin, tile):
    pin(tile)
    kernel = _launch_unaligned(*gemm("mn", "k", 40, 72, 136), shift=3)
    assert f"block tile {tile[0]}x{tile[1]}" in kernel.source and "& 15) == 0" in kernel.source


@pytest.mark.parametrize("tile", [(64, 32), (32, 32)])
def test_a_view_staged_by_cp_async_on_small_tiles(pin, tile):
    """Heads transposed back to (tokens, heads x dh) as A (mma_views.py), on a small tile."""
    pin(tile)
    g = GraphBuilder()
    h = g.input("h", (2, 4, 24, 16), "f16")                      # (batch, heads, seq, dh)
    w = g.input("w", (64, 48), "f16")
    t = g.add("reshape", g.add("transpose", h, permutation=(0, 2, 1, 3)), shape=(48, 64))
    d = g.add("dot_general", t, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    graph = g.build([g.add("convert", d, dtype="f32")])
    ins, seed = _inputs([(2, 4, 24, 16), (64, 48)])
    kernel = _check(graph, ins, tile, seed=seed)
    assert "Vr0" in kernel.source and "const unsigned A_s =" in kernel.source


@pytest.mark.parametrize("tile", [(32, 64), (32, 32)])
def test_a_norm_prologue_covers_the_tiles_rows(pin, tile):
    """An RMSNorm in the GEMM's prologue: its pre-pass computes the statistics of the block's bm rows."""
    from tests.helpers.norms import matmul, rms_norm
    pin(tile)
    b = GraphBuilder()
    x, g, w = b.input("x", (70, 48), "f16"), b.input("g", (48,), "f16"), b.input("w", (48, 72), "f16")
    graph = b.build([b.add("convert", matmul(b, rms_norm(b, x, g), w), dtype="f32")])
    ins, seed = _inputs([(70, 48), (48,), (48, 72)])
    kernel = _check(graph, ins, tile, seed=seed)
    assert "aotc_rs[" in kernel.source and f"aotc_r < {tile[0]};" in kernel.source


def test_the_sanitizer_finds_no_race_on_the_small_tiles(pin, monkeypatch):
    monkeypatch.setenv("AOTC_SANITIZE", "1")
    monkeypatch.setenv("AOTC_SANITIZE_ORDER", "reverse")
    for tile, (a_layout, b_layout) in zip(SMALL, [("mn", "mn"), ("k", "mn"), ("mn", "k")]):
        pin(tile)
        graph, shapes = gemm(a_layout, b_layout, 40, 72, 136)
        ins, seed = _inputs(shapes)
        _check(graph, ins, tile, seed=seed)


def test_a_gated_epilogue_keeps_the_64x64_tile():
    """SwiGLU over the GEMM's two column halves (codegen_gated.py's register layout): few blocks, yet 64x64."""
    from tests.kernels.test_codegen_gated import gated_mlp
    graph, shapes = gated_mlp(3, 40, 17, "f16", bias=True)
    ins, seed = _inputs(shapes, scale=0.5)
    kernel = _check(graph, ins, (64, 64), seed=seed)
    assert kernel.grid[:2] == (1, 1)


@pytest.mark.parametrize("tile", SMALL)
def test_no_bank_conflicts_on_the_small_tiles(pin, tile):
    """The profiling host build counts shared-memory wavefronts per phase: none replays, in either layout."""
    from aotc.fusion.regions import partition
    from aotc.kernels.host_compile import compile_host
    from aotc.kernels.host_exec import HostLibrary
    pin(tile)
    for layouts in (("k", "k"), ("mn", "mn")):
        graph, shapes = gemm(*layouts, 64, 64, 128)
        (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
        lib = HostLibrary(compile_host(codegen.module_source([kernel]), [kernel.name], profile=True))
        ins, _ = _inputs(shapes)
        out = np.full((64, 64), np.nan, np.float32)
        lib.take_profile()
        lib.launch(kernel.name, kernel.grid, kernel.block, [*ins, out])
        (c,) = lib.take_profile()
        assert c["shared_requests"] > 0 and c["shared_wavefronts"] == c["shared_phases"], (layouts, c)
        np.testing.assert_allclose(out, interpret(graph, ins)[0], rtol=3e-2, atol=3e-2)


def test_the_sm90_main_loop_of_every_tile():
    """The profile's measure on the cubin at BERT's batch-1 projection (128 x 768 x 768): every tile's K
    loop spills nothing and needs no more registers than 64x64; a tile with a 32-wide warp dimension issues
    >= 25% HMMA (MATH_SHARE_FOR_PEAK) in either B layout. 32x32's 16x16 warp tiles read one ldmatrix per
    mma (measured 24% with B k-major, 19% n-major): the price of 4x the blocks of 64x64, paid only where
    no larger tile fills half the SMs."""
    from aotc.fusion.regions import partition
    from aotc.kernels.nvrtc_compile import compile_device
    from aotc.kernels.resources import cubin_resources
    from aotc.profile import sass
    if sass.nvdisasm_path() is None:
        pytest.skip("nvdisasm is not installed")
    shares = {}
    saved = split_k.MMA_TILES
    try:
        for tile in saved:
            split_k.MMA_TILES = (tile,)
            for layout in ("k", "mn"):
                graph, _ = gemm("k", layout, 128, 768, 768)
                (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
                cubin = compile_device(codegen.module_source([kernel]), "sm_90")
                (mix,) = sass.cubin_mix(cubin).values()
                (res,) = cubin_resources(cubin).values()
                shares[tile, layout] = mix["tensor_share"]
                assert mix["local_ops"] == 0 and res.registers <= 128, (tile, layout, mix)
    finally:
        split_k.MMA_TILES = saved
    assert min(v for (tile, _), v in shares.items() if tile != (32, 32)) >= 0.25, shares
    assert shares[(32, 32), "k"] >= 0.23 and shares[(32, 32), "mn"] >= 0.18, shares


def test_the_policy_takes_the_largest_tile_that_fills_half_the_sms():
    t = split_k.choose_tiling
    assert (t("dot_mma", 1, 4096, 768, 768).bm, t("dot_mma", 1, 4096, 768, 768).bn) == (64, 64)
    assert t("dot_mma", 1, 128, 2304, 768) == split_k.Tiling(64, 64, 1, 768)    # BERT's QKV: 72 blocks
    assert t("dot_mma", 1, 128, 768, 768) == split_k.Tiling(32, 32, 1, 768)     # its projections: 24 -> 96
    assert t("dot_mma", 1, 128, 768, 3072) == split_k.Tiling(32, 32, 1, 3072)
    # 64x64 gives 64 blocks; 64x32 128 and 32x64 112: the one that overhangs M and N least
    assert t("dot_mma", 1, 196, 1024, 256) == split_k.Tiling(32, 64, 1, 256)
    wide = t("dot_mma", 1, 128, 4096, 64)
    assert (wide.bm, wide.bn) == (64, 64)


def _traffic(b, m, n, k):
    return 2 * b * (m * k + k * n) + 4 * b * m * n


def test_the_policy_splits_the_smallest_tile_in_whole_stages_within_the_partials_share():
    t = split_k.choose_tiling
    late = (1, 49, 512, 4608)                   # ResNet-50's stage-4 3x3 conv at batch 1: 32 blocks of 32x32
    tiling = t("dot_mma", *late, traffic=_traffic(*late))
    assert (tiling.bm, tiling.bn) == (32, 32) and tiling.splits == 2 and tiling.per % 64 == 0
    partials = 2 * 4 * 49 * 512 * tiling.splits
    assert partials <= split_k.SIMT_PARTIALS_SHARE * _traffic(*late)
    short = (1, 49, 512, 320)                   # K under two splits of MIN_MMA_SPLIT_K: no split
    assert t("dot_mma", *short, traffic=_traffic(*short)).splits == 1
    tiny = (1, 30, 40, 2000)                    # 2 blocks of 32x32; the partials cap the split at 2
    assert t("dot_mma", *tiny, traffic=_traffic(*tiny)) == split_k.Tiling(32, 32, 2, 1024)
    assert t("dot_mma", *tiny) == split_k.Tiling(32, 32, 2000 // split_k.MIN_MMA_SPLIT_K, 320)  # no cap
    assert t("dot_mma", *late, traffic=_traffic(*late), may_split=False).splits == 1
    assert t("dot_mma", None, 49, 512, 4608) == split_k.Tiling(64, 64, 1, 4608)


def test_bert_layer_gemms_keep_their_k_loops_lean_on_sm90(tmp_path):
    """One BERT-base layer at batch 1 in fp16: with no occupancy for ptxas to chase (dot_mma.cu's
    __launch_bounds__(128, 1)) it keeps the swizzled ldmatrix addresses in registers. Chasing it, it
    recomputed them from %tid inside the K loop: HMMA shares 12%, 14%, 26%, 37% where they are now
    16%, 20%, 38%, 38%."""
    import aotc
    from aotc.bench.models.real import bert_base
    from aotc.package.engine_format import read_engine
    from aotc.profile import sass
    if sass.nvdisasm_path() is None:
        pytest.skip("nvdisasm is not installed")
    model, _ = bert_base(batch=1, seq=128, layers=1)
    aotc.compile(model, str(tmp_path / "bert.engine"), arch=["sm_90"], precision="fp16")
    plan = read_engine((tmp_path / "bert.engine").read_bytes())
    shares = sorted(m["tensor_share"] for n, m in sass.cubin_mix(plan.cubins["sm_90"]).items()
                    if n.startswith("aotc_dot_mma_"))
    assert len(shares) == 4 and shares[0] >= 0.15 and shares[-2] >= 0.33, shares


def _store_efficiency(graph, kernel, ins, out_shape):
    """The profiling host build's store efficiency of one launch, and its output (poisoned first)."""
    from aotc.kernels.host_compile import compile_host
    from aotc.kernels.host_exec import HostLibrary
    lib = HostLibrary(compile_host(codegen.module_source([kernel]), [kernel.name], profile=True))
    out = np.full(out_shape, np.nan, np.float32)
    lib.take_profile()
    lib.launch(kernel.name, kernel.grid, kernel.block, [*ins, out])
    (c,) = lib.take_profile()
    assert c["shared_wavefronts"] == c["shared_phases"], c
    return c["store_bytes"] / (32 * c["store_sectors"]), out


def test_the_row_tile_matches_the_interpreter(pin):
    """split_k.ROW_TILE (32x128, B k-major: its only layout): M and N cut the tile, K the stage, batch 2, a
    relu epilogue; the grid's x walks M (mma_staging.m_fastest) and ptxas is held to 128 registers."""
    pin(split_k.ROW_TILE)
    graph, shapes = gemm("mn", "k", 70, 300, 136, batch=(2,))
    ins, seed = _inputs(shapes)
    kernel = _check(graph, ins, split_k.ROW_TILE, seed=seed)
    assert kernel.grid == (3, 3, 2) and "__launch_bounds__(128, 4)" in kernel.source
    assert "m0 = (int)blockIdx.x * 32, n0 = (int)blockIdx.y * 128" in kernel.source


@pytest.mark.parametrize("n,tile,want", [(1027, (32, 128), 16 / 17), (1027, (64, 64), 8 / 9), (1024, (64, 64), 1.0),
                                         (131, (32, 128), 0.91)])
def test_rows_off_the_sector_grid_store_whole_windows(pin, n, tile, want):
    """An f32 output of N = 1027 (rows start off the 32-byte grid, as GPT-2's 50257 do): its warps store
    32-element windows that start on the grid, so a 128-wide tile row touches 17 sectors for 16 filled and a
    64-wide one 9 for 8; 32-element pieces of the rows touched 5 sectors for 4 (81%). The tile that N cuts
    keeps the plain order (N = 1027 cuts 3 columns off the last), and nothing conflicts in shared memory."""
    from aotc.fusion.regions import partition
    pin(tile)
    graph, shapes = gemm("k", "k", 96, n, 64)
    (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
    assert ("% 8)" in kernel.source) == (n % 8 != 0)          # the sector windows: f32, 8 a sector
    ins, seed = _inputs(shapes)
    eff, out = _store_efficiency(graph, kernel, ins, (96, n))
    assert abs(eff - want) < 0.01, (tile, eff)
    np.testing.assert_allclose(out, interpret(graph, ins)[0], rtol=3e-2, atol=3e-2, err_msg=f"seed {seed}")


def test_gpt2s_lm_head_takes_the_row_tile():
    """128 x 50257 x 768 with the tied embedding as B (k-major): 32x128 blocks, x walking M. The same GEMM
    on the grid (N = 50176), with B n-major, or compute-bound (batch 32's 4096 rows) keeps 64x64."""
    from aotc.fusion.regions import partition

    def tile_of(b_layout, n, m=128):
        graph, _ = gemm("k", b_layout, m, n, 768)
        (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
        return re.search(r"block tile (\d+)x(\d+)", kernel.source).groups(), kernel.grid
    assert tile_of("k", 50257) == (("32", "128"), (4, 393, 1))
    assert tile_of("k", 50176) == (("64", "64"), (784, 2, 1))
    assert tile_of("mn", 50257) == (("64", "64"), (786, 2, 1))
    assert tile_of("k", 50257, m=4096) == (("64", "64"), (786, 64, 1))
