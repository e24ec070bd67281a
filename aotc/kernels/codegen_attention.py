"""Attention regions -> one flash-attention kernel (templates/attention.cu).

The region holds the whole softmax(f(Q·K))·V pattern (aotc/patterns/attention.py)
plus the index math that brings Q, K, V into place. Loads of Q, K and V run
that prologue; the score chain f (scale, additive mask) is evaluated per
(query, key) with the Q·K dot product as an override; the epilogue runs on
each output element. An integer (Q/DQ) attention takes codegen_attention_int8.py instead.
"""
from __future__ import annotations

import math

from aotc.ir import dims as D
from aotc.kernels.builder import MAX_GRID, Kernel, KernelBuilder, unravel
from aotc.patterns.attention import free_dim


def operand_load(b: KernelBuilder, value, dot, side: str, batch_idx, row: str, col: str, indent: int, var: str) -> str:
    """Code setting `var` to operand `side` of `dot` at (batch, row = free dim, col = contracted dim)."""
    em = b.emitter(indent=indent)
    idx = [""] * value.type.rank
    for d, e in zip(dot.attrs[f"{side}_batch"], batch_idx):
        idx[d] = e
    idx[dot.attrs[f"{side}_contract"][0]] = col
    idx[free_dim(dot, side)] = row
    em.emit(f"{var} = {em.value(value, idx)};")
    return em.text()


def operand_loads(b: KernelBuilder, indents: tuple[int, int, int]):
    """What both attention kernels start from: the batch index emitter (`bh` unravelled into z...), the
    batch indices, the batch count, and the Q, K and V loads (into q, kv, vv) at these indents."""
    m = b.region.payload.match
    qk, pv = m.qk, m.pv
    em_b = b.emitter(indent=2)
    batch_idx = unravel(em_b, "bh", m.batch_shape, "z") if m.batch_shape else []
    loads = (operand_load(b, qk.inputs[0], qk, "lhs", batch_idx, "i", "d", indents[0], "q"),
             operand_load(b, qk.inputs[1], qk, "rhs", batch_idx, "j", "d", indents[1], "kv"),
             operand_load(b, pv.inputs[1], pv, "rhs", batch_idx, "d", "j", indents[2], "vv"))
    return em_b, batch_idx, math.prod(m.batch_shape), loads


def generate_attention(b: KernelBuilder) -> Kernel:
    region = b.region
    m = region.payload.match
    qk, pv = m.qk, m.pv
    out = pv.outputs[0]
    em_b, batch_idx, nbatch, (load_q, load_k, load_v) = operand_loads(b, (4, 5, 5))
    em_s = b.emitter(indent=4, overrides={qk.outputs[0]: "qk"})
    em_s.emit(f"s = {em_s.value(m.scores, list(batch_idx) + ['i', 'j'])};")
    em_e = b.emitter(indent=5, overrides={out: "accv"})
    b.store_root(em_e, b.root_index(em_e, list(batch_idx) + ["i", "d"]))
    slots = dict(batch_index=em_b.text(), load_q=load_q, load_k=load_k, load_v=load_v, score=em_s.text(),
                 epilogue=em_e.text(), nbatch=nbatch, sq=m.sq, sk=m.sk, dh=m.dh, dv=m.dv,
                 dv_per_lane=D.ceildiv(m.dv, 32))
    tiles = nbatch * D.ceildiv(m.sq, 8)
    return b.finish("attention", slots, (D.dmax(1, D.dmin(tiles, MAX_GRID)), 1, 1), (256, 1, 1))
