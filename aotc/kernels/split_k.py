"""Split-K for GEMMs and implicit-GEMM convs that would leave most of the GPU idle.

At batch 1 a GEMM often has fewer 64x64 output tiles than the GPU has SMs
(ResNet-50's last 3x3 convs: 8 tiles for K = 4608; BERT's output projections:
24), so most SMs sit idle while a few blocks walk the whole K loop. Split-K
gives each tile S blocks, each summing one K range, and S times as many blocks
run at once.

The partial sums meet without a second kernel and without atomics on data:
each block writes its partial tile to an f32 workspace in the arena, then
counts itself in at the tile's counter (aotc_split_last, aotc_prelude.cuh).
The block that arrives last adds the S partials in split order, so the result
does not depend on which block finishes last, and runs the region's epilogue.
The counters live in a zeroed tail of the arena: the runtime zeroes it when it
creates a context and every tile's last block sets its counter back to 0.

S is at most the largest split that keeps the launch within one wave (S *
tiles <= SMs: a second, partly empty wave would cost what the split saved),
each split keeping >= 8 K tiles. The workspace is capped at 8 MiB, so it stays
in L2 (50 MiB on an H100/H200): partials are written and read back within the
launch, and the modelled HBM bytes do not count them (Kernel.workspace reports
them; the bytes target, aotc/bench/byte_floor.py, charges them twice).

Within that, the partials' bytes decide: S is the fewest splits that give
FILL_SHARE of the SMs a block, or more while the partials (2 x S x the f32 tile
sums) stay within PARTIALS_SHARE of the kernel's own traffic. One split's
partials cost about 2M/K of a GEMM's traffic (M rows, depth K), so a 5% share
admits a split only where K > 40 M: at batch 1 it almost never fills the GPU
alone. Measured (bench/fusion_report.py --fast, modelled bytes over the plan's
floor, and GEMM/conv launches under half a wave): a full wave everywhere gave
ResNet-50 1.625 (1 of 54), BERT-base 1.203 (0/48), GPT-2 1.181 (0/49); no split
past 5% 1.006 (42/54), 1.000 (24/48); half a wave 1.472, 1.122, 1.120 with the
same 1/54, 0/48, 0/49 launches under half a wave.
"""
from __future__ import annotations

import math

from aotc.ir import dims as D

from aotc.fusion.rules.target import MAX_WORKSPACE, TARGET_SMS
from aotc.kernels.template import instantiate

MAX_SPLITS = 16
MIN_SPLIT_K = 128        # each block still runs >= 8 K tiles of 16
FILL_SHARE = 0.5         # the split gives at least this share of the SMs a block (fusion_report's "half a wave")
PARTIALS_SHARE = 0.05    # beyond that, partial-sum bytes (written + read) per byte of the kernel's own traffic
GEMM_TEMPLATES = ("dot", "dot_mma", "dot_tf32")

# Each template's accumulators (split_k_fixup.part's slots): their dims (i, j, r; r = 1 where the array has
# two), the element at (i, j, r), and the row/col of element 0.
_LAYOUT = {
    "dot": ((4, 4, 1), "acc[i][j]", "m0 + ty", "n0 + tx"),
    "mma": ((2, 4, 4), "acc[i][j][r]", "m0 + wm + g", "n0 + wn + 2 * t"),
}


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


def split_slots(kind: str, batch: int, m: int, n: int, k: int, idx_t: str, enabled: bool = True,
                traffic=None):
    """(template slots, splits, K per split) for a GEMM template with this geometry and modelled bytes.

    A GEMM with a dynamic size splits only in a variant whose bucket pins its sizes (variants.py):
    otherwise its tile count is known only at run time."""
    sizes = [D.known(x) for x in (batch, m, n, k)]         # dims a variant's bucket pins count as known
    known = D.known(traffic) if traffic is not None else None
    splits, per = choose_splits(*sizes, known) if enabled and None not in sizes else (1, k)
    if splits == 1:
        return dict(b_index="blockIdx.z", k_begin="0", k_end=str(k), split_fixup=""), 1, k
    begin = f"({idx_t})(blockIdx.z % {splits}) * {per}"
    mma = kind != "dot"
    (ni, nj, nr), elt, row, col = _LAYOUT["mma" if mma else "dot"]
    if kind in ("dot_mma", "dot"):      # the accumulators meet in a shared-memory tile (no local array)
        fixup = instantiate("split_k_tile.part", dict(splits=splits, total=batch * m * n, mn=m * n, m=m, n=n,
                                                      stride=72 if mma else 80), indent=2)
        if kind == "dot":               # dot_mma.cu has its tile already; dot.cu's goes there and back
            fixup = instantiate("split_k_simt.part", dict(handoff=fixup), indent=2)
    else:
        fixup = instantiate("split_k_fixup.part", dict(
            splits=splits, acc_count=ni * nj * nr, ni=ni, nj=nj, nr=nr, acc=elt, mma="true" if mma else "false",
            row=row, col=col, total=batch * m * n, mn=m * n, m=m, n=n), indent=2)
    slots = dict(b_index=f"blockIdx.z / {splits}", k_begin=begin,
                 k_end=f"({begin} + {per} < {k} ? {begin} + {per} : {k})", split_fixup=fixup)
    return slots, splits, per
