"""channel-pad: f16/bf16 NHWC convs with C % 8 != 0 read zero-padded (or row-folded) channels; before == after."""
import numpy as np
import pytest

from aotc.hlo_passes import channel_pad
from aotc.hlo_passes.pipeline import run_pipeline
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder
from tests.helpers.rng import fresh_rng, random_array

from ._graphs import assert_same_fresh, assert_unchanged, counts, snapshot


def _nhwc_conv(xshape, wshape, dtype="f16", groups=1, share=False, **attrs):
    """x (N, H, W, C) -> conv (O, KH, KW, C/groups) [-> a second conv on the same x] -> relu."""
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", xshape, dtype)
    conv = dict(strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=groups, layout="NHWC")
    conv.update(attrs)
    w = b.constant(random_array(rng, wshape).astype(np.float16 if dtype == "f16" else np.float32), "w")
    ys = [b.add("convolution", x, w, **conv)]
    if share:
        w2 = b.constant(random_array(rng, wshape).astype(np.float16), "w2")
        ys.append(b.add("convolution", x, w2, **conv))
    return b.build([b.add("abs", y) for y in ys])


@pytest.mark.parametrize("cin", [1, 3, 5])
def test_pads_input_and_weights_to_eight_channels(cin):
    g = _nhwc_conv((2, 9, 11, cin), (6, 9, 9, cin), strides=(1, 2), padding=((3, 2), (3, 3)), dilations=(1, 2))
    snap = snapshot(g)
    out = channel_pad.run(g)
    verify(out)
    assert_unchanged(g, snap)
    (conv,) = [n for n in out.nodes if n.op == "convolution"]
    (pad,) = [n for n in out.nodes if n.op == "pad"]
    x, w = conv.inputs
    assert x is pad.outputs[0] and pad.inputs[0] is g.inputs[0]
    assert pad.attrs["low"] == (0, 0, 0, 0) and pad.attrs["high"] == (0, 0, 0, 8 - cin)
    assert x.shape == (2, 9, 11, 8) and w.shape == (6, 9, 9, 8)
    assert not out.constants[w][..., cin:].any()
    assert float(out.constants[pad.inputs[1]]) == 0.0
    assert conv.outputs == g.nodes[0].outputs and out.outputs == g.outputs
    assert channel_pad.last_stats == {"convs": 1, "pads": 1, "folds": 0}
    assert_same_fresh(g, out, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("cin,kh,pads", [(3, 7, (3, 3)), (2, 9, (4, 2)), (4, 6, (1, 2))])
def test_stride_two_folds_row_pairs_into_the_channels(cin, kh, pads):
    """ResNet's stem and friends: rows 2i, 2i + 1 become folded row i's 2 x 4 channels; stride 1 over H."""
    g = _nhwc_conv((2, 17, 13, cin), (6, kh, 7, cin), strides=(2, 2), padding=(pads, (3, 3)))
    out = channel_pad.run(g)
    verify(out)
    (conv,) = [n for n in out.nodes if n.op == "convolution"]
    oh = g.outputs[0].shape[1]
    khf = -(-kh // 2)
    assert [n.op for n in out.nodes] == ["pad", "reshape", "transpose", "reshape", "convolution", "abs"]
    pad = out.nodes[0]
    rows = 2 * (oh + khf - 1)                                   # padded rows: OH + KH' - 1 folded ones
    assert pad.attrs["low"] == (0, pads[0], 0, 0) and pad.attrs["high"] == (0, rows - 17 - pads[0], 0, 4 - cin)
    assert conv.inputs[0].shape == (2, oh + khf - 1, 13, 8) and conv.inputs[1].shape == (6, khf, 7, 8)
    assert conv.attrs["strides"] == (1, 2) and conv.attrs["padding"] == ((0, 0), (3, 3))
    assert channel_pad.last_stats == {"convs": 1, "pads": 1, "folds": 1}
    assert_same_fresh(g, out, rtol=1e-3, atol=1e-3)


def test_a_fold_that_would_drop_rows_pads_channels_only():
    """KH 6, stride 2 over 11 unpadded rows: OH 3 covers rows 0-9, and 2 x (OH + 3 - 1) = 10 < 11."""
    g = _nhwc_conv((1, 11, 11, 3), (4, 6, 6, 3), strides=(2, 2), padding=((0, 0), (0, 0)))
    out = channel_pad.run(g)
    assert counts(out).get("reshape", 0) == 0 and channel_pad.last_stats == {"convs": 1, "pads": 1, "folds": 0}
    assert_same_fresh(g, out, rtol=1e-3, atol=1e-3)


def test_convs_sharing_an_input_share_one_pad():
    g = _nhwc_conv((1, 8, 8, 3), (4, 5, 5, 3), share=True)
    out = channel_pad.run(g)
    assert counts(out)["pad"] == 1 and channel_pad.last_stats == {"convs": 2, "pads": 1, "folds": 0}
    assert_same_fresh(g, out, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("why,graph", [
    ("f32", lambda: _nhwc_conv((1, 8, 8, 3), (4, 7, 7, 3), dtype="f32")),
    ("aligned", lambda: _nhwc_conv((1, 8, 8, 16), (4, 3, 3, 16))),
    ("small K: 3x3x3 = 27 taps x channels", lambda: _nhwc_conv((1, 8, 8, 3), (4, 3, 3, 3))),
    ("grouped", lambda: _nhwc_conv((1, 8, 8, 6), (6, 5, 5, 3), groups=2)),
])
def test_leaves_alone(why, graph):
    g = graph()
    out = channel_pad.run(g)
    assert out.nodes == g.nodes, why
    assert channel_pad.last_stats == {"convs": 0, "pads": 0, "folds": 0}


def test_pipeline_pads_the_fp16_stem_only():
    """An NCHW f32 model with a 7x7 stem on 3 channels and a 3x3 conv on 5: fp16 pads the stem (147 taps x
    channels) and leaves the 3x3 (45, one pipeline stage); fp32 pads neither."""
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 3, 16, 16))
    stem = dict(strides=(2, 2), padding=((3, 3), (3, 3)), dilations=(1, 1), groups=1)
    h = b.add("convolution", x, b.constant(random_array(rng, (5, 3, 7, 7)), "w0"), **stem)
    h = b.add("convolution", b.add("abs", h), b.constant(random_array(rng, (8, 5, 3, 3)), "w1"),
              **dict(stem, strides=(1, 1), padding=((1, 1), (1, 1))))
    g = b.build([h])
    f32, _ = run_pipeline(g)
    assert "pad" not in counts(f32)
    f16, report = run_pipeline(g, precision="fp16")
    assert "channel-pad" in [r.name for r in report.passes]
    convs = [n for n in f16.nodes if n.op == "convolution"]
    assert [n.inputs[0].shape[-1] for n in convs] == [8, 5] and counts(f16)["pad"] == 1
    assert convs[0].inputs[1].shape == (5, 4, 7, 8)               # the stem folded row pairs
    unpadded, _ = run_pipeline(g, precision="fp16", disabled=["channel-pad"])
    assert "pad" not in counts(unpadded)
    # Only f32 sum orders differ, but one stem output (|h| ~ 50, f16 ulp 1/32) that rounds the other way moves
    # every 3x3 output over it by ulp * |w1|: up to 0.04 even where that output is near 0 (0.125 worst over 600
    # draws). A wrong pad or fold moves outputs by their scale (~100), so 0.25 still catches it.
    assert_same_fresh(unpadded, f16, rtol=1e-2, atol=0.25)
