"""GEMM tiling: a GEMM launch's block tile, and the K split that keeps half the GPU busy where tiles alone do not.

At batch 1 a GEMM often has fewer 64x64 output tiles than the GPU has SMs
(ResNet-50's last 3x3 convs: 8 tiles for K = 4608; BERT's output projections:
24), so most SMs sit idle while a few blocks walk the whole K loop. Two ways
give it more blocks: smaller block tiles (dot.cu has 64x64, 64x32, 32x64,
32x32 and 16x32, each thread still owning a 4x4 micro-tile), which cost no modelled
bytes (the operand re-reads across tiles hit L2, see aotc/bench/byte_floor.py),
and split-K, which gives each tile S blocks, each summing one K range, at the
price of an f32 partial tile per split written and read back.

`choose_tiling` picks dot.cu's tile and split by SM partitions (`_simt_tiling`).
An SM has 4 partitions, each with its own FMA pipes and scheduler; a warp runs
on one, a block on one SM, so a launch keeps blocks x min(warps a block, 4) of
the GPU's 4 x 132 busy (the profile model's U, aotc/profile/model.py). Every
tile of at most 4 warps then keeps the same B*M*N/512 of them busy on real
outputs (64x32: B*M*N/2048 blocks of 4 warps; 16x32: B*M*N/512 blocks of 1),
and 64x64's 8 warps count as 4, half that: a smaller tile adds blocks but no
busy partitions. What adds them is split-K. So each tile takes the fewest
splits that bring its partitions on real outputs to FILL_SHARE of the GPU's,
within the caps below: the partials (written and read back) within
SIMT_PARTIALS_SHARE of the kernel's own traffic, which keeps the kernel within
the bytes target's 1.1x of its compulsory traffic; whole 16-deep K steps, at
least MIN_SPLIT_K a split; one wave of partitions. Then the tile with the most
partitions busy (up to FILL_SHARE) wins, then the fewest splits, then the
largest tile: the best issue efficiency (sm_90 SASS, the K loop's FFMA share
at 128x768x768: 64x64 55%, 64x32 and 32x64 53%, 32x32 51%, 16x32 47%).
A 64x64 tile keeps its place where it already fills half the GPU (BERT's QKV
and fc1); a larger tile split twice buys no more than a smaller one unsplit,
and loses to it on the fewest splits. The f16/bf16 tensor-core GEMM
(dot_mma.cu) takes the rule by blocks over its own tiles, MMA_TILES (64x64,
64x32, 32x64, 32x32: always 4 warps, the warp tile shrinking to 16 rows or
columns, so blocks and partitions agree): the largest that gives FILL_SHARE
of the SMs a block, else the smallest split, its K in whole 64-deep pipeline
stages and at least MIN_MMA_SPLIT_K a split, so that the two-stage cp.async
pipeline still overlaps its copies. dot_tf32 keeps its 64x64 tile and its
split rule (`choose_splits`).

The partial sums meet without a second kernel and without atomics on data:
each block writes its partial tile to an f32 workspace in the arena, then
counts itself in at the tile's counter (aotc_split_last, aotc_prelude.cuh).
The block that arrives last adds the S partials in split order, so the result
does not depend on which block finishes last, and runs the region's epilogue.
The counters live in a zeroed tail of the arena: the runtime zeroes it when it
creates a context and every tile's last block sets its counter back to 0.
S is at most the largest split that keeps the launch within one wave, each
split keeping >= 8 K tiles, and the workspace is capped at 8 MiB, so it stays
in L2 (50 MiB on an H100/H200).

Measured (bench/fusion_report.py --fast, fp32 batch 1: modelled bytes over the
plan's floor, and GEMM/conv launches under half a wave): 64x64 tiles split to
half a wave gave ResNet-50 1.472 (1/54), BERT-base 1.122 (0/48), GPT-2 1.120
(0/49); these tiles give 1.009 (0/54), 1.000 (0/48) and 1.030 (0/49), ResNet-50
keeping 6 split launches (five 49-pixel stage-4 convs, 64 blocks of 16x32 split
two ways, and the classifier, 32 blocks split three ways).
That rule (the largest tile that gives half the SMs a block, else the
smallest split) counted blocks; under the partition count it left BERT's
768-wide projections at 96 blocks of 32x32 (192 partitions) where 48 of
64x32 keep as many at a better issue rate, and ResNet-50's stage-4 convs at
16x32 split twice (98 partitions on real outputs) where 64x32 split 4 to 5
ways keeps twice that within the same 10% cap. The partition rule, fp32 batch
1 (bench/profile_report.py --full: predicted H200 time; fusion_report.py:
modelled bytes over the floor, launches under half the partitions, split
launches and their partials): ResNet-50 934 -> 762 us, 1.009x -> 1.015x, 29
-> 28 of 54, 6 splits of 1.0 -> 1.6 MiB; BERT-base 1639 -> 1615 us, 1.000x
both, 24 of 48 both (its projections and fc2 keep 192 partitions: a split's
partials would pass 10%). At batch 32 ResNet-50 9128 -> 9121 us (the
classifier), BERT-base unchanged.

fp16 batch 1, the same measure (GEMM/conv launches under half a wave, split
launches and their partials, modelled bytes over the floor, kernels over
1.1x): dot_mma's 64x64 tile split to half a wave (`choose_splits`) gave
ResNet-50 1/54, 42 splits, 48.6 MiB, 1.941x, 41 kernels; BERT-base 0/48, 24
splits, 27.0 MiB, 1.244x, 24 kernels. MMA_TILES under this rule give ResNet-50
16/54, 4 splits, 0.6 MiB, 1.011x, 0 kernels (25 of its 54 launches take
32x32: the 7x7 and 14x14 stages); BERT-base 0/48, no split, 1.000x, 0 (its
768-wide projections: 96 blocks of 32x32 where they had 24 of 64x64 split 3
ways). At batch 32 only ResNet-50's classifier changes: 16 blocks of 64x64
split 5 ways (1.1x over) became 32 unsplit blocks of 32x32.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from aotc.ir import dims as D

from aotc.fusion.rules.target import MAX_WORKSPACE, PARTITIONS, TARGET_SMS
from aotc.kernels.mma_staging import c_stride
from aotc.kernels.template import instantiate

MAX_SPLITS = 16
MIN_SPLIT_K = 128        # each block still runs >= 8 K tiles of 16
MMA_STAGE_K = 64         # dot_mma.cu's pipeline stage: a split's K is a whole number of them
MIN_MMA_SPLIT_K = 4 * MMA_STAGE_K    # a split runs >= 4 stages: its pipeline's exposed first stage <= 1/4
FILL_SHARE = 0.5         # the split gives at least this share of the SMs a block (fusion_report's "half a wave")
PARTIALS_SHARE = 0.05    # beyond that, partial-sum bytes (written + read) per byte of the kernel's own traffic
SIMT_PARTIALS_SHARE = 0.1    # dot.cu's cap on them: the bytes target's 1.1x of a kernel's compulsory traffic
GEMM_TEMPLATES = ("dot", "dot_mma", "dot_tf32")
SIMT_TILES = ((64, 64), (64, 32), (32, 64), (32, 32), (16, 32))   # dot.cu's block tiles (rows, cols)
MMA_TILES = ((64, 64), (64, 32), (32, 64), (32, 32))               # dot_mma.cu's (mma_staging.tile_slots)
# dot_mma.cu's tile for an output whose rows start off the 32-byte sector grid (GPT-2's 50257 logits): a
# tile row of 64 f32 touches 9 sectors for 8 filled (89% store efficiency at best), one of 128 touches 17
# for 16 (94%); codegen_dot_mma offers it first there, where B is k-major (its "mn" stage tile is 64 wide
# at most). 64x128 would need 168 registers (19% occupancy) or spill at 128.
ROW_TILE = (32, 128)

# Each template's accumulators (split_k_fixup.part's slots): their dims (i, j, r; r = 1 where the array has
# two), the element at (i, j, r), and the row/col of element 0.
_LAYOUT = {
    "dot": ((4, 4, 1), "acc[i][j]", "m0 + ty", "n0 + tx"),
    "mma": ((2, 4, 4), "acc[i][j][r]", "m0 + wm + g", "n0 + wn + 2 * t"),
}


@dataclass(frozen=True)
class Tiling:
    """A GEMM launch's block tile (bm rows x bn cols of C) and its K split (splits blocks of `per` K each)."""
    bm: int = 64
    bn: int = 64
    splits: int = 1
    per: object = None       # K per split (the whole K when splits == 1)

    @property
    def threads(self) -> int:
        """dot.cu's block: one thread per 4x4 micro-tile."""
        return self.bm * self.bn // 16


def _blocks(batch: int, m: int, n: int, bm: int, bn: int) -> int:
    return batch * math.ceil(m / bm) * math.ceil(n / bn)


def _fills(blocks: int) -> bool:
    return blocks >= FILL_SHARE * TARGET_SMS


def choose_tiling(kind: str, batch, m, n, k, traffic=None, may_split: bool = True, tiles=None) -> Tiling:
    """The block tile and K split of a GEMM launch of template `kind` (B=batch, M, N, K; None: a dynamic size).

    dot (SIMT): `_simt_tiling`, by SM partitions. dot_mma: the largest of `tiles` (default MMA_TILES)
    that gives FILL_SHARE of the SMs a block; where none does, the smallest, split along K only as far
    as its partials stay within SIMT_PARTIALS_SHARE of `traffic` (the kernel's modelled bytes).
    dot_tf32: 64x64 and `choose_splits`. A dynamic size keeps the first tile unsplit: its block count
    is known only at run time."""
    tiles = tiles or (MMA_TILES if kind == "dot_mma" else SIMT_TILES)
    if kind == "dot_tf32":
        tiles = ((64, 64),)
    if None in (batch, m, n, k):
        return Tiling(*tiles[0], 1, k)
    if kind == "dot_tf32":
        splits, per = choose_splits(batch, m, n, k, traffic) if may_split else (1, k)
        return Tiling(64, 64, splits, per)
    if kind == "dot":
        return _simt_tiling(tiles, batch, m, n, k, traffic, may_split)
    for bm, bn in _by_size(tiles, batch, m, n):
        if _fills(_blocks(batch, m, n, bm, bn)):
            return Tiling(bm, bn, 1, k)
    bm, bn = _by_size(tiles, batch, m, n)[-1]
    if not may_split:
        return Tiling(bm, bn, 1, k)
    splits, per = _splits(_blocks(batch, m, n, bm, bn), batch, m, n, k, traffic, SIMT_PARTIALS_SHARE,
                          MMA_STAGE_K, MIN_MMA_SPLIT_K)
    return Tiling(bm, bn, splits, per)


def partitions(bm: int, bn: int, blocks: int) -> int:
    """SM partitions a launch of `blocks` dot.cu blocks of bm x bn keeps busy: min(warps a block, 4)
    each (the profile model's U, aotc/profile/model.py `sm_fill`)."""
    return blocks * min(PARTITIONS, -(-bm * bn // 16 // 32))


def useful_partitions(bm: int, bn: int, batch: int, m: int, n: int, splits: int = 1) -> Fraction:
    """`partitions` counted over the output elements that exist (B x M x N, not the blocks' overhang):
    B*M*N/512 x splits for every tile of at most 4 warps, half that for 64x64's 8."""
    return Fraction(batch * m * n * splits * min(PARTITIONS, bm * bn // 16 // 32), bm * bn)


def _simt_tiling(tiles, batch: int, m: int, n: int, k: int, traffic, may_split: bool) -> Tiling:
    """dot.cu's tile and split: the most partitions busy (useful_partitions, counted up to FILL_SHARE of
    the GPU's), then the fewest splits, then the largest tile (the best issue efficiency); each tile
    takes the fewest splits that reach FILL_SHARE, within `_splits`' caps."""
    target = FILL_SHARE * PARTITIONS * TARGET_SMS
    best = None
    for rank, (bm, bn) in enumerate(_by_size(tiles, batch, m, n)):
        splits, per = 1, k
        if may_split and useful_partitions(bm, bn, batch, m, n) < target:
            splits, per = _splits(partitions(bm, bn, _blocks(batch, m, n, bm, bn)), batch, m, n, k, traffic,
                                  SIMT_PARTIALS_SHARE, capacity=PARTITIONS * TARGET_SMS,
                                  units_per_split=useful_partitions(bm, bn, batch, m, n))
        key = (-min(useful_partitions(bm, bn, batch, m, n, splits), target), splits, rank)
        if best is None or key < best[0]:
            best = (key, Tiling(bm, bn, splits, per))
    return best[1]


def _by_size(tiles, batch, m, n):
    """`tiles` from the largest to the smallest; among equals, the one whose blocks overhang the edges least."""
    return sorted(tiles, key=lambda t: (-t[0] * t[1], t[0] * t[1] * _blocks(batch, m, n, *t)))


def _splits(tiles: int, batch: int, m: int, n: int, k: int, traffic, share: float, step: int = 16,
            least: int = MIN_SPLIT_K, capacity: int = TARGET_SMS, units_per_split=None) -> tuple[int, int]:
    """(splits, K per split, a multiple of `step`, each >= `least`) for a launch that occupies `tiles` of
    the GPU's `capacity` (blocks of its SMs; dot.cu: SM partitions): the fewest that fill FILL_SHARE of
    it (counting `units_per_split` a split where given, else `tiles`) within one wave, or fewer where
    the partials would pass `share` of `traffic` (None: no cap)."""
    fill = math.ceil(FILL_SHARE * capacity / (units_per_split or tiles))
    splits = min(MAX_SPLITS, capacity // tiles, k // least, 65535 // batch,
                 MAX_WORKSPACE // (4 * batch * m * n), fill)
    if traffic is not None:
        splits = min(splits, int(share * traffic) // (2 * 4 * batch * m * n))
    if splits < 2:
        return 1, k
    per = math.ceil(k / splits / step) * step
    return math.ceil(k / per), per


def choose_splits(batch: int, m: int, n: int, k: int, traffic: int | None = None) -> tuple[int, int]:
    """(splits, K per split, a multiple of 16); (1, k) when the launch already fills the GPU.

    `traffic`, the kernel's own modelled bytes, caps the split at the fewest splits that fill FILL_SHARE
    of the SMs, or at more while its partials (written and read back, f32) add at most PARTIALS_SHARE
    of it (None: the one-wave split)."""
    tiles = batch * math.ceil(m / 64) * math.ceil(n / 64)
    if 2 * tiles >= TARGET_SMS:
        return 1, k
    splits = min(MAX_SPLITS, TARGET_SMS // tiles, k // MIN_SPLIT_K, 65535 // batch,
                 MAX_WORKSPACE // (4 * batch * m * n))
    if traffic is not None:
        fill = math.ceil(FILL_SHARE * TARGET_SMS / tiles)     # the fewest splits that fill FILL_SHARE of the SMs
        affordable = int(PARTIALS_SHARE * traffic) // (2 * 4 * batch * m * n)
        splits = min(splits, max(fill, affordable))
    if splits < 2:
        return 1, k
    per = math.ceil(k / splits / 16) * 16
    return math.ceil(k / per), per


def split_slots(kind: str, batch, m, n, k, idx_t: str, tiling: Tiling):
    """The template slots (b_index, k_begin, k_end, split_fixup) of a GEMM launch with this tiling."""
    splits, per = tiling.splits, tiling.per
    if splits == 1:
        return dict(b_index="blockIdx.z", k_begin="0", k_end=str(k), split_fixup="")
    begin = f"({idx_t})(blockIdx.z % {splits}) * {per}"
    mma = kind != "dot"
    (ni, nj, nr), elt, row, col = _LAYOUT["mma" if mma else "dot"]
    if kind in ("dot_mma", "dot"):      # the accumulators meet in a shared-memory tile (no local array)
        bm, bn = tiling.bm, tiling.bn
        fixup = instantiate("split_k_tile.part", dict(splits=splits, total=batch * m * n, mn=m * n, m=m, n=n,
                                                      stride=c_stride(bn) if mma else simt_handoff_stride(bn), tile_m=bm,
                                                      tile_n=bn, shift=bn.bit_length() - 1, mask=bn - 1), indent=2)
        if kind == "dot":               # dot_mma.cu has its tile already; dot.cu's goes there and back
            fixup = instantiate("split_k_simt.part", dict(handoff=fixup, stride=simt_handoff_stride(bn),
                                                          rows=bm // 4, cols=bn // 4), indent=2)
    else:
        fixup = instantiate("split_k_fixup.part", dict(
            splits=splits, acc_count=ni * nj * nr, ni=ni, nj=nj, nr=nr, acc=elt, mma="true" if mma else "false",
            row=row, col=col, total=batch * m * n, mn=m * n, m=m, n=n), indent=2)
    return dict(b_index=f"blockIdx.z / {splits}", k_begin=begin,
                k_end=f"({begin} + {per} < {k} ? {begin} + {per} : {k})", split_fixup=fixup)


def simt_handoff_stride(bn: int) -> int:
    """Row stride of dot.cu's split-K handoff tile: bn + bn/4, so that a warp's bn/4 columns x 128/bn rows
    of stores land in 32 distinct banks (64 -> 80, 32 -> 40)."""
    return bn + bn // 4


def gemm_tiling(kind: str, batch, m, n, k, traffic=None, may_split: bool = True, tiles=None) -> Tiling:
    """choose_tiling on a launch's sizes, which may be dynamic: a dim a variant's bucket pins
    (variants.py) counts as known, any other makes the launch's block count known only at run time."""
    sizes = [D.known(x) for x in (batch, m, n, k)]
    known = D.known(traffic) if traffic is not None else None
    tiling = choose_tiling(kind, *sizes, traffic=known, may_split=may_split, tiles=tiles)
    return tiling if tiling.splits > 1 else Tiling(tiling.bm, tiling.bn, 1, k)
