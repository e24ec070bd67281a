"""f16/bf16 attention regions -> one tensor-core flash-attention kernel (templates/attention_mma.cu).

The SIMT kernel (codegen_attention.py) spends BERT-base fp16's attention on
FFMAs, one warp per query row; this one runs both products on mma.m16n8k16
with f32 accumulation, FlashAttention-2 style: 16 query rows a warp, 4 warps
a block (`rows_per_block`; the template also takes 1 or 2),
K/V tiles of `key_tile` keys in swizzled shared memory. The region's pieces
are the SIMT kernel's: the same Q/K/V loads (its prologue, per
element as they are staged), the same score chain per (query, key) with the
Q·K sum as an override, the same online-softmax arithmetic in f32, and the
same epilogue per output element. Only P differs: it is rounded to the
region's dtype to feed the second mma, as the graph's own f16/bf16 softmax
output is. Head dims of 64 and 128 (BERT, GPT-2, LLaMA) take this kernel;
`mma_attention_fits` says which regions do, the rest keep the SIMT kernel.
An operand that is a plain view of a buffer is copied by 16-byte cp.async
(attention_views.py; BERT's Q, K and V, column slices of the QKV GEMM's
output once the fusion rule leaves the bias add to that GEMM's epilogue),
the rest staged per element: BERT-base fp16's attention went from 2.72 to
1.41 us of kernel time predicted (batch 1) with all three copied.
"""
from __future__ import annotations

from aotc.fusion.rules.attention import MMA_HEAD_DIMS, tensor_core_attention
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.kernels.attention_views import aligned_test, copy_code, operand_views
from aotc.kernels.builder import MAX_GRID, Kernel, KernelBuilder
from aotc.kernels.codegen_attention import operand_loads
from aotc.kernels.template import instantiate, template_slots

HEAD_DIMS = MMA_HEAD_DIMS   # 16-byte chunks a row: 8 or 16, so the XOR swizzle (chunk ^ row % 8) stays in the row
ROW_CHOICES = (64, 32, 16)  # query rows a block: 4, 2 or 1 warps of 16 rows
_ELT = {dtypes.f16: ("f16", "__half", "__float2half"), dtypes.bf16: ("bf16", "__nv_bfloat16", "__float2bfloat16")}


def mma_attention_fits(match) -> bool:
    """This kernel runs the (float) AttentionMatch: f16 or bf16 Q, K, P and V, head dims in HEAD_DIMS (the
    fusion rule, which also leaves a projection's bias add to its GEMM for this kernel)."""
    return tensor_core_attention(match)


def key_tile(dh: int, dv: int) -> int:
    """Keys a K/V tile: 32 for 64-wide heads (S in 16 registers a lane; 64 keys took 166 registers against
    127 on sm_80/sm_90: 3 blocks an SM instead of 4); 16 for 128-wide ones, whose O takes 64 registers: with
    a mask, 32 keys took 227 unforced and spilled 16 bytes at 168, 16 keys fit 168 (3 blocks) unspilled,
    main-loop HMMA share 7.0% against 7.1% unforced."""
    return 32 if max(dh, dv) <= 64 else 16


def rows_per_block(nbatch, sq) -> int:
    """Query rows a block: 64 (4 warps). The kernel also runs 32 and 16 (2 and 1 warps; the tests force
    them), but fewer rows a block only spread the same warps over more SMs: each warp runs on one of an
    SM's 4 partitions, and those partitions hold the tensor cores, so 96 one-warp blocks keep the 96
    partitions busy that 24 four-warp blocks do (profile/model.py's sm_fill), while each block re-reads
    the K/V tiles for fewer rows. BERT-base fp16 at batch 1, Q/K/V copied: 2.41 us predicted at 64 rows
    against 2.50 at 16, and no launch under 25% occupancy (16 rows: 146 registers, 12 warps an SM).
    A block-count fill term had shown 16 rows 1.7x faster. More partitions at a small grid need the keys
    split among a block's warps (or flash-decoding's split over blocks), not fewer rows."""
    return ROW_CHOICES[0]


def min_blocks(dh: int, dv: int, rows: int = ROW_CHOICES[0]) -> int:
    """Blocks an SM the registers must allow (__launch_bounds__): 4 (25% occupancy) for 64-wide heads, which
    fit 128 registers unforced (96 on sm_90 for BERT-base); 3 (18.75%) for 128-wide ones (key_tile); 4 spills.
    Fewer rows a block (forced; rows_per_block keeps 64): 1, as each warp stages 2 or 4 times the K/V
    elements: BERT-base's one-warp kernel held to 128 registers (16 blocks) spilled 688 bytes on sm_80."""
    if rows < ROW_CHOICES[0]:
        return 1
    return 4 if max(dh, dv) <= 64 else 3


def _inside(var: str, extent, tile: int) -> str:
    """The test that `var` (a row or key of a tile) lies below `extent`; "true" where a static extent is a
    whole number of tiles (BERT's 128 keys: the guards were 30 branches and kept the 16 mask loads of a
    tile from merging into 8)."""
    return "true" if D.is_static(extent) and extent % tile == 0 else f"{var} < {extent}"


def _spread(threads: int, width: int) -> tuple[str, str]:
    """(row, column) of element r (the unrolled loop's counter) of a thread's share of a tile `width` wide:
    element threadIdx.x + threads * r, as a row and column whose loop-invariant part the compiler keeps
    apart (written as / and % of that sum, the BERT-shaped test kernel spilled 192 bytes at 128 registers);
    unsigned, as threadIdx.x is (a signed / and % cost batch 32's attention 1% more predicted time)."""
    if threads >= width:
        return f"threadIdx.x / {width} + {threads // width} * r", f"threadIdx.x % {width}"
    return f"r / {width // threads}", f"threadIdx.x + {threads} * (r % {width // threads})"


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line else line for line in text.split("\n"))


def _q_fragment(dh: int) -> str:
    """Code reading qf[4], the A fragment of the warp's Q rows at dims 16c .. 16c + 15, from the staged tile
    (one ldmatrix a k step). Held in registers across the key loop instead, Q's 16 (dh 64) registers took
    BERT-base's kernel from 128 to 168 once the bound tests were gone (4 -> 3 blocks an SM)."""
    return (f"        aotc_ldmatrix_x4(qf, Qs + (r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * {dh} + "
            f"(((2 * c + (lane >> 4)) ^ (lane & 7)) << 3));")


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
    rows = rows_per_block(nbatch, m.sq)
    threads = 2 * rows                                          # a warp per 16 rows
    staged = 2 * (rows * m.dh + bn * m.dh + bn * m.dv)          # Q, K and V tiles of b16
    slots = dict(batch_index=em_b.text(), load_q=load_q, load_k=load_k, load_v=load_v, score=em_s.text(),
                 epilogue=em_e.text(), nbatch=nbatch, sq=m.sq, sk=m.sk, dh=m.dh, dv=m.dv, bn=bn, elt=elt,
                 ctype=ctype, to_elt=to_elt, q_frag=_q_fragment(m.dh), row_in=_inside("i", m.sq, rows),
                 key_in=_inside("j", m.sk, bn), min_blocks=min_blocks(m.dh, m.dv, rows), rows=rows,
                 threads=threads, smem_bytes=max(staged, rows * (m.dv + 8) * 4))
    (slots["q_row"], slots["q_col"]), (slots["v_row"], slots["v_col"]) = _spread(threads, m.dh), _spread(threads, m.dv)
    slots["tiles"] = _tile_loops(b, slots, batch_idx, rows, bn, threads)
    tiles = nbatch * D.ceildiv(m.sq, rows)
    return b.finish("attention_mma", {k: v for k, v in slots.items() if k in template_slots("attention_mma.cu")},
                    (D.dmax(1, D.dmin(tiles, MAX_GRID)), 1, 1), (threads, 1, 1))


def _tile_loops(b: KernelBuilder, slots: dict, batch_idx, rows: int, bn: int, threads: int) -> str:
    """The kernel's loop over (head, query tile) blocks (attention_mma_tiles.part): one copy staging per
    element where no operand is a plain view (attention_views.py); else a copy staging the views by cp.async
    and, where a view's pointer is not 16-byte aligned at run time, a cold copy staging all per element in
    rolled loops (so that the profile's main loop, the innermost one with the mma, is the copying one)."""
    m = b.region.payload.match
    views, part = operand_views(b), "attention_mma_tiles.part"
    at = (("q", 0, rows, m.dh, "i0", _inside("x", m.sq, rows)),
          ("k", 2 * rows * m.dh, bn, m.dh, "j0", _inside("x", m.sk, bn)),
          ("v", 2 * (rows * m.dh + bn * m.dh), bn, m.dv, "j0", _inside("x", m.sk, bn)))
    per_element = {k: v for k, v in dict(slots, idx_t=b.idx_t).items() if k in template_slots(part)}
    per_element.update({f"{x}_{what}": "" if what == "copy" else "false" for x in "qkv" for what in ("copy", "async")},
                       wait_copies="", stage_unroll="#pragma unroll")
    if not any(views):
        return instantiate(part, per_element)
    fast = dict(per_element, wait_copies="    aotc_cp_async_wait_all();")
    for view, (x, smem_at, n, width, first, inside) in zip(views, at):
        if view is not None:
            fast[f"{x}_async"] = "true"
            fast[f"{x}_copy"] = _indent(copy_code(view, batch_idx, b.idx_t, str(smem_at), n, width, threads, first,
                                                  inside), 6 if x == "q" else 8)
    cold = dict(per_element, stage_unroll="#pragma unroll 1")
    checks = " && ".join(aligned_test(v) for v in views if v is not None)
    return (f"  if ({checks}) {{\n{instantiate(part, fast, indent=2)}\n  }} else {{\n"
            f"{instantiate(part, cold, indent=2)}\n  }}")
