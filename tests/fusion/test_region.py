"""Region and its payload types: each kind carries its own, and a wrong one is refused."""
import pytest

from aotc.fusion.region import (AttentionPayload, ChainPayload, ConvPayload, GatedPayload, Region, dependents,
                                region_inputs)
from aotc.fusion.regions import check_partition, partition
from aotc.ir.graph import GraphBuilder
from tests.fusion.test_regions import _dw_block


def _tiny():
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    e = b.add("exp", x)
    t = b.add("tanh", e)
    g = b.build([b.add("add", t, x)])
    return g, x, g.nodes


def test_a_kind_takes_only_its_payload():
    g, x, nodes = _tiny()
    root = nodes[-1].outputs[0]
    assert Region("dot", root, nodes, payload=GatedPayload(3, 2)).payload_as(GatedPayload) == GatedPayload(3, 2)
    assert Region("dot", root, nodes).payload_as(GatedPayload) is None
    assert Region("loop", root, nodes).payload_as(ChainPayload) is None
    with pytest.raises(TypeError, match="a 'loop' region carries GatedPayload"):
        Region("loop", root, nodes, payload=GatedPayload(3, 2))
    with pytest.raises(TypeError, match="not ConvPayload"):
        Region("conv", root, nodes, payload=GatedPayload(3, 2))
    with pytest.raises(TypeError, match="an? 'attention' region carries NoneType, not AttentionPayload"):
        Region("attention", root, nodes)
    with pytest.raises(TypeError, match="not ChainPayload"):
        Region("chain", root, nodes, payload=AttentionPayload(None))


def test_inputs_and_dependents():
    g, x, (exp, tanh, add) = _tiny()
    region = Region("loop", add.outputs[0], [exp, tanh, add])
    assert region_inputs(region) == [x]
    assert region_inputs(Region("loop", x, [])) == [x]
    assert dependents([exp, tanh, add], {tanh}, g.producers()) == [add]


def test_a_pointwise_conv_names_the_depthwise_conv_it_computes():
    b = GraphBuilder()
    x = b.input("x", (1, 14, 14, 8))
    d, y = _dw_block(b, x, 48, 8)
    g = b.build([b.add("add", y, x)])
    (region,) = partition(g)
    check_partition(g, regions=[region])
    dw = region.payload_as(ConvPayload).depthwise
    assert dw.op == "convolution" and dw.attrs["groups"] == 48 and dw in region.nodes and dw is not region.anchor
