"""f16/bf16 attention regions -> one tensor-core flash-attention kernel (templates/attention_mma.cu).

The SIMT kernel (codegen_attention.py) spends BERT-base fp16's attention on
FFMAs, one warp per query row; this one runs both products on mma.m16n8k16
with f32 accumulation, FlashAttention-2 style: 16 query rows a warp, 4 warps
a block, K/V tiles of `key_tile` keys a warp in swizzled shared memory. The
block's warps own 64 rows and share the keys, or, where the grid is too small
to fill the SM partitions, own 32 or 16 rows and split the keys 2 or 4 ways,
merging their partial softmaxes at the end (`block_form`; the template also
takes 1- and 2-warp blocks, which the tests force). The region's pieces
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
from aotc.fusion.rules.target import sm_fill
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
    """Query rows a block where its warps share the keys: 64 (4 warps). The kernel also runs 32 and 16 (2 and
    1 warps; the tests force them), but fewer rows a block only spread the same warps over more SMs: each warp
    runs on one of an SM's 4 partitions, and those partitions hold the tensor cores, so 96 one-warp blocks
    keep the 96 partitions busy that 24 four-warp blocks do (profile/model.py's sm_fill), while each block
    re-reads the K/V tiles for fewer rows. BERT-base fp16 at batch 1, Q/K/V copied: 2.41 us predicted at 64
    rows against 2.50 at 16, and no launch under 25% occupancy (16 rows: 146 registers, 12 warps an SM).
    More partitions at a small grid come from splitting the keys among a block's warps (key_splits)."""
    return ROW_CHOICES[0]


SPLIT_CHOICES = (1, 2, 4)   # warps of a 4-warp block sharing each row group's keys: 64, 32 or 16 rows a block
SPLIT_GAIN = 1.25           # the SM fill a key split must multiply to be taken (see key_splits)


def key_splits(nbatch, sq) -> int:
    """Warps of a 4-warp block that split the keys of the same 16-row groups (1: the 64-row form; 2: 32 rows;
    4: 16 rows), each running the online softmax over its share and merging (m, l, O) in shared memory. The
    grid grows by the split and so does SM fill (profile/model.py's sm_fill: blocks x 4 warps of the 528
    partitions): BERT-base at batch 1 (12 heads, 128 queries) is 24 blocks, 96 partitions (18%), split 4
    ways 96 blocks, 384 (73%). A split re-reads each K/V tile for fewer rows and adds the merge, so it is
    taken only where it raises the fill by SPLIT_GAIN (at batch 32, 768 blocks fill 97% as 3072 do). Only
    the warps with query rows count (fewer than 64 queries leave row groups of the 64-row block idle, so a
    split pays there at any grid: one query is one busy warp, or four splitting its keys). A dynamic grid
    is judged at its largest (the range's upper bound), where the time is. BERT-base fp16 at batch 1:
    2.41 -> 1.18 us predicted; the 16 x 4 kernel's 128 keys are one staged tile, so it has no main loop
    and the model charges full issue efficiency (at the 64-row loop's 6.4% HMMA share it would be 1.33 us;
    at the whole kernel's 3.3%, cold copy included, 1.65 us)."""
    heads, queries = D.upper(nbatch), D.upper(sq)

    def fill(s: int) -> float:
        rows = ROW_CHOICES[0] // s
        busy = min(-(-queries // 16), rows // 16) * s           # warps a block with rows to run
        return sm_fill((heads * -(-queries // rows),), (32 * busy,))
    fills = {s: fill(s) for s in SPLIT_CHOICES}
    best = max(SPLIT_CHOICES, key=lambda s: (fills[s], -s))
    return best if fills[best] >= SPLIT_GAIN * fills[1] else 1


def block_form(nbatch, sq) -> tuple[int, int]:
    """(query rows a block, key splits): warps = rows / 16 x splits (the tests force any form here)."""
    splits = key_splits(nbatch, sq)
    return (rows_per_block(nbatch, sq), 1) if splits == 1 else (ROW_CHOICES[0] // splits, splits)


def min_blocks(dh: int, dv: int, rows: int = ROW_CHOICES[0], splits: int = 1) -> int:
    """Blocks an SM the registers must allow (__launch_bounds__): 4 (25% occupancy) for 64-wide heads, which
    fit 128 registers unforced (96 on sm_90 for BERT-base); 3 (18.75%) for 128-wide ones (key_tile); 4 spills.
    Fewer warps a block (forced; the policy's blocks have 4): 1, as each warp stages 2 or 4 times the K/V
    elements: BERT-base's one-warp kernel held to 128 registers (16 blocks) spilled 688 bytes on sm_80."""
    if rows // 16 * splits < 4:
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
    rows, splits = block_form(nbatch, m.sq)
    groups = rows // 16
    threads, kstage = 32 * groups * splits, splits * bn        # a warp per 16 rows and key share
    staged = 2 * (rows * m.dh + kstage * m.dh + kstage * m.dv)  # Q, K and V tiles of b16
    merged = splits * rows * (m.dv + 8) * 4                     # each key share's O, after the loop
    slots = dict(batch_index=em_b.text(), load_q=load_q, load_k=load_k, load_v=load_v, score=em_s.text(),
                 epilogue=em_e.text(), nbatch=nbatch, sq=m.sq, sk=m.sk, dh=m.dh, dv=m.dv, bn=bn, elt=elt,
                 ctype=ctype, to_elt=to_elt, q_frag=_q_fragment(m.dh), row_in=_inside("i", m.sq, rows),
                 key_in=_inside("j", m.sk, kstage), min_blocks=min_blocks(m.dh, m.dv, rows, splits), rows=rows,
                 threads=threads, kstage=kstage, splits=splits)
    if splits == 1:
        slots.update(r0="16 * warp", kb="0", merge_smem="", smem_bytes=max(staged, merged),
                     finish=_normalize(m.dv), o_value=f"Os[row * ({m.dv} + 8) + (int)d]")
    else:
        ml_at = -(-max(staged, merged) // 16) * 16
        slots.update(r0=f"16 * (warp % {groups})", kb=f"{bn} * (warp / {groups})",
                     merge_smem=(f"  float *Ms = reinterpret_cast<float *>(aotc_smem + {ml_at}), *Ls = Ms + "
                                 f"{splits * rows};  // each warp's row max and sum, apart from the tiles and Os"),
                     smem_bytes=ml_at + 2 * splits * rows * 4, finish=_merge(m.dv, rows, groups, splits),
                     o_value=" + ".join(f"Os[({w * rows} + row) * ({m.dv} + 8) + (int)d]" for w in range(splits)))
    (slots["q_row"], slots["q_col"]), (slots["v_row"], slots["v_col"]) = _spread(threads, m.dh), _spread(threads, m.dv)
    slots["tiles"] = _tile_loops(b, slots, batch_idx, rows, kstage, threads)
    tiles = nbatch * D.ceildiv(m.sq, rows)
    return b.finish("attention_mma", {k: v for k, v in slots.items() if k in template_slots("attention_mma.cu")},
                    (D.dmax(1, D.dmin(tiles, MAX_GRID)), 1, 1), (threads, 1, 1))


def _normalize(dv: int) -> str:
    """Keys not split: each warp writes its rows' O / l to Os for the epilogue."""
    return f"""    __syncthreads();                                   // every warp is done with the K/V tiles
#pragma unroll
    for (int n = 0; n < {dv} / 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2 *>(&Os[(r0 + g + 8 * h) * ({dv} + 8) + 8 * n + 2 * t]) =
            make_float2(o[n][2 * h] / lrow[h], o[n][2 * h + 1] / lrow[h]);
    __syncthreads();"""


def _merge(dv: int, rows: int, groups: int, splits: int) -> str:
    """Keys split: the `splits` warps of a row group merge their partial softmaxes (flash-decoding's
    O = sum_w exp(m_w - m) O_w / sum_w exp(m_w - m) l_w): each publishes its rows' (m_w, l_w), then writes
    exp(m_w - m) / L x O_w to its own Os slice, and the epilogue sums the slices. A row with no finite score
    in any share has L = 0 and takes 0 / 0 = NaN, as the unsplit kernel (and the interpreter) do; a share
    with none (keys past the end) has m_w = -inf and weighs 0."""
    share = f"(warp / {groups}) * {rows}"
    return f"""    if (t == 0)                                        // this warp's partial (m, l) of rows g and g + 8
#pragma unroll
      for (int h = 0; h < 2; ++h) {{
        Ms[{share} + r0 + g + 8 * h] = mrow[h];
        Ls[{share} + r0 + g + 8 * h] = lrow[h];
      }}
    __syncthreads();                                   // every warp is done with the K/V tiles, (m, l) published
#pragma unroll
    for (int h = 0; h < 2; ++h) {{
      const int row = r0 + g + 8 * h;
      float mx = -AOTC_INF, l = 0.0f;
#pragma unroll
      for (int w = 0; w < {splits}; ++w) mx = aotc_max(mx, Ms[w * {rows} + row]);
      const float m_ref = (mx == -AOTC_INF) ? 0.0f : mx;
#pragma unroll
      for (int w = 0; w < {splits}; ++w) l += expf(Ms[w * {rows} + row] - m_ref) * Ls[w * {rows} + row];
      const float scale = expf(mrow[h] - m_ref) / l;
#pragma unroll
      for (int n = 0; n < {dv} / 8; ++n)
        *reinterpret_cast<float2 *>(&Os[({share} + row) * ({dv} + 8) + 8 * n + 2 * t]) =
            make_float2(o[n][2 * h] * scale, o[n][2 * h + 1] * scale);
    }}
    __syncthreads();"""


def _stage_unroll(slots: dict) -> str:
    """The per-element staging loops' unroll: whole, or with the keys split (each thread staging `splits`
    times the elements) as deep as the unsplit 64-row block's K loop, bn x dh / 128 elements: unrolled whole,
    the loads hoisted ahead of the stores took the dh-128 16 x 4 kernel to 168 registers and 32 bytes of
    spills at 3 blocks an SM (sm_90; 249 registers unforced)."""
    if slots["splits"] == 1:
        return "#pragma unroll"
    return f"#pragma unroll {slots['bn'] * slots['dh'] // 128}"


def _tile_loops(b: KernelBuilder, slots: dict, batch_idx, rows: int, kstage: int, threads: int) -> str:
    """The kernel's loop over (head, query tile) blocks (attention_mma_tiles.part): one copy staging per
    element where no operand is a plain view (attention_views.py); else a copy staging the views by cp.async
    and, where a view's pointer is not 16-byte aligned at run time, a cold copy staging all per element in
    rolled loops (so that the profile's main loop, the innermost one with the mma, is the copying one)."""
    m = b.region.payload.match
    views, part = operand_views(b), "attention_mma_tiles.part"
    at = (("q", 0, rows, m.dh, "i0", _inside("x", m.sq, rows)),
          ("k", 2 * rows * m.dh, kstage, m.dh, "j0", _inside("x", m.sk, kstage)),
          ("v", 2 * (rows * m.dh + kstage * m.dh), kstage, m.dv, "j0", _inside("x", m.sk, kstage)))
    per_element = {k: v for k, v in dict(slots, idx_t=b.idx_t).items() if k in template_slots(part)}
    per_element.update({f"{x}_{what}": "" if what == "copy" else "false" for x in "qkv" for what in ("copy", "async")},
                       wait_copies="", stage_unroll=_stage_unroll(slots))
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
