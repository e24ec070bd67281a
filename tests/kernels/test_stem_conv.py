"""Stem convs (few input channels, NCHW f32 input) in fp16/bf16: channel-pad + the cp.async implicit GEMM.

hlo_passes/channel_pad.py pads C to 8 (or, at stride 2 over H, folds row pairs of 4 channels into 8); the
cast, NCHW->NHWC transpose and pad (and fold) become one loop kernel (16-byte stores, one pixel's 8 channels
a thread) and the conv stages the aligned tensor by cp.async.
Each case runs the optimized graph's kernels on the host emulation (poisoned arena, fresh random inputs)
against the interpreter of the same pipeline with channel-pad disabled, and checks which kernels ran.
"""
import numpy as np
import pytest

from aotc.hlo_passes.pipeline import run_pipeline
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array

TOL = {"fp16": 2e-2, "bf16": 8e-2}


def _stem(rng, cin, k, stride, pad, dil, residual):
    """NCHW f32: conv (no bias) -> batch norm as scale and shift (folded) -> [+ residual input] -> relu."""
    b = GraphBuilder()
    x = b.input("x", (2, cin, 29, 23))
    w = b.constant(random_array(rng, (24, cin, k, k)) * 0.3, "w")
    y = b.add("convolution", x, w, strides=stride, padding=pad, dilations=dil, groups=1)
    per_channel = dict(shape=y.shape, broadcast_dimensions=(1,))
    y = b.add("mul", y, b.add("broadcast_in_dim", b.constant(random_array(rng, (24,), low=0.5, high=1.5)),
                              **per_channel))
    y = b.add("add", y, b.add("broadcast_in_dim", b.constant(random_array(rng, (24,))), **per_channel))
    ins = [random_array(rng, (2, cin, 29, 23))]
    if residual:
        y = b.add("add", y, b.input("r", y.shape))
        ins.append(random_array(rng, y.shape))
    zero = b.add("broadcast_in_dim", b.constant(np.zeros((), np.float32)), shape=y.shape, broadcast_dimensions=())
    return b.build([b.add("max", y, zero)]), ins


@pytest.mark.parametrize("cin,k,stride,pad,dil,residual,precision", [
    (3, 7, (2, 2), ((3, 3), (3, 3)), (1, 1), False, "fp16"),        # ResNet's stem
    (1, 9, (1, 2), ((4, 3), (2, 4)), (1, 1), True, "fp16"),         # one channel, odd pads, a residual
    (5, 5, (2, 1), ((2, 2), (0, 1)), (2, 1), False, "fp16"),        # dilated
    (3, 7, (2, 2), ((3, 3), (3, 3)), (1, 1), True, "bf16"),
])
def test_padded_stem_matches_the_unpadded_graph(cin, k, stride, pad, dil, residual, precision):
    rng, seed = fresh_rng()
    graph, ins = _stem(rng, cin, k, stride, pad, dil, residual)
    padded, _ = run_pipeline(graph, precision=precision)
    unpadded, _ = run_pipeline(graph, precision=precision, disabled=["channel-pad"])
    (conv_node,) = [n for n in padded.nodes if n.op == "convolution"]
    assert conv_node.inputs[0].shape[-1] == 8
    assert conv_node.attrs["strides"][0] == (1 if stride[0] == 2 and cin <= 4 else stride[0])    # folded rows
    (want,) = interpret(unpadded, ins)
    (got,), kernels, _ = run_on_host(padded, ins)
    assert got.shape == want.shape and np.isfinite(got).all(), f"unwritten outputs (seed {seed})"
    np.testing.assert_allclose(got, want, rtol=TOL[precision], atol=TOL[precision], err_msg=f"seed {seed}")
    conv = next(kn for kn in kernels if kn.region.kind == "conv")
    assert conv.name.startswith("aotc_dot_mma_") and "const unsigned A_s =" in conv.source    # A by cp.async
    layout = next(kn for kn in kernels if any(n.op == "pad" for n in kn.region.nodes))
    assert layout.region.kind == "loop" and "aotc_vec16<" in layout.source    # one pixel's 8 channels a thread


def test_f32_engine_is_unchanged():
    """channel-pad runs only after fp16/bf16 precision: the f32 pipeline is the same graph either way."""
    rng, _ = fresh_rng()
    graph, _ = _stem(rng, 3, 7, (2, 2), ((3, 3), (3, 3)), (1, 1), False)
    f32, report = run_pipeline(graph)
    without, _ = run_pipeline(graph, disabled=["channel-pad"])
    assert "channel-pad" not in [r.name for r in report.passes]
    assert str(f32) == str(without) and not any(n.op == "pad" for n in f32.nodes)
    from aotc.fusion.regions import partition
    from aotc.kernels import codegen
    names = [[codegen.generate(g, r).name for r in partition(g)] for g in (f32, without)]
    assert names[0] == names[1] and any(n.startswith("aotc_dot_") for n in names[0])


def test_small_resnet_stem_kernel_stages_by_cp_async():
    """The fp16 ResNet-like model's first conv (7x7/2 on the 3-channel image) is on the aligned path."""
    from aotc.bench.models.small import resnet_bottleneck
    from aotc.fusion.regions import partition
    from aotc.importers.onnx import import_onnx
    from aotc.kernels import codegen
    model, _ = resnet_bottleneck(batch=2, size=32, blocks=(1, 1, 1, 1))
    g, _ = run_pipeline(import_onnx(model), precision="fp16")
    regions = partition(g)
    stem = next(r for r in regions if r.kind == "conv")
    assert stem.anchor.inputs[1].shape == (8, 4, 7, 8)            # row pairs folded: 4 x 7 taps of 8 channels
    src = codegen.generate(g, stem).source
    assert "const unsigned A_s =" in src and "aotc_cp_async_16_at(aotc_smem, A_s" in src
    layout = next(r for r in regions if any(n.op == "pad" for n in r.nodes))
    assert layout.kind == "loop" and sorted(n.op for n in layout.nodes) == ["convert", "pad", "reshape", "reshape",
                                                                           "transpose", "transpose"]
