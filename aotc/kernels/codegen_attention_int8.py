"""Integer attention regions -> one tensor-core kernel (templates/attention_int8_mma.cu).

A Q/DQ model's attention (aotc/patterns/attention.py, `match.quantized`) is
S = Q·K (i8/u8, i32 sums), a float score chain on S, a softmax, the graph's
QuantizeLinear of the probabilities, O = q(P)·V (i32 sums) and the epilogue.
The kernel evaluates each piece with the region's emitter, so every float op
is the graph's own: the score chain per (query, key) with the integer dot
product as an override; the probability chain per (query, key) from the
score, the row max and the row sum (overriding the softmax's broadcasts); the
epilogue per output element with the i32 sum as an override. Both products
run on mma.m16n8k32 (s8/u8, exact i32 sums) through aotc_mma8.cuh, whose host
fallback computes the same fragments on the cpu device. Zero points add
sums to both (acc - z_k * sum_d Q - z_q * sum_d K + ..., P's and V's alike):
the kernel sums each staged operand tile, and the matched reductions (the
match's `operand_sums`, `p_row_sum`) read those sums instead of memory.
Loads of Q, K and V run the same prologue index math as the float
flash-attention kernel; head dims are padded with zeros to the mma shapes.
"""
from __future__ import annotations

from aotc.ir import dims as D
from aotc.kernels.builder import MAX_GRID, Kernel, KernelBuilder
from aotc.kernels.codegen_attention import operand_loads


def _softmax_broadcasts(m, producer):
    """(max broadcast, sum broadcast): the values P = exp(x - bmax) / bsum reads per row."""
    div = producer[m.probs]
    exp_val, bsum = div.inputs
    bmax = producer[producer[exp_val].inputs[0]].inputs[1]
    return bmax, bsum


_MMA_KIND = {"i8": "s8", "u8": "u8"}
_BYTE_T = {"i8": "signed char", "u8": "unsigned char"}


def generate_attention_int8(b: KernelBuilder) -> Kernel:
    m = b.region.payload.match
    qk, pv = m.qk, m.pv
    q, k = qk.inputs
    p_q, v = pv.inputs
    out = pv.outputs[0]
    em_b, batch_idx, nbatch, (load_q, load_k, load_v) = operand_loads(b, (5, 7, 8))
    at = list(batch_idx) + ["i", "j"]
    # the kernel's sums: qsum per query row (in scope throughout), ksum per key (scores), vsum per column
    score_sums = {val: {"q": "qsum", "k": "ksum"}[tag] for val, tag in m.operand_sums.items() if tag != "v"}
    out_sums = {val: {"q": "qsum", "v": "vsum"}[tag] for val, tag in m.operand_sums.items() if tag != "k"}
    em_s = b.emitter(indent=6, overrides={qk.outputs[0]: "qk", **score_sums})
    em_s.emit(f"s = {em_s.value(m.scores, at)};")
    bmax, bsum = _softmax_broadcasts(m, b.producer)
    em_p = b.emitter(indent=6, overrides={m.scores: "s", bmax: "m", bsum: "l"})
    em_p.emit(f"pq = (int){em_p.value(p_q, at)};")
    finals = {out: "accv", **out_sums}
    if m.p_row_sum is not None:          # P's zero point: the epilogue subtracts z_p * colsum(V) per row
        finals[m.p_row_sum] = "psum"
    em_e = b.emitter(indent=7, overrides=finals)
    b.store_root(em_e, b.root_index(em_e, list(batch_idx) + ["i", "d"]))
    slots = dict(batch_index=em_b.text(), load_q=load_q, load_k=load_k, load_v=load_v, score=em_s.text(),
                 probability=em_p.text(), epilogue=em_e.text(), nbatch=nbatch, sq=m.sq, sk=m.sk, dh=m.dh,
                 dv=m.dv)
    dk, dv8 = 32 * D.ceildiv(m.dh, 32), 8 * D.ceildiv(m.dv, 8)
    slots.update(dk=dk, kc=dk // 32, dv8=dv8, nt=dv8 // 8, q_t=_BYTE_T[q.dtype.name], k_t=_BYTE_T[k.dtype.name],
                 v_t=_BYTE_T[v.dtype.name], qk_mma=_MMA_KIND[q.dtype.name] + _MMA_KIND[k.dtype.name],
                 pv_mma=_MMA_KIND[p_q.dtype.name] + _MMA_KIND[v.dtype.name])
    warps = min(4, D.upper(D.ceildiv(m.sq, 16)))      # 16 query rows a warp; no warp without a row
    slots["warps"] = warps
    tiles = nbatch * D.ceildiv(m.sq, 16 * warps)
    return b.finish("attention_int8_mma", slots, (D.dmax(1, D.dmin(tiles, MAX_GRID)), 1, 1), (32 * warps, 1, 1))
