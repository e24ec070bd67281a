"""Attention kernel rules: the head sizes the flash-attention and int8 attention kernels hold.

The float kernel (templates/attention.cu) keeps K and V tiles of 32 keys x
head_dim in static shared memory and each lane of a warp holds ceil(dv / 32)
output values, so Q·K and P·V head dims up to MAX_HEAD_DIM fit. The int8
kernel (templates/attention_int8_mma.cu) stages up to 64 query rows and 32-key
tiles of K and V as 8-bit words and holds the head dims in mma fragments: the
same limit keeps its shared memory under 20 KB. A larger head leaves the pattern to
the ordinary GEMM, reduction and loop kernels.

The f16/bf16 tensor-core kernel (templates/attention_mma.cu) runs head dims of
MMA_HEAD_DIMS (`tensor_core_attention`). It copies an operand that is a plain
view of a buffer by cp.async (kernels/attention_views.py), so the elementwise
op between a projection GEMM and the head split (BERT's QKV bias add) stays
that GEMM's epilogue (`operand_epilogues`): the same bytes (the GEMM's output
is written anyway), and Q, K and V become slices and reshapes of it.

8-bit dots otherwise take the int8/fp8 GEMMs (plain_anchor): only a matched
integer attention (both dots i8/u8 with i32 sums, the probabilities quantized
before P·V; aotc.patterns.attention) goes to the int8 attention kernel.
"""
from __future__ import annotations

from aotc.fusion.rules import plain_anchor
from aotc.ir import dtypes, ops

MAX_HEAD_DIM = 128      # static shared memory holds K and V tiles of 32 x head_dim
MMA_HEAD_DIMS = (64, 128)   # the tensor-core kernel's: 8 or 16 16-byte chunks a row, its XOR swizzle's range
VIEW_OPS = ("reshape", "transpose", "slice")     # what a copied operand may be of its buffer


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


def tensor_core_attention(match) -> bool:
    """The f16/bf16 tensor-core kernel runs this (float) AttentionMatch: f16 or bf16 Q, K, P and V, head
    dims in MMA_HEAD_DIMS."""
    operands = (match.qk.inputs[0], match.qk.inputs[1], match.pv.inputs[0], match.pv.inputs[1])
    dtype = operands[0].dtype
    return (not match.quantized and dtype in (dtypes.f16, dtypes.bf16) and all(v.dtype == dtype for v in operands)
            and match.dh in MMA_HEAD_DIMS and match.dv in MMA_HEAD_DIMS)


def operand_epilogues(match, producer, users, outputs) -> set:
    """The elementwise nodes that a tensor-core attention region leaves to a GEMM's epilogue: reached from
    Q, K or V through VIEW_OPS only, reading the sole use of a GEMM's (non-output) result, every other input
    a broadcast (a bias: what an epilogue takes; anything else might leave the op a kernel of its own)."""
    if not tensor_core_attention(match):
        return set()
    out, todo, seen = set(), [match.qk.inputs[0], match.qk.inputs[1], match.pv.inputs[1]], set()
    while todo:
        v = todo.pop()
        p = producer.get(v)
        if p is None or p in seen or p in (match.qk, match.pv):
            continue
        seen.add(p)
        if p.op in VIEW_OPS:
            todo.append(p.inputs[0])
        elif ops.category(p.op) == ops.ELEMENTWISE and _bias_of_a_gemm(p, producer, users, outputs):
            out.add(p)
    return out


def _bias_of_a_gemm(node, producer, users, outputs) -> bool:
    gemm = [v for v in node.inputs if producer.get(v) is not None and ops.category(producer[v].op) == ops.DOT]
    if len(gemm) != 1 or gemm[0] in outputs or len(users.get(gemm[0], [])) != 1:
        return False
    rest = [producer.get(v) for v in node.inputs if v is not gemm[0]]
    return all(p is not None and p.op == "broadcast_in_dim" for p in rest)
