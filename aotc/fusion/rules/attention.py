"""Flash-attention kernel rules: the head sizes it holds.

The kernel (templates/attention.cu) keeps K and V tiles of 32 keys x head_dim in
static shared memory and each lane of a warp holds ceil(dv / 32) output values,
so Q·K and P·V head dims up to MAX_HEAD_DIM fit. A larger head leaves the
pattern to the ordinary GEMM, reduction and loop kernels.
"""
from __future__ import annotations

from aotc.fusion.rules import plain_anchor

MAX_HEAD_DIM = 128      # static shared memory holds K and V tiles of 32 x head_dim


def attention_fits(match) -> bool:
    """The flash-attention kernel can run this AttentionMatch (aotc.patterns.attention)."""
    if plain_anchor(match.qk) or plain_anchor(match.pv):      # 8-bit dots: the int8/fp8 GEMMs; f64: double sums
        return False
    return match.dh <= MAX_HEAD_DIM and match.dv <= MAX_HEAD_DIM
