"""Depthwise kernel rules: which depthwise convs it runs, and when a pointwise conv joins it.

The depthwise kernel (templates/depthwise.cu) stages an input patch and the
filters of DW_CHANNELS channels in static shared memory per output tile of at
most 8x8 pixels; a depthwise conv runs there when some tile fits DW_SMEM_LIMIT
and the grid limits. The depthwise+pointwise kernel (depthwise_project.cu) also
keeps the tile's depthwise result in shared memory and multiplies it into at
most MAX_PROJECT_OUTPUTS pointwise outputs per tile, its channel splits meeting
as split-K partials. Fusion asks `staged_depthwise` and `depthwise_project_fits`;
kernels/codegen_conv.py builds the kernels with the tiles and plans chosen here.
"""
from __future__ import annotations

import math

from aotc.ir import dims as D
from aotc.fusion.rules import plain_anchor, quantized_anchor
from aotc.fusion.rules.target import MAX_WORKSPACE, TARGET_SMS

DW_CHANNELS = 32            # channels per depthwise block (threads are channel-fastest)
DW_BLOCK = 256
DW_SMEM_LIMIT = 48 * 1024   # static shared memory per block on every target
MAX_PROJECT_OUTPUTS = 16 * DW_BLOCK   # pointwise outputs per depthwise_project tile: 16 partial sums a thread
MAX_FUSED_CONV_K = 64       # taps x input channels of a dense conv recomputed per staged element
MAX_GRID_YZ = 65535


def channel_tile(chans: int) -> int:
    """Channels per depthwise block: DW_CHANNELS, or the next power of two above a smaller count."""
    return min(DW_CHANNELS, 1 << max(0, (chans - 1).bit_length()))


def depthwise_tiles(kshape, strides, dils, tc, project: int = 0):
    """Output tiles (th, tw, ih, iw) <= 8x8 whose input patch and filters fit the smem budget, largest first.

    `project` > 0: the tile also keeps its depthwise result in shared memory and
    feeds that many pointwise outputs per pixel (depthwise_project.cu), at most
    MAX_PROJECT_OUTPUTS per tile."""
    for th, tw in ((8, 8), (4, 8), (4, 4), (2, 4), (2, 2), (1, 2), (1, 1)):
        ih = (th - 1) * strides[0] + (kshape[0] - 1) * dils[0] + 1
        iw = (tw - 1) * strides[1] + (kshape[1] - 1) * dils[1] + 1
        floats = (ih * iw + kshape[0] * kshape[1]) * tc + (th * tw * (tc + 1) if project else 0)
        if floats * 4 <= DW_SMEM_LIMIT and th * tw * project <= MAX_PROJECT_OUTPUTS:
            yield th, tw, ih, iw


def depthwise_tile(kshape, strides, dils, tc, out_shape=None):
    """The tile to use (None if none fits): the largest that still gives half the GPU's SMs a
    block (batch-1 late stages: 7x7x960 makes 30 blocks of 8x8 but 120 of 4x4), going no
    smaller than 2x4 for that (8 pixels x 32 channels keep all 256 threads busy)."""
    tiles = list(depthwise_tiles(kshape, strides, dils, tc))
    busy = [t for t in tiles if t[0] * t[1] >= 8]
    if not busy or out_shape is None:
        return tiles[0] if tiles else None
    n, oh, ow, chans = out_shape
    n = D.upper(n)               # a dynamic batch: tiles chosen for the top of its range
    for t in busy:
        if 2 * n * math.ceil(oh / t[0]) * math.ceil(ow / t[1]) * math.ceil(chans / tc) >= TARGET_SMS:
            return t
    return busy[-1]


def depthwise_node_fits(conv) -> bool:
    """The depthwise kernel can run this (NHWC, 2-D, one filter per channel) conv: grid and smem limits."""
    w, out, a = conv.inputs[1], conv.outputs[0], conv.attrs
    tc = channel_tile(out.shape[-1])
    return D.upper(out.shape[0]) <= MAX_GRID_YZ and math.ceil(out.shape[-1] / tc) <= MAX_GRID_YZ and \
        depthwise_tile(w.shape[1:3], a["strides"], a["dilations"], tc) is not None


def staged_depthwise(n) -> bool:
    """A depthwise conv that runs on the depthwise kernel (its input patch is staged in shared memory).

    Each staged input element is computed once per tile, so such a conv may take
    elementwise prologues, and a pointwise expansion conv (fusion/prologues.py).
    """
    if n is None or n.op != "convolution" or plain_anchor(n):     # 8-bit: integer kernels; f64: direct conv
        return False
    x, w = n.inputs
    a = n.attrs
    return (a.get("layout") == "NHWC" and x.type.rank == 4 and w.shape[-1] == 1
            and a["groups"] == x.shape[-1] == n.outputs[0].shape[-1] and depthwise_node_fits(n))


def project_plan(dw, proj, split: bool = True, traffic=None, partials_share: float = 0.1):
    """(tile, splits, channel chunks per split, workspace bytes, pixel tiles) of a depthwise_project
    kernel, or a reason string when none fits.

    Splits over the depthwise channels fill half the GPU's SMs with blocks, but
    only while the partials (splits x outputs per pixel) stay no larger than the
    depthwise result they replace (channels per pixel): past that the fusion
    would move more bytes through L2 than it saves in HBM. Given the kernel's
    own modelled bytes (`traffic`), the plan meets the bytes target instead
    (aotc/bench/byte_floor.py): the largest pixel tile that gives half the SMs
    a block unsplit, else the smallest tile, split only while its partials
    (written and read back) stay within `partials_share` of `traffic`.
    """
    out = dw.outputs[0]
    n_img, oh, ow, chans = out.shape
    outs = proj.outputs[0].shape[-1]
    tc = channel_tile(chans)
    if D.upper(n_img) > MAX_GRID_YZ:
        return f"batch {n_img!r} exceeds the grid's z limit"
    if not D.is_static(n_img):
        split = False            # a dynamic batch: the block count is known only at run time
    fits = list(depthwise_tiles(dw.inputs[1].shape[1:3], dw.attrs["strides"], dw.attrs["dilations"], tc, outs))
    if not fits:
        return f"{outs} pointwise outputs per pixel do not fit a tile"
    chunks = math.ceil(chans / tc)
    cap = max(1, min(chunks, chans // outs)) if split else 1
    if traffic is not None:
        tile, splits, per = _budget_plan(fits, D.upper(n_img), oh, ow, outs, chunks, split, traffic, partials_share)
    else:
        tile, splits, per = _fill_plan(fits, D.upper(n_img), oh, ow, chunks, cap)
    tiles = n_img * math.ceil(oh / tile[0]) * math.ceil(ow / tile[1])
    workspace = 4 * splits * tiles * tile[0] * tile[1] * outs if splits > 1 else 0
    if workspace > MAX_WORKSPACE:
        return f"split partials of {workspace >> 20} MiB exceed the workspace cap"
    return tile, splits, per, workspace, tiles


def _fill_plan(fits, n_img, oh, ow, chunks, cap):
    """(tile, splits, chunks per split): the largest tile of >= 8 pixels that split at most `cap` ways
    gives half the SMs a block, or the one giving the most blocks."""
    best = None
    for tile in [t for t in fits if t[0] * t[1] >= 8] or fits[:1]:    # largest first, as depthwise_tile
        tiles = n_img * math.ceil(oh / tile[0]) * math.ceil(ow / tile[1])
        splits = min(cap, math.ceil(TARGET_SMS / 2 / tiles))
        per = math.ceil(chunks / splits)
        splits = math.ceil(chunks / per)
        if best is None or tiles * splits > best[3] * best[1]:
            best = (tile, splits, per, tiles)
        if 2 * tiles * splits >= TARGET_SMS:
            break
    return best[:3]


def _budget_plan(fits, n_img, oh, ow, outs, chunks, split, traffic, share):
    """(tile, splits, chunks per split): the largest tile that gives half the SMs a block unsplit, else
    the smallest split while the partials stay within `share` of `traffic`."""
    for tile in fits:
        tiles = n_img * math.ceil(oh / tile[0]) * math.ceil(ow / tile[1])
        if 2 * tiles >= TARGET_SMS:
            return tile, 1, chunks
    tile = fits[-1]
    tiles = n_img * math.ceil(oh / tile[0]) * math.ceil(ow / tile[1])
    one = 2 * 4 * tiles * tile[0] * tile[1] * outs            # one split's partials, written and read back
    splits = min(chunks, math.ceil(TARGET_SMS / 2 / tiles), int(share * traffic) // one) if split else 1
    if splits < 2:
        return tile, 1, chunks
    per = math.ceil(chunks / splits)
    return tile, math.ceil(chunks / per), per


def depthwise_project_fits(dw, proj) -> str:
    """"" when the depthwise_project kernel can run depthwise conv `dw` feeding pointwise conv `proj`, else why not."""
    if quantized_anchor(proj):
        return "an 8-bit pointwise conv runs the int8/fp8 GEMM, which takes no depthwise prologue"
    if plain_anchor(proj):
        return "an f64 pointwise conv runs the direct conv (double sums), which takes no depthwise prologue"
    plan = project_plan(dw, proj)
    return plan if isinstance(plan, str) else ""


def materialized_channel_pad(conv, p) -> bool:
    """`p` makes f16/bf16 channels-last conv `conv`'s input 8 channels wide (hlo_passes/channel_pad.py): a
    zero pad of its channels up to a multiple of 8, or the reshape that folds rows of 8 / s channels into
    8 (space-to-depth). It runs as its own memory-bound kernel, so the conv reads a plain, 16-byte aligned
    tensor and stages it by cp.async; as the conv's prologue it would bring back the per-element staging
    it exists to remove."""
    if conv is None or conv.op != "convolution" or p.op not in ("pad", "reshape") or conv.inputs[0] is not p.outputs[0]:
        return False
    if conv.attrs.get("layout") != "NHWC" or conv.attrs["groups"] != 1 or plain_anchor(conv):
        return False
    x, rank = p.inputs[0], p.inputs[0].type.rank
    c, cp = x.shape[-1], p.outputs[0].shape[-1]
    if x.dtype.itemsize != 2 or not x.dtype.is_float or not isinstance(c, int) or c % 8 == 0 or cp % 8:
        return False
    if p.op == "reshape":       # (..., s, 8 / s) -> (..., 8)
        return cp == 8 and 8 % c == 0 and tuple(x.shape[:-2]) == tuple(p.outputs[0].shape[:-1])
    low, high = tuple(p.attrs["low"]), tuple(p.attrs["high"])
    return low == (0,) * rank and high[:-1] == (0,) * (rank - 1)
