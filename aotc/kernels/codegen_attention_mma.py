"""f16/bf16 attention regions -> one tensor-core flash-attention kernel (templates/attention_mma.cu).

The SIMT kernel (codegen_attention.py) spends BERT-base fp16's attention on
FFMAs, one warp per query row; this one runs both products on mma.m16n8k16
with f32 accumulation, FlashAttention-2 style: 64 query rows a block, 16 a
warp, K/V tiles of `key_tile` keys in swizzled shared memory. The region's
pieces are the SIMT kernel's: the same Q/K/V loads (its prologue, per
element as they are staged), the same score chain per (query, key) with the
Q·K sum as an override, the same online-softmax arithmetic in f32, and the
same epilogue per output element. Only P differs: it is rounded to the
region's dtype to feed the second mma, as the graph's own f16/bf16 softmax
output is. Head dims of 64 and 128 (BERT, GPT-2, LLaMA) take this kernel;
`mma_attention_fits` says which regions do, the rest keep the SIMT kernel.
"""
from __future__ import annotations

from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.kernels.builder import MAX_GRID, Kernel, KernelBuilder
from aotc.kernels.codegen_attention import operand_loads

HEAD_DIMS = (64, 128)       # 16-byte chunks a row: 8 or 16, so the XOR swizzle (chunk ^ row % 8) stays in the row
ROWS = 64                   # query rows a block (4 warps x 16)
_ELT = {dtypes.f16: ("f16", "__half", "__float2half"), dtypes.bf16: ("bf16", "__nv_bfloat16", "__float2bfloat16")}


def mma_attention_fits(match) -> bool:
    """This kernel runs the (float) AttentionMatch: f16 or bf16 Q, K, P and V, head dims in HEAD_DIMS."""
    qk, pv = match.qk, match.pv
    operands = (qk.inputs[0], qk.inputs[1], pv.inputs[0], pv.inputs[1])
    dtype = operands[0].dtype
    return (not match.quantized and dtype in _ELT and all(v.dtype == dtype for v in operands)
            and match.dh in HEAD_DIMS and match.dv in HEAD_DIMS)


def key_tile(dh: int, dv: int) -> int:
    """Keys a K/V tile: 32. S then takes 16 registers a lane; with 64 keys (32 registers) a 64-wide head
    took 166 registers on sm_80/sm_90 against 127 with 32 (occupancy 3 blocks an SM instead of 4)."""
    return 32


def _q_fragments(dh: int) -> tuple[str, str]:
    """(setup, per-k-step code) giving qf[4], the A fragment of Q's 16 dims 16c .. 16c + 15: held in
    registers for the whole key loop where dh is 64 (16 registers); read from the staged tile per step
    where it is 128 (32 more registers would push the kernel past 128)."""
    addr = "Qs + (r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * {dh} + (((2 * {c} + (lane >> 4)) ^ (lane & 7)) << 3)"
    if dh > 64:
        return "", f"        aotc_ldmatrix_x4(qf, {addr.format(dh=dh, c='c')});"
    setup = (f"    unsigned qa[{dh // 16}][4];\n#pragma unroll\n    for (int c = 0; c < {dh // 16}; ++c)\n"
             f"      aotc_ldmatrix_x4(qa[c], {addr.format(dh=dh, c='c')});")
    return setup, "        for (int x = 0; x < 4; ++x) qf[x] = qa[c][x];"


def generate_attention_mma(b: KernelBuilder) -> Kernel:
    m = b.region.payload.match
    qk, pv = m.qk, m.pv
    out = pv.outputs[0]
    elt, ctype, to_elt = _ELT[qk.inputs[0].dtype]
    em_b, batch_idx, nbatch, (load_q, load_k, load_v) = operand_loads(b, (8, 10, 10))
    em_s = b.emitter(indent=12, overrides={qk.outputs[0]: "qk"})
    em_s.emit(f"s = {em_s.value(m.scores, list(batch_idx) + ['i', 'j'])};")
    em_e = b.emitter(indent=8, overrides={out: "accv"})
    b.store_root(em_e, b.root_index(em_e, list(batch_idx) + ["i", "d"]))
    bn = key_tile(m.dh, m.dv)
    q_setup, q_frag = _q_fragments(m.dh)
    staged = 2 * (ROWS * m.dh + bn * m.dh + bn * m.dv)          # Q, K and V tiles of b16
    slots = dict(batch_index=em_b.text(), load_q=load_q, load_k=load_k, load_v=load_v, score=em_s.text(),
                 epilogue=em_e.text(), nbatch=nbatch, sq=m.sq, sk=m.sk, dh=m.dh, dv=m.dv, bn=bn, elt=elt,
                 ctype=ctype, to_elt=to_elt, q_setup=q_setup, q_frag=q_frag,
                 smem_bytes=max(staged, ROWS * (m.dv + 8) * 4))
    tiles = nbatch * D.ceildiv(m.sq, ROWS)
    return b.finish("attention_mma", slots, (D.dmax(1, D.dmin(tiles, MAX_GRID)), 1, 1), (128, 1, 1))
