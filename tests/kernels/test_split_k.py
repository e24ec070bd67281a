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


@pytest.mark.parametrize("geometry,tile,splits", [
    ((1, 128, 2304, 768), (64, 64), 1),     # BERT's QKV at seq 128: 72 tiles of 64x64 fill half the SMs
    ((1, 128, 768, 768), (32, 32), 1),      # BERT's attention output: 24 of 64x64, 48 of 64x32, 96 of 32x32
    ((1, 3136, 64, 576), (64, 32), 1),      # ResNet-50's first 3x3 convs: 49 of 64x64, 98 of 64x32
    ((1, 784, 128, 1152), (32, 32), 1),     # stage 2: 26 of 64x64, 52 of 64x32, 50 of 32x64, 100 of 32x32
    ((1, 49, 512, 4608), (16, 32), 2),      # the last 3x3 convs: 64 blocks even at 16x32; split in two
    ((1, 49, 512, 200), (16, 32), 1),       # K too short to split
    ((1, 3, 3, 50000), (16, 32), 16),       # one tiny tile, deep K: the partials cost nothing
])
def test_tiling_takes_the_largest_tile_that_fills_half_the_sms(geometry, tile, splits):
    b, m, n, k = geometry
    traffic = _gemm_traffic(*geometry)
    t = choose_tiling("dot", *geometry, traffic=traffic)
    assert (t.bm, t.bn, t.splits) == tile + (splits,)
    assert (t.splits - 1) * t.per < k <= t.splits * t.per and (t.splits == 1 or t.per % 16 == 0)
    blocks = _blocks(t, b, m, n)
    larger = [Tiling(*s) for s in SIMT_TILES if s[0] * s[1] > t.bm * t.bn]
    assert all(2 * _blocks(s, b, m, n) < TARGET_SMS for s in larger)     # no larger tile would have filled
    if t.splits > 1 or 2 * blocks < TARGET_SMS:                          # only the smallest tile splits
        assert (t.bm, t.bn) == SIMT_TILES[-1]
    if t.splits > 1:
        assert blocks * t.splits <= TARGET_SMS
        assert 2 * 4 * t.splits * b * m * n <= split_k.SIMT_PARTIALS_SHARE * traffic


def test_tiling_keeps_a_splits_partials_within_their_share():
    """ResNet-50's stage-4 1x1 conv (49 pixels, 2048 -> 512): 64 blocks of 16x32, two splits fill half
    the SMs at 8.5% of the traffic in partials; a third split would pass 10%."""
    geometry = (1, 49, 512, 2048)
    traffic = _gemm_traffic(*geometry)
    t = choose_tiling("dot", *geometry, traffic=traffic)
    assert t.splits == 2 and 2 * 4 * 3 * 49 * 512 > split_k.SIMT_PARTIALS_SHARE * traffic
    assert choose_tiling("dot", *geometry, traffic=traffic, may_split=False) == Tiling(16, 32, 1, 2048)
    deep = (1, 49, 512, 4608)            # the 3x3 conv could afford 5 splits, but 2 already fill half the SMs
    assert choose_tiling("dot", *deep, traffic=_gemm_traffic(*deep)).splits == 2
    assert choose_tiling("dot", 1, 49, 70, 783, traffic=_gemm_traffic(1, 49, 70, 783)).splits == 1   # K too short


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
    tol = 2e-2 if dtype in ("f16", "bf16") else (2e-3 if precision else 1e-5)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol,
                               err_msg=f"seed {seed}")
    np.testing.assert_allclose(got.astype(np.float32), whole.astype(np.float32), rtol=tol, atol=tol)
    (again,), _, _ = run_on_host(graph, ins)
    np.testing.assert_array_equal(got, again)         # partials add in split order: deterministic


def test_split_implicit_gemm_conv():
    """ResNet's late 3x3 convs: few output pixels, K = 9 * C; NHWC implicit GEMM, split."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x, w = b.input("x", (1, 5, 5, 512)), b.input("w", (40, 3, 3, 512))
    y = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1),
              groups=1, layout="NHWC")
    graph = b.build([b.add("tanh", y)])
    ins = [random_array(rng, (1, 5, 5, 512)) / 30, random_array(rng, (40, 3, 3, 512))]
    (got,), kernels, counters = run_on_host(graph, ins, runs=2)
    # 16x32 tiles: 4 blocks; K = 4608: the 737 KB of weights afford 9 splits of 8 KB partials within 10%
    assert kernels[0].block == (32, 1, 1) and kernels[0].splits == 9 and not counters.any()
    np.testing.assert_allclose(got, interpret(graph, ins)[0], rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")
