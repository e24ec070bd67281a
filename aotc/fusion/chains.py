"""Chains of tiny anchors, one kernel: a squeeze-excite block's pool and its two small GEMMs.

EfficientNet's and MobileNetV3's squeeze-excite pools a feature map to one value per
channel, then runs two 1x1 convs on that vector. Each result has a few hundred values
per image, so three kernels would each launch a handful of blocks and pass kilobytes
through memory. One block per image can compute all three in turn, each result held
in shared memory for the next (kernels/codegen_chain.py).

A chain takes a run of regions: a reduction (when one block can read its input quickly,
MAX_POOLED_PER_IMAGE; a large feature map keeps its own, wider pool kernel) or a first
GEMV, then the regions right after it whose anchor is a 1x1 conv on a 1x1 image (a GEMV
per image) reading only the previous result. Every result must be small (MAX_PER_IMAGE
values per image) and used only by the next phase, except the last, the chain's root.
"""
from __future__ import annotations

import math

from aotc.fusion.region import ChainPayload, Region, region_inputs
from aotc.fusion.rules import plain_anchor
from aotc.fusion.rules.chain import MAX_PER_IMAGE, MAX_POOLED_PER_IMAGE
from aotc.ir.dims import is_static


def merge_tiny_chains(regions: list[Region], users, producer, outputs, position) -> list[Region]:
    """Join a reduction and the tiny GEMV regions that follow it into one "chain" region."""
    out: list[Region] = []
    i = 0
    while i < len(regions):
        run = [regions[i]]
        if _head(regions[i], users, outputs):
            while i + len(run) < len(regions) and _link(run[-1], regions[i + len(run)], users, producer, outputs):
                run.append(regions[i + len(run)])
        if len(run) == 1:
            out.append(regions[i])
            i += 1
            continue
        nodes = sorted({n for r in run for n in r.nodes}, key=position.__getitem__)
        last = run[-1]
        chain = Region("chain", last.root, nodes, last.anchor, list(last.epilogue),
                       reasons=[w for r in run for w in r.reasons] +
                       [f"{len(run)} tiny phases in one kernel, one block per image"],
                       payload=ChainPayload(tuple((r.anchor, r.root) for r in run)))
        chain.inputs = region_inputs(chain)
        out.append(chain)
        i += len(run)
    return out


def _small(v) -> bool:
    """Few values per image, known at compile time (a dynamic per-image size never chains)."""
    per = math.prod(v.shape[1:]) if v.type.rank >= 1 else None
    return per is not None and is_static(per) and per <= MAX_PER_IMAGE


def _head(r: Region, users, outputs) -> bool:
    """A chain starts at a pool whose input one block reads quickly, or else at the first GEMV."""
    if r.root in outputs or r.extra_roots or not _small(r.root):
        return False
    if r.kind == "reduction":
        x = r.anchor.inputs[0]
        pooled = math.prod(x.shape[1:])
        return x.shape[0] == r.root.shape[0] and is_static(pooled) and pooled <= MAX_POOLED_PER_IMAGE
    return _gemv(r)


def _gemv(r: Region) -> bool:
    """A 1x1 conv on a 1x1 image (per image, a GEMV) with a small result."""
    if r.kind != "conv" or r.extra_roots or r.payload is not None or not _small(r.root) or plain_anchor(r.anchor):
        return False
    x, w = r.anchor.inputs
    a = r.anchor.attrs
    return (a.get("layout") == "NHWC" and a["groups"] == 1 and x.type.rank == 4 and x.shape[1:3] == (1, 1)
            and tuple(w.shape[1:3]) == (1, 1) and all(tuple(q) == (0, 0) for q in a["padding"])
            and r.root.shape[0] == x.shape[0])


def _link(prev: Region, r: Region, users, producer, outputs) -> bool:
    """`r` is a GEMV per image reading `prev`'s result as its only computed input, and `prev`'s result
    has no other reader."""
    if not _gemv(r) or prev.root in outputs or prev.root.shape[0] != r.root.shape[0]:
        return False
    if any(v is not prev.root and producer.get(v) is not None for v in r.inputs):
        return False          # another computed tensor: only weights, constants and inputs besides prev
    return prev.root in r.inputs and all(u in r.nodes for u in users.get(prev.root, []))
