"""Attention kernel rules: the head sizes the flash-attention and int8 attention kernels hold.

The float kernel (templates/attention.cu) keeps K and V tiles of 32 keys x
head_dim in static shared memory and each lane of a warp holds ceil(dv / 32)
output values, so Q·K and P·V head dims up to MAX_HEAD_DIM fit. The int8
kernel (templates/attention_int8_mma.cu) stages up to 64 query rows and 32-key
tiles of K and V as 8-bit words and holds the head dims in mma fragments: the
same limit keeps its shared memory under 20 KB. A larger head leaves the pattern to
the ordinary GEMM, reduction and loop kernels.

8-bit dots otherwise take the int8/fp8 GEMMs (plain_anchor): only a matched
integer attention (both dots i8/u8 with i32 sums, the probabilities quantized
before P·V; aotc.patterns.attention) goes to the int8 attention kernel.
"""
from __future__ import annotations

from aotc.fusion.rules import plain_anchor

MAX_HEAD_DIM = 128      # static shared memory holds K and V tiles of 32 x head_dim


def attention_refusal(match) -> str:
    """Why no attention kernel runs this AttentionMatch (aotc.patterns.attention); "" where one does."""
    if match.dh > MAX_HEAD_DIM or match.dv > MAX_HEAD_DIM:
        what = "int8 attention" if match.quantized else "attention"
        return f"{what} not fused: head dims {match.dh}/{match.dv} exceed {MAX_HEAD_DIM}"
    if match.quantized:
        return ""
    if plain_anchor(match.qk) or plain_anchor(match.pv):      # fp8 dots: the fp8 GEMMs; f64: double sums
        return "attention not fused: 8-bit or f64 dots without quantized i8/u8 probabilities"
    return ""


def attention_fits(match) -> bool:
    """An attention kernel can run this AttentionMatch."""
    return not attention_refusal(match)
