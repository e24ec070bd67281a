import numpy as np

from aotc.hlo_passes import layout
from aotc.hlo_passes.pipeline import run_pipeline
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.graph import GraphBuilder
from aotc.bench.models.small import cnn, resnet_bottleneck, transformer_block
from tests.helpers.rng import fresh_rng, random_array

from ._graphs import assert_same_fresh, assert_unchanged, counts, scalar_constant, snapshot

CONV = dict(strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1)


def _block(b, rng, x, c):
    """conv -> bias -> relu, NCHW."""
    y = b.add("convolution", x, b.constant(random_array(rng, (c, x.shape[1], 3, 3)), "w"), **CONV)
    y = b.add("add", y, b.add("broadcast_in_dim", b.constant(random_array(rng, (c,)), "bias"), shape=y.shape,
                              broadcast_dimensions=(1,)))
    zero = b.add("broadcast_in_dim", scalar_constant(b, 0.0), shape=y.shape, broadcast_dimensions=())
    return b.add("max", y, zero)


def _resnet_like():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 3, 9, 11))
    h = _block(b, rng, x, 4)
    h = b.add("reduce_window", h, kind="max", window=(1, 1, 3, 3), strides=(1, 1, 2, 2),
              padding=((0, 0), (0, 0), (1, 1), (1, 1)), dilations=(1, 1, 1, 1))
    r = _block(b, rng, _block(b, rng, h, 4), 4)
    h = b.add("add", h, r)                                                   # residual
    cat = b.add("concatenate", h, _block(b, rng, h, 2), dimension=1)         # (2, 6, 5, 6)
    pooled = b.add("reduce", cat, axes=(2, 3), kind="sum")                    # (2, 6): a sink
    flat = b.add("reshape", b.add("slice", cat, start=(0, 0, 0, 0), limit=(2, 6, 5, 6), stride=(1, 2, 1, 1)),
                 shape=(2, 90))                                               # NCHW order needed here
    return b.build([pooled, flat])


def test_conv_stack_runs_channels_last_with_boundary_transposes_only():
    g = _resnet_like()
    snap = snapshot(g)
    out = layout.run(g)
    verify(out)
    assert_unchanged(g, snap)
    convs = [n for n in out.nodes if n.op == "convolution"]
    assert len(convs) == 4 and all(n.attrs["layout"] == "NHWC" for n in convs)
    assert all(n.inputs[1].shape[-1] == n.inputs[0].shape[-1] for n in convs[:1])    # OHWI weights
    # one transpose in (the input), one out (the slice feeding the reshape); the reduce reads NHWC
    assert counts(out)["transpose"] == 2 and layout.last_stats["transposes"] == 2
    first = out.nodes[0]
    assert first.op == "transpose" and first.inputs[0] is g.inputs[0]
    back = [n for n in out.nodes if n.op == "transpose"][1]
    assert [u.op for u in out.users()[back.output]] == ["reshape"]
    red = next(n for n in out.nodes if n.op == "reduce")
    assert red.attrs["axes"] == (1, 2) and red.output is g.outputs[0]
    assert out.outputs == g.outputs
    assert_same_fresh(g, out, rtol=1e-6, atol=1e-6)


def test_graph_output_inside_the_stack_gets_one_transpose_back():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, 2, 5, 5))
    h = _block(b, rng, x, 3)
    g = b.build([h, b.add("exp", h)])
    out = layout.run(g)
    assert counts(out)["transpose"] == 3         # in; h out; exp out
    assert out.outputs == g.outputs
    assert_same_fresh(g, out, rtol=1e-6, atol=1e-6)


def test_resnet_has_no_transpose_inside_the_conv_stack():
    g = import_onnx(resnet_bottleneck()[0])
    out, _ = run_pipeline(g, layout="nhwc")
    ts = [n for n in out.nodes if n.op == "transpose"]
    assert len(ts) == 1 and ts[0].inputs[0] is out.inputs[0]     # only the image, at the boundary
    assert counts(out)["convolution"] == 53
    assert all(n.attrs.get("layout") == "NHWC" for n in out.nodes if n.op == "convolution")
    assert all(n.attrs["window"] == (1, 3, 3, 1) for n in out.nodes if n.op == "reduce_window")
    nchw, _ = run_pipeline(g, layout="nchw")
    assert "transpose" not in counts(nchw) and counts(nchw)["convolution"] == 53
    assert_same_fresh(nchw, out, rtol=1e-4, atol=1e-5, draws=1)


def test_cnn_matches_in_both_layouts():
    g = import_onnx(cnn()[0])
    out, _ = run_pipeline(g, layout="nhwc")
    assert counts(out)["transpose"] == 1
    assert_same_fresh(g, out, rtol=1e-5, atol=1e-6)


def test_must_not_fire_without_convolutions():
    g = import_onnx(transformer_block()[0])
    out = layout.run(g)
    assert list(out.nodes) == list(g.nodes) and layout.last_stats["transposes"] == 0
    b = GraphBuilder()           # pooling alone stays NCHW: no conv to pay for the conversions
    x = b.input("x", (1, 3, 8, 8))
    p = b.add("reduce_window", x, kind="max", window=(1, 1, 2, 2), strides=(1, 1, 2, 2),
              padding=((0, 0),) * 4, dilations=(1,) * 4)
    g2 = b.build([p])
    assert list(layout.run(g2).nodes) == list(g2.nodes)
    # an already channels-last conv is left as it is
    b = GraphBuilder()
    x = b.input("x", (1, 5, 5, 2))
    w = b.constant(np.ones((3, 3, 3, 2), np.float32))
    g3 = b.build([b.add("convolution", x, w, layout="NHWC", **CONV)])
    assert list(layout.run(g3).nodes) == list(g3.nodes)
