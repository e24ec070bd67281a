"""dot.cu's block tiles (64x64, 64x32, 32x64, 32x32, 16x32) on the host emulation against the interpreter.

Each test forces one tile (split_k.SIMT_TILES holds only it), with sizes that cut the tiles on every
edge, batches, B read along k or along n, fused prologues and epilogues, and the split-K handoff on the
smaller tiles. Outputs start poisoned (NaN), so an element no block writes fails."""
import numpy as np
import pytest

from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen, split_k
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.host_run import run_on_host
from tests.helpers.norms import layer_norm, matmul
from tests.helpers.rng import fresh_rng, random_array

TILES = [(64, 64), (64, 32), (32, 64), (32, 32), (16, 32)]


@pytest.fixture
def only_tile(monkeypatch):
    def force(tile):
        monkeypatch.setattr(split_k, "SIMT_TILES", (tile,))
    return force


def _check(graph, ins, seed, tile, tol=1e-5, splits=None):
    want = interpret(graph, ins)
    got, kernels, counters = run_on_host(graph, ins)
    dots = [k for k in kernels if k.name.startswith("aotc_dot_")]
    assert dots, [k.name for k in kernels]
    for k in dots:
        assert k.block == (tile[0] * tile[1] // 16, 1, 1) and f"Block tile {tile[0]}x{tile[1]}" in k.source
        if splits is not None:
            assert (k.splits > 1) == splits
    assert not counters.any()
    for g, w in zip(got, want):
        assert np.isfinite(g).all(), f"unwritten output elements (seed {seed})"
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"tile {tile}, seed {seed}")
    return dots


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batched_gemm_with_bias_relu_epilogue(only_tile, tile, transpose_b):
    """Batch 3, M/N/K that cut every tile edge; B read along n (row-major weight) or along k (transposed)."""
    only_tile(tile)
    rng, seed = fresh_rng()
    m, n, k = 45, 71, 37
    b = GraphBuilder()
    a = b.input("a", (3, m, k))
    w = b.input("w", (3, n, k) if transpose_b else (3, k, n))
    wk = b.add("transpose", w, permutation=(0, 2, 1)) if transpose_b else w
    d = b.add("dot_general", a, wk, lhs_batch=(0,), rhs_batch=(0,), lhs_contract=(2,), rhs_contract=(1,))
    bias = b.input("bias", (n,))
    y = b.add("add", d, b.add("broadcast_in_dim", bias, shape=d.shape, broadcast_dimensions=(2,)))
    zero = b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=d.shape, broadcast_dimensions=())
    graph = b.build([b.add("max", y, zero)])
    ins = [random_array(rng, (3, m, k)), random_array(rng, (3, n, k) if transpose_b else (3, k, n)),
           random_array(rng, (n,))]
    (dot,) = _check(graph, ins, seed, tile, splits=False)
    assert compile_device(codegen.module_source([dot]), "sm_90")[:4] == b"\x7fELF"      # the GPU build too


@pytest.mark.parametrize("tile", TILES)
def test_layer_norm_prologue_rows_follow_the_tile(only_tile, tile):
    """A LayerNorm computed in the lhs loads: the pre-pass covers exactly the tile's rows (M = 70 leaves
    a partial last tile)."""
    only_tile(tile)
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (70, 50))
    y = layer_norm(b, x, b.input("g", (50,)), b.input("beta", (50,)))
    graph = b.build([b.add("tanh", matmul(b, y, b.input("w", (50, 33))))])
    ins = [random_array(rng, (70, 50), low=-3, high=5), random_array(rng, (50,)), random_array(rng, (50,)),
           random_array(rng, (50, 33))]
    (dot,) = _check(graph, ins, seed, tile, tol=2e-4)
    assert f"aotc_rs[2][{tile[0]}]" in dot.source


@pytest.mark.parametrize("tile", [(64, 32), (32, 64), (32, 32), (16, 32)])
def test_split_k_handoff_on_the_smaller_tiles(only_tile, tile):
    """Few tiles and a deep K: the smaller tile still splits, its handoff tile sized to it."""
    only_tile(tile)
    rng, seed = fresh_rng()
    m, n, k = 49, 70, 3001
    b = GraphBuilder()
    a, w = b.input("a", (m, k)), b.input("w", (k, n))
    graph = b.build([b.add("tanh", matmul(b, a, w))])
    ins = [random_array(rng, (m, k)) / np.float32(np.sqrt(k)), random_array(rng, (k, n))]
    (dot,) = _check(graph, ins, seed, tile, splits=True)
    assert dot.grid[:2] == (-(-n // tile[1]), -(-m // tile[0]))


@pytest.mark.parametrize("tile", [(64, 32), (16, 32)])
def test_implicit_gemm_conv_on_a_smaller_tile(only_tile, tile):
    """An NHWC 3x3 conv (padding, stride 2) through the implicit-GEMM loads on a smaller tile."""
    only_tile(tile)
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x, w = b.input("x", (2, 9, 9, 24)), b.input("w", (40, 3, 3, 24))
    y = b.add("convolution", x, w, strides=(2, 2), padding=((1, 1), (1, 1)), dilations=(1, 1),
              groups=1, layout="NHWC")
    graph = b.build([b.add("tanh", y)])
    ins = [random_array(rng, (2, 9, 9, 24)) / 5, random_array(rng, (40, 3, 3, 24))]
    _check(graph, ins, seed, tile)


def test_policy_takes_the_largest_tile_of_the_most_partitions():
    """BERT-base's attention output projection at seq 128 (128 x 768 x 768), chosen by the policy: 24
    blocks of 64x64 keep 96 SM partitions, 48 of 64x32 (4 warps each) 192, as many as 32x32 or 16x32
    would, and a split's partials would pass 10% of its traffic: 64x32 unsplit, against the interpreter."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    a, w = b.input("a", (128, 768)), b.input("w", (768, 768))
    graph = b.build([b.add("tanh", matmul(b, a, w))])
    ins = [random_array(rng, (128, 768)) / np.float32(np.sqrt(768)), random_array(rng, (768, 768))]
    (dot,) = _check(graph, ins, seed, (64, 32), splits=False)
    assert dot.grid == (24, 2, 1)
    assert 4 * dot.grid[0] * dot.grid[1] == 192
