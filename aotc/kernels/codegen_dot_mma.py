"""GEMM regions on tensor cores: f16/bf16 operands (templates/dot_mma.cu), f32 as tf32 (dot_tf32.cu).

Same region semantics as the SIMT GEMM (prologue loads, f32 accumulation,
epilogue on the accumulator); the inner product runs on mma.m16n8k16 through
aotc's wrappers (templates/aotc_mma.cuh), whose host fallback lets the cpu
device run the identical source. f32 GEMMs take the tf32 kernel only when the
op says precision='tf32' (`--precision tf32`); operands are rounded to tf32 as
they are staged, exactly as the op table's reference rounds them.
"""
from __future__ import annotations

import math

from aotc.fusion.region import GatedPayload
from aotc.fusion.rules.target import TC_RIDGE
from aotc.ir import dims as D
from aotc.ir import dtypes, ops
from aotc.kernels import split_k
from aotc.kernels.builder import (Kernel, KernelBuilder, contiguous_dim, dot_epilogue, dot_operand_load,
                                  dot_operand_pointer, plain_operand)
from aotc.kernels.codegen_gated import gated_b_load, gated_epilogue, gated_width
from aotc.kernels.codegen_norm_prologue import norm_row_stats
from aotc.kernels.emitter import strides
from aotc.kernels.norm_fold import fold_epilogue
from aotc.kernels.mma_views import view_operand
from aotc.kernels.mma_staging import (Operand, can_stage_async, choose_layout, m_fastest, off_grid_rows, staging_slots,
                                     store_slot, tile_slots)


def mma_tiling(b: KernelBuilder, B, M, N, K, gated: bool = False, row_tile: bool = False) -> split_k.Tiling:
    """dot_mma.cu's block tile and K split for this region (split_k.choose_tiling over MMA_TILES, after
    split_k.ROW_TILE where `row_tile`). A gated epilogue's column layout (codegen_gated.py) needs the
    64x64 tile."""
    tiles = split_k.MMA_TILES[:1] if gated else ((split_k.ROW_TILE,) if row_tile else ()) + split_k.MMA_TILES
    return split_k.gemm_tiling("dot_mma", B, M, N, K, b._traffic(), b.split_k, tiles)


def mma_grid(tiling: split_k.Tiling, B, M, N) -> tuple:
    """The launch grid of `tiling`'s blocks over (N, M, B), or (M, N, B) where x walks M
    (mma_staging.m_fastest); builder.finish multiplies z by the splits."""
    n_tiles, m_tiles = D.ceildiv(N, tiling.bn), D.ceildiv(M, tiling.bm)
    return (m_tiles, n_tiles, B) if m_fastest((tiling.bm, tiling.bn)) else (n_tiles, m_tiles, B)


def generate_dot_mma(b: KernelBuilder, geometry) -> Kernel:
    """The dot_tf32 (f32 operands, precision='tf32') or dot_mma kernel of a dot_general region; a norm
    prologue's row statistics cover the block tile's rows."""
    bshape, mshape, nshape, kshape, B, M, N, K = geometry
    anchor = b.region.anchor
    lhs, rhs = b.operands()
    a = anchor.attrs
    lf, rf = ops.dot_free_dims(a, lhs.type.rank, rhs.type.rank)
    gated = b.region.payload_as(GatedPayload)
    tf32 = lhs.dtype == dtypes.f32
    sector = off_grid_rows(N, b.region.root.dtype.itemsize) if not gated and b.row_major_root() else 0
    row_tile = bool(sector) and N <= 65535 * split_k.ROW_TILE[1] and _memory_bound(b, B, M, N, K) and \
        choose_layout(contiguous_dim(b, rhs), a["rhs_contract"], rf) == "k"
    tiling = split_k.Tiling() if tf32 else \
        mma_tiling(b, B, M, gated_width(gated.width, gated.blocks) if gated else N, K, gated=bool(gated),
                   row_tile=row_tile)
    row_stats, norm = norm_row_stats(b, mshape, kshape, M, K, tile_m=tiling.bm)
    if b.fold is not None:
        fold_epilogue(b, b.fold)
    load_a = dot_operand_load(b, bshape, "A", lhs, a["lhs_batch"], lf, a["lhs_contract"], "am", "ak",
                              mshape, kshape, "a", indent=4, overrides=norm)
    def load_b(flat):
        return dot_operand_load(b, bshape, "B", rhs, a["rhs_batch"], a["rhs_contract"], rf, "bk", flat,
                                kshape, nshape, "bv", indent=4)

    if gated:                      # SwiGLU / LSTM-cell epilogue over the GEMM's k column blocks
        f, k = gated.width, gated.blocks
        N = gated_width(f, k)
        load_b = gated_b_load(load_b, "mma", f, b.idx_t, 3, k)
        em = gated_epilogue(b, "mma", bshape, mshape, f, indent=5, k=k)
    else:
        load_b = load_b("bn")
        em = dot_epilogue(b, bshape, mshape, nshape, M, N, indent=5)
    if tf32:
        slots = dict(load_a=load_a, load_b=load_b, epilogue=em.text(), batch=B, m=M, n=N, k=K,
                     row_stats=row_stats, to_elt="aotc_tf32", **tile_slots())
        return b.finish("dot_tf32", slots, (D.ceildiv(N, 64), D.ceildiv(M, 64), B), (128, 1, 1))
    tile = (tiling.bm, tiling.bn)
    bf16 = lhs.dtype == dtypes.bf16
    to_elt = "__float2bfloat16" if bf16 else "__float2half"
    op_a, base_a = _operand(b, "A", lhs, a["lhs_batch"], lf, a["lhs_contract"], bshape, mshape, kshape, M, K,
                    norm or {}, load_a)
    op_b, base_b = _operand(b, "B", rhs, a["rhs_batch"], a["rhs_contract"], rf, bshape, kshape, nshape, N, K,
                    {} if not gated else None, load_b)
    elt = "bf16" if bf16 else "f16"
    slots = dict(store=store_slot(em.text(), b.idx_t, M, N, registers=bool(gated), tile=tile, sector=sector),
                 batch=B, m=M, n=N, k=K, elt=elt, ctype=lhs.dtype.c, row_stats=row_stats, tiling=tiling,
                 **staging_slots(op_a, op_b, b.idx_t, lhs.dtype.c, to_elt, elt, M, N,
                                 base_a, base_b, tile))
    return b.finish("dot_mma", slots, mma_grid(tiling, B, M, N), (128, 1, 1))


def _memory_bound(b: KernelBuilder, B, M, N, K) -> bool:
    """The GEMM's FLOPs a modelled byte are at most the tensor-core ridge (static sizes): its bytes, not
    its math, set its time, and ROW_TILE's store efficiency is worth its lower HMMA share (35% to 64x64's
    41% at GPT-2's LM head, sm_90). At batch 32 that head is compute-bound and keeps 64x64."""
    sizes, traffic = [D.known(x) for x in (B, M, N, K)], D.known(b._traffic())
    if None in sizes or not traffic:
        return False
    return 2 * math.prod(sizes) <= TC_RIDGE * traffic


def _operand(b: KernelBuilder, which: str, value, batch_dims, dims_x, dims_y, bshape, shape_x, shape_y,
             extent, K, overrides, load: str) -> tuple[Operand, str]:
    """How dot_mma stages operand A (dims_x = m, dims_y = k) or B (dims_x = k, dims_y = n), and the
    parameter its cp.async chunks read ("nullptr" for none).

    `overrides` None: the operand's load is not a plain one (a gated B's column map), whatever the value is."""
    rank = value.type.rank
    contract = dims_y if which == "A" else dims_x
    free = dims_x if which == "A" else dims_y
    layout = choose_layout(contiguous_dim(b, value), contract, free)
    run = K if layout == "k" else extent
    if overrides is not None and plain_operand(b, value, overrides) and can_stage_async(layout, contract, rank, run):
        flat_x, flat_y = ("am", "ak") if which == "A" else ("bk", "bn")
        address = dot_operand_pointer(b, bshape, which, value, batch_dims, dims_x, dims_y, flat_x, flat_y,
                                      shape_x, shape_y, "src", indent=2)
        return Operand(which, layout, address=address, load=load, k_stride=_stride(value, contract),
                       mn_stride=_stride(value, free)), b.param_names[value]
    if overrides == {} and can_stage_async(layout, contract, rank, run):
        view = view_operand(b, which, value, batch_dims, dims_x, dims_y, bshape, shape_x, shape_y, layout, load)
        if view is not None:
            return view
    return Operand(which, layout, load=load), "nullptr"


def _stride(value, dims) -> str | None:
    """Elements between x and x + 1 of the flat index over `dims` of a plain operand where that is one dim
    (the address is then linear in it); None for several (the flat index unravels into them)."""
    if len(dims) != 1:
        return None
    return str(strides(value.shape)[dims[0]])
