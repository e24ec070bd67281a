"""channel-pad: give an f16/bf16 channels-last convolution a channel count that is a multiple of 8.

The tensor-core implicit GEMM (kernels/codegen_conv.py) stages its input by 16-byte cp.async chunks of
8 channels of one tap, which needs C % 8 == 0 and a plain, materialized input. A CNN's stem conv reads the
image, C = 3 (ResNet-50: 7x7 stride 2, K = 147 taps x channels), usually as the fp16 engine's convert and
NCHW -> NHWC transpose of the f32 input; without this pass the conv computes those per element while it
stages A, which is what made ResNet-50's stem its slowest kernel. Here the input gets a `pad` of the
channel dim up to the next multiple of 8 with zeros and the (constant) weights the same zero channels at
compile time, so the cast, the transpose and the pad are one memory-bound kernel writing an aligned NHWC
tensor (fusion/rules/conv.py keeps that pad out of the conv's prologue), and the conv takes the aligned
path. Zero channels add zero products, so every output is the same sum of the same nonzero terms.

What it costs: the padded input (C_pad / C times the input's elements, in the low dtype) is written once
and read by the conv, and the conv's GEMM is C_pad / C times deeper (more tensor-core work on zeros).

Leaves alone: f32 and 8-bit convolutions, NCHW ones, grouped and depthwise ones, non-constant weights,
dynamic channel counts, and convs with at most MAX_SMALL_K taps x channels: those fit one 64-deep stage
anyway, and the depthwise kernel may recompute such a conv while it stages its patch (MobileNet's 3x3
stem), which padding would only make wider.
"""
from __future__ import annotations

import math

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import dtypes
from aotc.ir.graph import Graph, Node

CHANNEL_MULTIPLE = 8      # b16 elements in one 16-byte cp.async chunk
MAX_SMALL_K = 64          # taps x channels of one pipeline stage (and the depthwise kernel's fused-conv limit)
last_stats: dict[str, int] = {}


def padded_channels(graph: Graph, n: Node) -> int | None:
    """The channel count conv `n`'s input is padded to, or None where the pass leaves it alone."""
    if n.op != "convolution" or n.attrs.get("layout") != "NHWC" or n.attrs.get("out_dtype") is not None:
        return None
    x, w = n.inputs
    if x.dtype not in (dtypes.f16, dtypes.bf16) or w.dtype != x.dtype or w not in graph.constants:
        return None
    c = x.shape[-1]
    if n.attrs["groups"] != 1 or not isinstance(c, int) or c % CHANNEL_MULTIPLE == 0:
        return None
    if math.prod(w.shape[1:]) <= MAX_SMALL_K:
        return None
    return -(-c // CHANNEL_MULTIPLE) * CHANNEL_MULTIPLE


def run(graph: Graph) -> Graph:
    """A new Graph where each qualifying conv reads a zero-padded input and zero-padded weights."""
    last_stats.clear()
    last_stats.update(convs=0, pads=0)
    rw = Rewriter(graph)
    padded = {}              # input Value -> its padded twin (convs sharing an input share one pad)
    for n in graph.nodes:
        cp = padded_channels(graph, n)
        if cp is None:
            rw.keep(n)
            continue
        x, w = n.inputs
        extra = cp - x.shape[-1]
        if x not in padded:
            zero = rw.constant(np.zeros((), x.dtype.np), f"{x.name}.zero", x.dtype)
            rank = x.type.rank
            padded[x] = rw.add("pad", x, zero, hint=f"{x.name}.c{cp}", low=(0,) * rank,
                               high=(0,) * (rank - 1) + (extra,))
            last_stats["pads"] += 1
        wa = graph.constants[w]
        wp = rw.constant(np.pad(wa, [(0, 0)] * (wa.ndim - 1) + [(0, extra)]), f"{w.name}.c{cp}", w.dtype)
        rw.add("convolution", padded[x], wp, name=n.name, out=n.outputs[0], **n.attrs)
        last_stats["convs"] += 1
    return rw.finish()
