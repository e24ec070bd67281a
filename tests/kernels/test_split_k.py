"""Split-K GEMMs and convs on the host emulation: blocks of one tile really run concurrently there
(two worker threads), so the partial-sum handoff and the counter reset are exercised, not assumed."""
import ml_dtypes
import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels.split_k import SIMT_TILES, TARGET_SMS, Tiling, choose_splits, choose_tiling
from aotc.kernels import split_k
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array


@pytest.mark.parametrize("geometry,splits", [
    ((1, 49, 512, 4608), 16),       # ResNet-50 layer-4 3x3 conv at batch 1: 8 tiles
    ((1, 128, 768, 3072), 5),       # BERT-base fc2 at seq 128: 24 tiles, 120 blocks
    ((1, 128, 2304, 768), 1),       # BERT's QKV: 72 tiles already fill half the GPU
    ((1, 49, 512, 200), 1),         # K too short to split
    ((1, 3, 3, 50000), 16),
])
def test_split_choice(geometry, splits):
    s, per = choose_splits(*geometry)
    assert s == splits
    b, m, n, k = geometry
    assert per % 16 == 0 or s == 1
    assert (s - 1) * per < k <= s * per                  # no empty split
    if s > 1:
        assert b * -(-m // 64) * -(-n // 64) * s <= TARGET_SMS     # one wave, no half-empty second one


def _gemm_traffic(b, m, n, k, item=4):
    return item * (b * m * k + k * n + b * m * n)


@pytest.mark.parametrize("geometry,splits", [
    ((1, 49, 512, 4608), 9),        # ResNet-50's last 3x3 conv: 8 tiles x 9 fill half the SMs (16 before)
    ((1, 128, 768, 3072), 3),       # BERT-base fc2: 24 tiles x 3 (5 before)
    ((1, 3, 3, 50000), 16),         # a 3x3 tile's partials are nothing next to 50000 rows: all 16 splits
])
def test_split_stops_at_half_the_sms_unless_its_partials_are_cheap(geometry, splits):
    from aotc.kernels import split_k
    traffic = _gemm_traffic(*geometry)
    s, _ = choose_splits(*geometry, traffic=traffic)
    assert s == splits
    b, m, n, k = geometry
    tiles = b * -(-m // 64) * -(-n // 64)
    assert 2 * tiles * s >= TARGET_SMS or s == choose_splits(*geometry)[0]      # half a wave, or all it can
    partials = 2 * 4 * s * b * m * n
    assert partials <= split_k.PARTIALS_SHARE * traffic or 2 * tiles * (s - 1) < TARGET_SMS
    assert s <= choose_splits(*geometry)[0]


def _blocks(t: Tiling, b, m, n):
    return b * -(-m // t.bm) * -(-n // t.bn)


SLOTS = 4 * TARGET_SMS          # the GPU's SM partitions (profile/model.py's sm_fill)
HALF = SLOTS // 2


def _warps(bm, bn):
    return bm * bn // 512        # dot.cu: a thread per 4x4 micro-tile


def _useful(tile, splits, b, m, n):
    """Partitions busy on output elements that exist: B*M*N/(bm*bn) blocks of min(warps, 4), per split."""
    return splits * b * m * n * min(4, _warps(*tile)) / (tile[0] * tile[1])


def _allowed(tile, splits, b, m, n, k, traffic):
    """The caps a SIMT split must keep, restated: one wave of partitions, >= 128 K a split, at most 16
    splits, partials (written and read back) within 10% of the kernel's traffic, 8 MiB of workspace."""
    raw = _blocks(Tiling(*tile), b, m, n) * min(4, _warps(*tile))
    return splits == 1 or (raw * splits <= SLOTS and splits * 128 <= k and splits <= 16
                           and 2 * 4 * splits * b * m * n <= split_k.SIMT_PARTIALS_SHARE * traffic
                           and 4 * splits * b * m * n <= 8 << 20)


def _exhaustive_best(b, m, n, k, traffic):
    """Every tile at every allowed split: the most useful partitions (up to half the GPU's), then the
    fewest splits; the tiles that achieve it."""
    options = [(min(_useful(t, s, b, m, n), HALF), s, t) for t in SIMT_TILES for s in range(1, 17)
               if _allowed(t, s, b, m, n, k, traffic)]
    top = max(o[0] for o in options)
    fewest = min(s for u, s, _ in options if u == top)
    return top, fewest, {t for u, s, t in options if u == top and s == fewest}


@pytest.mark.parametrize("geometry,tile,splits", [
    ((1, 128, 2304, 768), (64, 64), 1),     # BERT's QKV: 72 blocks of 64x64 keep 288 partitions, over half
    ((1, 128, 3072, 768), (64, 64), 1),     # its fc1: 384
    ((1, 128, 768, 768), (64, 32), 1),      # its attention output: 24 blocks of 64x64 keep 96 partitions,
                                            # every smaller tile 192; two splits' 1.6 MB of partials are
                                            # half its 3.1 MB
    ((1, 128, 768, 3072), (64, 32), 1),     # fc2: the same 192, a split's partials 6.9% + 6.9% > 10%
    ((1, 3136, 64, 576), (64, 32), 1),      # ResNet-50's first 3x3 convs: 392 partitions
    ((1, 784, 128, 1152), (32, 64), 1),     # stage 2: 196 (32x64 overhangs M least); partials too dear
    ((1, 196, 256, 1024), (32, 64), 1),     # stage 3's 1x1: 98; partials too dear
    ((1, 49, 512, 4608), (64, 32), 5),      # stage 4's 3x3 as a GEMM: 49 a split, 5 within 10%
    ((1, 49, 512, 2048), (64, 32), 2),      # stage 4's 1x1 (2048 -> 512): a third split would pass 10%
    ((1, 49, 512, 200), (64, 32), 1),       # K too short to split
    ((1, 1, 1000, 2048), (16, 32), 16),     # the classifier: one row; a 16x32 block wastes the fewest
                                            # warps, so 16 splits stay within a wave (64x32: 4)
    ((1, 3, 3, 50000), (64, 32), 16),       # one tiny tile, deep K: the partials cost nothing
    ((1, 4096, 4096, 4096), (64, 64), 1),   # a large GEMM: 4096 blocks fill the GPU unsplit
    ((32, 128, 768, 768), (64, 64), 1),     # batch 32
])
def test_simt_tiling_fills_half_the_partitions_with_the_fewest_splits(geometry, tile, splits):
    b, m, n, k = geometry
    traffic = _gemm_traffic(*geometry)
    t = choose_tiling("dot", *geometry, traffic=traffic)
    assert (t.bm, t.bn, t.splits) == tile + (splits,)
    assert (t.splits - 1) * t.per < k <= t.splits * t.per and (t.splits == 1 or t.per % 16 == 0)
    assert _allowed(tile, t.splits, b, m, n, k, traffic)
    top, fewest, tiles = _exhaustive_best(b, m, n, k, traffic)
    assert min(_useful(tile, t.splits, b, m, n), HALF) == top and t.splits == fewest and tile in tiles
    assert all(t.bm * t.bn >= x[0] * x[1] for x in tiles)       # the largest of them: the best issue rate
    assert choose_tiling("dot", *geometry, traffic=traffic, may_split=False).splits == 1


def test_simt_tiling_splits_to_half_the_partitions_where_the_partials_are_cheap():
    """Uncapped (no traffic given), the late 49-pixel GEMM takes the fewest splits whose 49 useful
    partitions a split reach half the GPU's: 6, 294 partitions; 5 would keep 245."""
    t = choose_tiling("dot", 1, 49, 512, 4608)
    assert (t.bm, t.bn, t.splits) == (64, 32, 6) and _useful((64, 32), 6, 1, 49, 512) >= HALF
    assert _useful((64, 32), 5, 1, 49, 512) < HALF
    assert choose_tiling("dot", 1, 49, 70, 783, traffic=_gemm_traffic(1, 49, 70, 783)).splits == 1  # partials


def test_a_gated_epilogue_keeps_64x64_and_splits_it():
    """builder.simt_tiling passes only the 64x64 tile for a gated epilogue: it splits that one."""
    t = choose_tiling("dot", 1, 49, 512, 4608, traffic=_gemm_traffic(1, 49, 512, 4608), tiles=SIMT_TILES[:1])
    assert (t.bm, t.bn) == (64, 64) and t.splits == 5


def test_the_mma_rule_still_counts_blocks():
    """dot_mma's tiles are all 4 warps: its rule is by blocks, unchanged (test_mma_tiles.py has the rest)."""
    late = (1, 49, 512, 4608)
    t = choose_tiling("dot_mma", *late, traffic=2 * (49 * 4608 + 4608 * 512) + 4 * 49 * 512)
    assert (t.bm, t.bn, t.splits) == (32, 32, 2)


def test_the_tf32_template_keeps_its_tile_and_split():
    """dot_tf32 has one tile; dot_mma's tile variants have their tests in test_mma_tiles.py."""
    for geometry in [(1, 49, 512, 4608), (1, 128, 768, 3072), (1, 128, 2304, 768)]:
        traffic = _gemm_traffic(*geometry)
        t = choose_tiling("dot_tf32", *geometry, traffic=traffic)
        assert (t.bm, t.bn) == (64, 64) and (t.splits, t.per) == choose_splits(*geometry, traffic=traffic)


def test_dynamic_sizes_keep_the_largest_tile_unsplit():
    assert choose_tiling("dot", 1, None, 768, 768) == Tiling(64, 64, 1, 768)
    assert choose_tiling("dot_mma", None, 3, 3, 50000) == Tiling(64, 64, 1, 50000)


def _gemm(m, n, k, dtype="f32", precision=None, batch=()):
    b = GraphBuilder()
    a = b.input("a", batch + (m, k), dtype)
    w = b.input("w", batch + (k, n), dtype)
    bias = b.input("bias", (n,), dtype)
    nb = len(batch)
    kw = {"precision": precision} if precision else {}
    d = b.add("dot_general", a, w, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
              lhs_contract=(nb + 1,), rhs_contract=(nb,), **kw)
    y = b.add("add", d, b.add("broadcast_in_dim", bias, shape=d.shape, broadcast_dimensions=(nb + 1,)))
    zero = b.constant(np.zeros((), {"f16": np.float16, "bf16": ml_dtypes.bfloat16}.get(dtype, np.float32)))
    return b.build([b.add("max", y, b.add("broadcast_in_dim", zero, shape=d.shape, broadcast_dimensions=()))])


@pytest.mark.parametrize("m,n,k,dtype,precision,batch,kind", [
    (49, 70, 3001, "f32", None, (), "aotc_dot_"),          # K not a multiple of the split or the tile
    (3, 50, 4096, "f32", None, (2,), "aotc_dot_"),          # batched: counters per (batch, tile)
    (50, 70, 4000, "f16", None, (), "aotc_dot_mma_"),      # 6 blocks of 32x32; partials within 10% at 3
    (3, 40, 5000, "bf16", None, (2,), "aotc_dot_mma_"),     # batched, a K tail under a stage
    (50, 70, 1000, "f32", "tf32", (), "aotc_dot_tf32_"),
])
def test_split_gemm_matches_the_interpreter_and_resets_its_counters(m, n, k, dtype, precision, batch, kind):
    rng, seed = fresh_rng()
    graph = _gemm(m, n, k, dtype, precision, batch)
    np_dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}.get(dtype, np.float32)
    ins = [(random_array(rng, batch + (m, k)) / np.sqrt(k)).astype(np_dt),
           random_array(rng, batch + (k, n)).astype(np_dt), random_array(rng, (n,)).astype(np_dt)]
    want = interpret(graph, ins)[0]
    (got,), kernels, counters = run_on_host(graph, ins, runs=3)       # the same arena, three times
    (whole,), unsplit, _ = run_on_host(graph, ins, split_k=False)
    assert kernels[0].name.startswith(kind) and kernels[0].splits > 1 and unsplit[0].splits == 1
    assert kernels[0].grid[2] == max(1, int(np.prod(batch))) * kernels[0].splits
    assert not counters.any(), "a tile counter was left non-zero"
    # f32: sums of 3001-4096 products in the split's order and the interpreter's differ by up to ~7e-6 of an
    # output (0.7x of 1e-5 within 40 draws; the 4608-deep late conv passed it 1 in 400); a lost partial is ~1/4
    tol = 2e-2 if dtype in ("f16", "bf16") else (2e-3 if precision else 3e-5)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol,
                               err_msg=f"seed {seed}")
    np.testing.assert_allclose(got.astype(np.float32), whole.astype(np.float32), rtol=tol, atol=tol)
    (again,), _, _ = run_on_host(graph, ins)
    np.testing.assert_array_equal(got, again)         # partials add in split order: deterministic


def _stage4_conv(hw: int, cout: int):
    """tanh(3x3 conv) of a (1, hw, hw, 512) NHWC input to `cout` channels, as ResNet's stage 4 at batch 1:
    (graph, fresh inputs, seed)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x, w = b.input("x", (1, hw, hw, 512)), b.input("w", (cout, 3, 3, 512))
    y = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1),
              groups=1, layout="NHWC")
    graph = b.build([b.add("tanh", y)])
    return graph, [random_array(rng, (1, hw, hw, 512)) / 30, random_array(rng, (cout, 3, 3, 512))], seed


def test_split_implicit_gemm_conv():
    """ResNet's late 3x3 convs: few output pixels, K = 9 * C; NHWC implicit GEMM, split."""
    graph, ins, seed = _stage4_conv(5, 40)
    (got,), kernels, counters = run_on_host(graph, ins, runs=2)
    # 25 pixels x 40: a block of 32x64 (4 warps, the tile that overhangs least); K = 4608: the 737 KB of
    # weights afford 9 splits of 8 KB partials within 10%
    assert kernels[0].block == (128, 1, 1) and "Block tile 32x64" in kernels[0].source
    assert kernels[0].splits == 9 and not counters.any()
    np.testing.assert_allclose(got, interpret(graph, ins)[0], rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")


def test_policy_split_late_conv_matches_the_interpreter():
    """ResNet-50's stage-4 3x3 conv at batch 1, 128 of its 512 outputs: 49 pixels x 128, K = 4608, chosen
    by the policy (nothing forced): 4 blocks of 64x32 (16 partitions), split 4 ways (the 2.4 MB of
    traffic affords 4 splits of 50 KB partials within 10%)."""
    graph, ins, seed = _stage4_conv(7, 128)
    (got,), kernels, counters = run_on_host(graph, ins, runs=2)
    (k,) = kernels
    assert k.block == (128, 1, 1) and "Block tile 64x32" in k.source and k.splits == 4
    assert k.grid == (4, 1, 4) and not counters.any()
    # f32 sums of 4608 products in the split's order and the interpreter's differ by up to ~1e-5 of an
    # output (1 of 400 draws passed rtol 1e-5, the median 0.46x it); a lost partial is off by ~1/4
    np.testing.assert_allclose(got, interpret(graph, ins)[0], rtol=3e-5, atol=3e-5, err_msg=f"seed {seed}")


def _late_conv(stride: int, hw: int):
    b = GraphBuilder()
    x, w = b.input("x", (1, hw, hw, 512)), b.input("w", (512, 3, 3, 512))
    y = b.add("convolution", x, w, strides=(stride, stride), padding=((1, 1), (1, 1)), dilations=(1, 1),
              groups=1, layout="NHWC")
    bias = b.input("bias", (512,))
    y = b.add("add", y, b.add("broadcast_in_dim", bias, shape=y.shape, broadcast_dimensions=(3,)))
    zero = b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=y.shape, broadcast_dimensions=())
    return b.build([b.add("max", y, zero)])


@pytest.mark.parametrize("tile", SIMT_TILES)
def test_split_kernels_sharing_the_handoff_flag_spill_nothing(monkeypatch, tile):
    """ResNet-50's two stage-4 3x3 convs (stride 2 from 14x14, stride 1), split, in one module as the
    engine compiles them (aotc_split_last's flag then module-level): on sm_80 ptxas held the 64x32 pair
    to 80 registers and spilled one until their __launch_bounds__ stated 25% occupancy; every tile now
    spills nothing and keeps >= 25% occupancy on sm_80 and sm_90."""
    from aotc.fusion.regions import partition
    from aotc.kernels import codegen
    from aotc.kernels.nvrtc_compile import compile_device
    from aotc.kernels.resources import cubin_resources
    from aotc.profile.occupancy import occupancy
    monkeypatch.setattr(split_k, "SIMT_TILES", (tile,))
    kernels = [codegen.generate(g, r) for g in (_late_conv(2, 14), _late_conv(1, 7)) for r in partition(g)]
    assert all(k.splits > 1 and "aotc_split_last(" in k.source for k in kernels)
    for arch in ("sm_80", "sm_90"):
        res = cubin_resources(compile_device(codegen.module_source(kernels), arch))
        for k in kernels:
            assert res[k.name].local_bytes == 0, (tile, arch, res[k.name])
            assert occupancy(res[k.name], k.grid, k.block, 0, arch).occupancy >= 0.25, (tile, arch, res[k.name])
