"""Chains of tiny anchors (squeeze-excite's pool and two 1x1 convs) fused into one region."""
import numpy as np

from aotc.fusion import chains
from aotc.fusion.regions import check_partition, partition
from aotc.ir.graph import GraphBuilder


def squeeze_excite(b, x, squeeze: int, dtype=np.float32, rng=None):
    """mean over H, W -> 1x1 conv + bias + swish -> 1x1 conv + bias -> sigmoid, as [N, 1, 1, C]."""
    n, h, w, c = x.shape
    draw = (lambda shape: rng.standard_normal(shape).astype(dtype)) if rng is not None \
        else (lambda shape: np.ones(shape, dtype))
    pooled = b.add("reduce", x, kind="sum", axes=(1, 2))
    inv = b.add("broadcast_in_dim", b.constant(np.asarray(1.0 / (h * w), dtype)), shape=(n, c), broadcast_dimensions=())
    mean = b.add("reshape", b.add("mul", pooled, inv), shape=(n, 1, 1, c))

    def conv(v, out):
        y = b.add("convolution", v, b.constant(draw((out, 1, 1, v.shape[-1]))), strides=(1, 1),
                  padding=((0, 0), (0, 0)), dilations=(1, 1), groups=1, layout="NHWC")
        return b.add("add", y, b.add("broadcast_in_dim", b.constant(draw((out,))), shape=y.shape,
                                     broadcast_dimensions=(3,)))
    h1 = conv(mean, squeeze)
    h1 = b.add("mul", h1, b.add("logistic", h1))
    return b.add("logistic", conv(h1, c))


def test_pool_and_two_gemvs_are_one_chain():
    b = GraphBuilder()
    x = b.input("x", (2, 6, 6, 32))
    g = b.build([b.add("mul", x, b.add("broadcast_in_dim", b.add("reshape", squeeze_excite(b, x, 8), shape=(2, 32)),
                                        shape=x.shape, broadcast_dimensions=(0, 3)))])
    regions = partition(g)
    check_partition(g, regions)
    (chain,) = [r for r in regions if r.kind == "chain"]
    assert [a.op for a, _ in chain.payload.phases] == ["reduce", "convolution", "convolution"]
    assert [r.kind for r in regions] == ["chain", "loop"]


def test_a_large_pool_keeps_its_own_kernel(monkeypatch):
    """One block per image would stream the whole feature map alone: the chain starts at the first GEMV."""
    monkeypatch.setattr(chains, "MAX_POOLED_PER_IMAGE", 100)
    b = GraphBuilder()
    x = b.input("x", (2, 6, 6, 32))
    g = b.build([squeeze_excite(b, x, 8)])
    regions = partition(g)
    check_partition(g, regions)
    assert [r.kind for r in regions] == ["reduction", "chain"]
    assert [a.op for a, _ in regions[1].payload.phases] == ["convolution", "convolution"]


def test_a_phase_result_read_elsewhere_breaks_the_chain():
    b = GraphBuilder()
    x = b.input("x", (2, 6, 6, 32))
    pooled = b.add("reduce", x, kind="sum", axes=(1, 2))
    y = b.add("convolution", b.add("reshape", pooled, shape=(2, 1, 1, 32)), b.constant(np.ones((8, 1, 1, 32), np.float32)),
              strides=(1, 1), padding=((0, 0), (0, 0)), dilations=(1, 1), groups=1, layout="NHWC")
    g = b.build([y, b.add("exp", pooled)])
    regions = partition(g)
    check_partition(g, regions)
    assert "chain" not in [r.kind for r in regions]
