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

A conv strided by s along its first spatial dim (H) with C <= 8 / s instead folds s rows into the
channels (space-to-depth): the input is padded to 8 / s channels and, explicitly, to s * (OH + KH' - 1)
rows (KH' = ceil(KH / s)), rows 2i and 2i + 1 of it (for s = 2) become the two halves of folded row i's
8 channels, and the conv runs at stride 1 over H with KH' taps, weights w'[o, j, kw, r * C' + c] =
w[o, s * j + r, kw, c] (zero where s * j + r >= KH or c >= C). ResNet's stem: K = 4 x 7 x 8 = 224 taps x
channels instead of 7 x 7 x 8 = 392 with the plain pad (147 unpadded), and half the padded tensor's bytes.
The fold's layout kernel writes one folded pixel (16 bytes) a thread and reads, per row, 32 consecutive
pixels of one plane a warp; folding W instead would read pixel pairs (half of each sector per request).

What it costs: the padded input (8 / C times the input's elements in the low dtype, about 8 / (s * C) when
folded) is written once and read by the conv, and the conv's GEMM is deeper by the same factor (more
tensor-core work on zeros).

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


def fold_plan(n: Node):
    """(s, rows of the padded input) where conv `n` (already qualifying) folds s rows into its channels,
    else None: a 2-D conv, static shapes, stride s > 1 along H, undilated, C <= 8 / s, and padding rows up
    to s * (OH + KH' - 1) that leave none of the input's rows out."""
    x, w = n.inputs
    out, a = n.outputs[0], n.attrs
    s, c = a["strides"][0], x.shape[-1]
    if x.type.rank != 4 or s < 2 or CHANNEL_MULTIPLE % s or c > CHANNEL_MULTIPLE // s or a["dilations"][0] != 1:
        return None
    if not all(isinstance(d, int) for d in x.shape + out.shape):
        return None
    rows = s * (out.shape[1] + -(-w.shape[1] // s) - 1)
    return (s, rows) if rows >= x.shape[1] + a["padding"][0][0] else None


def _folded_input(rw: Rewriter, x, zero, s: int, rows: int, low: int):
    """x (N, H, W, C) -> (N, rows / s, W, 8): zero-padded to `rows` rows (`low` above) and 8 / s channels,
    each s consecutive rows one folded row of s x (8 / s) channels."""
    n_img, h, width, c = x.shape
    cq = CHANNEL_MULTIPLE // s
    p = rw.add("pad", x, zero, hint=f"{x.name}.rows{rows}", low=(0, low, 0, 0), high=(0, rows - h - low, 0, cq - c))
    p = rw.add("reshape", p, hint=f"{x.name}.split", shape=(n_img, rows // s, s, width, cq))
    p = rw.add("transpose", p, hint=f"{x.name}.rowpairs", permutation=(0, 1, 3, 2, 4))
    return rw.add("reshape", p, hint=f"{x.name}.s2d", shape=(n_img, rows // s, width, CHANNEL_MULTIPLE))


def _folded_weights(wa: np.ndarray, s: int) -> np.ndarray:
    """w (O, KH, KW, C) -> (O, KH', KW, 8): w'[o, j, kw, r * C' + c] = w[o, s * j + r, kw, c], zero padded."""
    o, kh, kw, c = wa.shape
    khf, cq = -(-kh // s), CHANNEL_MULTIPLE // s
    wp = np.pad(wa, [(0, 0), (0, khf * s - kh), (0, 0), (0, cq - c)])        # (O, KH' s, KW, C')
    return wp.reshape(o, khf, s, kw, cq).transpose(0, 1, 3, 2, 4).reshape(o, khf, kw, CHANNEL_MULTIPLE)


def run(graph: Graph) -> Graph:
    """A new Graph where each qualifying conv reads a zero-padded (or row-folded) input and weights."""
    last_stats.clear()
    last_stats.update(convs=0, pads=0, folds=0)
    rw = Rewriter(graph)
    padded = {}              # (input Value, fold) -> its padded twin (convs sharing both share one kernel)
    for n in graph.nodes:
        cp = padded_channels(graph, n)
        if cp is None:
            rw.keep(n)
            continue
        x, w = n.inputs
        fold = fold_plan(n)
        low = n.attrs["padding"][0][0]
        key = (x, fold, low if fold else None)
        if key not in padded:
            zero = rw.constant(np.zeros((), x.dtype.np), f"{x.name}.zero", x.dtype)
            if fold:
                padded[key] = _folded_input(rw, x, zero, *fold, low)
                last_stats["folds"] += 1
            else:
                rank = x.type.rank
                padded[key] = rw.add("pad", x, zero, hint=f"{x.name}.c{cp}", low=(0,) * rank,
                                     high=(0,) * (rank - 1) + (cp - x.shape[-1],))
            last_stats["pads"] += 1
        wa = graph.constants[w]
        attrs = dict(n.attrs)
        if fold:
            wa = _folded_weights(wa, fold[0])
            attrs.update(strides=(1,) + tuple(attrs["strides"][1:]), padding=((0, 0),) + tuple(attrs["padding"][1:]))
        else:
            wa = np.pad(wa, [(0, 0)] * (wa.ndim - 1) + [(0, cp - wa.shape[-1])])
        wp = rw.constant(wa, f"{w.name}.c{CHANNEL_MULTIPLE}", w.dtype)
        rw.add("convolution", padded[key], wp, name=n.name, out=n.outputs[0], **attrs)
        last_stats["convs"] += 1
    return rw.finish()
