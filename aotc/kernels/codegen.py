"""Region -> CUDA C kernel: one template per region kind, slots filled by the emitter.

Templates live in `templates/<kind>.cu` as plain CUDA with `${slot}`s (filled by
template.py); this module computes the slots (index unravelling, operand loads
with their prologue, the epilogue and store) and the launch geometry, and
KernelBuilder.finish (builder.py) names each kernel by a hash of its text, so
identical regions share one kernel.
"""
from __future__ import annotations

import math

from aotc.errors import UnsupportedError
from aotc.fusion.region import GatedPayload, Region
from aotc.ir import dims as D
from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph
from aotc.kernels import codegen_conv as cc
from aotc.kernels.builder import (MAX_GRID, Kernel, KernelBuilder, acc_type, dot_epilogue, dot_operand_load,
                                  contiguous_dim, multiply_add, reduce_identity, simt_grid, simt_tile_slots,
                                  simt_tiling, unravel)
from aotc.kernels.codegen_attention import generate_attention
from aotc.kernels.codegen_attention_int8 import generate_attention_int8
from aotc.kernels.codegen_attention_mma import generate_attention_mma, mma_attention_fits
from aotc.kernels.codegen_chain import generate_chain
from aotc.kernels.codegen_dot_mma import generate_dot_mma
from aotc.kernels.codegen_conv8 import generate_conv8
from aotc.kernels.codegen_mma8 import generate_dot_mma8, is_mma8
from aotc.kernels.codegen_gated import gated_b_load, gated_epilogue, gated_width
from aotc.kernels.codegen_norm_prologue import norm_row_stats
from aotc.kernels.norm_fold import fold_epilogue, plan_fold
from aotc.kernels.codegen_vector import vector_loop
from aotc.kernels.emitter import compute_type, linear, literal, store_expr
from aotc.kernels.template import instantiate

LOOP_BLOCK = 256
WARP_ROW_MAX = 256       # rows up to this long get a warp each (8 per block), longer ones a block
ROW_WARPS = 8
COLUMN_MAX = 64          # a reduction keeping the innermost axis takes a thread per output up to this extent


def _grid_1d(total, block: int) -> tuple:
    """A grid-stride launch over `total` (an int or a dynamic DimExpr) items."""
    return (grid_blocks(total, block), 1, 1)


def grid_blocks(total, per_block) -> int:
    """Blocks for `total` items, `per_block` each: at least 1, at most MAX_GRID (grid-stride loops do the rest)."""
    return D.dmax(1, D.dmin(D.ceildiv(total, per_block), MAX_GRID))


def _fits_warp(extent) -> bool:
    """Rows short enough for a warp each; a dynamic extent gets the block kernel unless its whole range fits."""
    return D.upper(extent) <= WARP_ROW_MAX


def _row_block(extent, warp: bool) -> int:
    if warp or not D.is_static(extent) or extent >= 256:
        return 256
    return max(32, 32 * math.ceil(extent / 32))


def generate(graph: Graph, region: Region, producer=None, split_k: bool = True) -> Kernel:
    """The kernel computing `region` of `graph` (`split_k`: may split a GEMM's K loop, see split_k.py)."""
    producer = producer if producer is not None else graph.producers()
    b = KernelBuilder(graph, region, producer, split_k)
    gen = {"loop": _loop, "reduction": _reduction, "dot": _dot, "conv": _conv, "window": _window,
           "row": _row, "attention": _attention, "chain": generate_chain}
    return gen[region.kind](b)


def _attention(b: KernelBuilder) -> Kernel:
    match = b.region.payload.match
    if match.quantized:
        return generate_attention_int8(b)
    return generate_attention_mma(b) if mma_attention_fits(match) else generate_attention(b)


def _loop(b: KernelBuilder) -> Kernel:
    root = b.region.root
    total = root.type.size
    em = b.emitter(indent=2)
    idx = unravel(em, "i", root.shape, "o")
    b.store_root(em, idx)
    for j, v in enumerate(b.region.extra_roots):      # a merged sibling loop: same index, own buffer
        em.emit(store_expr(f"out{j + 1}", linear(idx, v.shape), em.value(v, idx), v.dtype))
    block = LOOP_BLOCK
    vector, start = vector_loop(b, em.text()) if not b.region.extra_roots else ("", "0")
    threads = total // (16 // root.dtype.itemsize) if vector else total
    return b.finish("loop", dict(body=em.text(), total=total, block=block, vector=vector, scalar_start=start),
                    _grid_1d(threads, block), (block, 1, 1))


def _row(b: KernelBuilder) -> Kernel:
    """Softmax/norm-style regions: per-row reductions as phases, then the outputs."""
    region = b.region
    reduces = [n for n in region.nodes if n.op == "reduce"]
    shape = reduces[0].inputs[0].shape
    rows_shape = reduces[0].outputs[0].shape
    inner = shape[len(rows_shape):]
    rows, extent = math.prod(rows_shape), math.prod(inner)
    warp = _fits_warp(extent)
    block = _row_block(extent, warp)
    first, step = ("lane", "32") if warp else ("threadIdx.x", "blockDim.x")
    em_row = b.emitter(indent=2)
    kept = unravel(em_row, "row", rows_shape, "o")
    phases, overrides = [], {}
    for j, red in enumerate(reduces):
        kind = red.attrs["kind"]
        em = b.emitter(indent=4, overrides=dict(overrides))
        idx = kept + unravel(em, "c", inner, f"c{j}_")
        v = em.value(red.inputs[0], idx)
        phases.append(instantiate("reduce_phase.part", dict(
            red=f"red{j}", init=reduce_identity(kind, red.inputs[0].dtype), idx_t=b.idx_t, first=first, extent=extent,
            step=step, load=em.text(), kind=kind, value=v,
            combine=f"aotc_warp_{kind}(acc)" if warp else f"aotc_block_{kind}(acc, aotc_sh)"), indent=4))
        overrides[red.outputs[0]] = f"red{j}"
    em_store = b.emitter(indent=3, overrides=overrides)
    idx = kept + unravel(em_store, "c", inner, "cs_")
    b.store_root(em_store, idx)
    slots = dict(row_index=em_row.text(), phases="\n".join(phases), store=em_store.text(), rows=rows,
                 extent=extent, block=block)
    if warp:
        return b.finish("row_warp", dict(slots, warps=ROW_WARPS), (grid_blocks(rows, ROW_WARPS), 1, 1), (block, 1, 1))
    return b.finish("row", slots, (grid_blocks(rows, 1), 1, 1), (block, 1, 1))


def _reduction(b: KernelBuilder) -> Kernel:
    anchor = b.region.anchor
    x = anchor.inputs[0]
    axes = anchor.attrs["axes"]
    kind = anchor.attrs["kind"]
    out = anchor.outputs[0]
    rows = out.type.size
    extent = math.prod(x.shape[a] for a in axes)
    acc_t = acc_type(x.dtype)
    warp = _fits_warp(extent)
    block = _row_block(extent, warp)
    em_row = b.emitter(indent=2)
    kept = unravel(em_row, "row", out.shape, "o")
    em_load = b.emitter(indent=3)
    red = unravel(em_load, "r", [x.shape[a] for a in axes], "q")
    full, ki, ri = [], iter(kept), iter(red)
    for d in range(x.type.rank):
        full.append(next(ri) if d in axes else next(ki))
    v = em_load.value(x, full)
    em_load.emit(f"acc = AOTC_COMBINE_{kind}(acc, ({acc_t})({v}));")
    acc_val = "acc" if x.dtype.is_float else f"(({compute_type(out.dtype)})acc)"
    em_epi = b.emitter(indent=4, overrides={out: acc_val})
    b.store_root(em_epi, b.root_index(em_epi, kept))     # the epilogue may reshape or transpose
    slots = dict(row_index=em_row.text(), load=em_load.text(), epilogue=em_epi.text(), rows=rows,
                 extent=extent, acc_t=acc_t, init=reduce_identity(kind, x.dtype), kind=kind, block=block)
    if x.type.rank - 1 not in axes and D.is_static(extent) and extent <= COLUMN_MAX:
        del slots["kind"]                # a thread's serial loop: no warp combine
        return b.finish("reduce_column", dict(slots, block=LOOP_BLOCK), (grid_blocks(rows, LOOP_BLOCK), 1, 1),
                        (LOOP_BLOCK, 1, 1))
    if warp:
        return b.finish("reduce_warp", dict(slots, warps=ROW_WARPS), (grid_blocks(rows, ROW_WARPS), 1, 1),
                        (block, 1, 1))
    return b.finish("reduce", slots, (grid_blocks(rows, 1), 1, 1), (block, 1, 1))


def _dot(b: KernelBuilder) -> Kernel:
    anchor = b.region.anchor
    fold = plan_fold(b.graph, b.region, b.producer)
    if fold is not None:                   # a norm prologue folded into the weights: the GEMM reads raw x
        b.apply_fold(fold)
    lhs, rhs = b.operands()
    lb, rb = anchor.attrs["lhs_batch"], anchor.attrs["rhs_batch"]
    lc, rc = anchor.attrs["lhs_contract"], anchor.attrs["rhs_contract"]
    lf, rf = ops.dot_free_dims(anchor.attrs, lhs.type.rank, rhs.type.rank)
    bshape = [lhs.shape[d] for d in lb]
    mshape, nshape = [lhs.shape[d] for d in lf], [rhs.shape[d] for d in rf]
    kshape = [lhs.shape[d] for d in lc]
    B, M, N, K = (math.prod(s) for s in (bshape, mshape, nshape, kshape))
    if D.upper(B) > 65535:
        raise UnsupportedError(f"dot_general '{anchor.name}': batch {B} exceeds the grid's z limit 65535")

    if is_mma8(anchor):                    # int8 / fp8 operands (the op's out_dtype): codegen_mma8.py
        row_stats, norm = norm_row_stats(b, mshape, kshape, M, K)
        return generate_dot_mma8(b, (bshape, mshape, nshape, kshape, B, M, N, K), row_stats, norm)
    if lhs.dtype == rhs.dtype and (lhs.dtype in (dtypes.f16, dtypes.bf16) or
                                   anchor.attrs.get("precision") == "tf32"):
        return generate_dot_mma(b, (bshape, mshape, nshape, kshape, B, M, N, K))
    gated = b.region.payload_as(GatedPayload)
    N = gated_width(gated.width, gated.blocks) if gated else N
    tiling = simt_tiling(b, B, M, N, K, gated=bool(gated))
    row_stats, norm = norm_row_stats(b, mshape, kshape, M, K, tile_m=tiling.bm)
    if fold is not None:
        fold_epilogue(b, fold)

    def operand_load(var, value, batch_dims, dims_a, dims_b, flat_a, flat_b, shape_a, shape_b):
        return dot_operand_load(b, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b,
                                shape_a, shape_b, "a" if var == "A" else "bv",
                                overrides=norm if var == "A" else None)

    load_a = operand_load("A", lhs, lb, lf, lc, "am", "ak", mshape, kshape)
    if gated:                      # SwiGLU / LSTM-cell epilogue over the GEMM's k column blocks
        f, k = gated.width, gated.blocks
        load_b = gated_b_load(lambda flat: operand_load("B", rhs, rb, rc, rf, "bk", flat, kshape, nshape),
                              "simt", f, b.idx_t, 4, k)
        em = gated_epilogue(b, "simt", bshape, mshape, f, indent=4, k=k)
    else:
        load_b = operand_load("B", rhs, rb, rc, rf, "bk", "bn", kshape, nshape)
        em = dot_epilogue(b, bshape, mshape, nshape, M, N, indent=4)
    slots = dict(load_a=load_a, load_b=load_b, epilogue=em.text(), batch=B, m=M, n=N, k=K, row_stats=row_stats,
                 **simt_tile_slots(tiling, list(rc) == [contiguous_dim(b, rhs)], lhs.dtype))
    return b.finish("dot", slots, simt_grid(tiling, B, M, N), (tiling.threads, 1, 1))


def _window_nest(idx_t: str, depth: int, out_idx, spatial_dims, kshape, strides_, pads, dils, sizes,
                 body: str) -> str:
    """`body` inside one loop per window dim (window_loop.part), the outermost at emitter depth `depth`.

    Tap j's loop variable is k<j> and its input coordinate q<j>; `body` is emitted at depth
    `depth + len(spatial_dims)`."""
    for j in reversed(range(len(spatial_dims))):
        d = spatial_dims[j]
        base = out_idx[d] if strides_[j] == 1 else f"{out_idx[d]} * {strides_[j]}"
        off = f" - {pads[j][0]}" if pads[j][0] else ""
        kd = f"k{j}" if dils[j] == 1 else f"k{j} * {dils[j]}"
        body = instantiate("window_loop.part", dict(idx_t=idx_t, k=f"k{j}", q=f"q{j}", taps=kshape[j],
                                                    coord=f"{base}{off} + {kd}", size=sizes[j], body=body),
                           indent=2 * (depth + j))
    return body


def _conv(b: KernelBuilder) -> Kernel:
    anchor = b.region.anchor
    x, w = anchor.inputs
    out = anchor.outputs[0]
    a = anchor.attrs
    nsp = x.type.rank - 2
    total = out.type.size
    if is_mma8(anchor):                    # int8 / fp8 operands (the op's out_dtype): codegen_conv8.py
        return generate_conv8(b)
    if a.get("layout", "NCHW") == "NHWC" and x.dtype != dtypes.f64:     # f64: the direct kernel's double accumulator
        if cc.project_source(b.region) is not None:
            return cc.generate_depthwise_project(b)
        if cc.is_depthwise(b) and cc.depthwise_fits(b):
            return cc.generate_depthwise(b)
        if a["groups"] == 1:
            return cc.generate_implicit_gemm(b)
    # direct kernel: NCHW and grouped convs. NCHW: x (N, C, *S), w (O, C/g, *K), out (N, O, *S); NHWC: channels last in all three
    last = a.get("layout", "NCHW") == "NHWC"
    cdim = x.type.rank - 1 if last else 1
    spatial = list(range(1, 1 + nsp)) if last else list(range(2, 2 + nsp))
    em_idx = b.emitter(indent=2)
    oidx = unravel(em_idx, "i", out.shape, "o")
    oc = f"o{cdim}"            # the template reads the channel variable even when the dim is 1
    if out.shape[cdim] == 1:
        em_idx.emit(f"(void){oc};")
    em_win = b.emitter(indent=3 + nsp)
    q, ks = [f"q{j}" for j in range(nsp)], [f"k{j}" for j in range(nsp)]
    if last:
        xv = em_win.value(x, [oidx[0]] + q + ["ci"])
        wv = em_win.value(w, [oidx[cdim]] + ks + ["c"])
    else:
        xv = em_win.value(x, [oidx[0], "ci"] + q)
        wv = em_win.value(w, [oidx[1], "c"] + ks)
    if a.get("precision") == "tf32":        # the op's operands are tf32 values (see ops.round_tf32)
        xv, wv = f"aotc_tf32({xv})", f"aotc_tf32({wv})"
    em_win.emit(multiply_add(x.dtype, "acc", xv, wv))
    window = _window_nest(b.idx_t, 3, oidx, spatial, [w.shape[d] for d in spatial], a["strides"], a["padding"],
                          a["dilations"], [x.shape[d] for d in spatial], em_win.text())
    em_epi = b.emitter(indent=2, overrides={out: "acc"})
    b.store_root(em_epi, b.root_index(em_epi, oidx))
    cg, og = w.shape[cdim], w.shape[0] // a["groups"]
    slots = dict(out_index=em_idx.text(), window=window, epilogue=em_epi.text(), total=total,
                 cg=cg, og=og, oc=oc, acc_t=acc_type(x.dtype), block=LOOP_BLOCK)
    return b.finish("conv", slots, _grid_1d(total, LOOP_BLOCK), (LOOP_BLOCK, 1, 1))


def _window(b: KernelBuilder) -> Kernel:
    anchor = b.region.anchor
    (x,) = anchor.inputs
    out = anchor.outputs[0]
    a = anchor.attrs
    kind = a["kind"]
    total = out.type.size
    acc_t = acc_type(x.dtype)
    em_idx = b.emitter(indent=2)
    oidx = unravel(em_idx, "i", out.shape, "o")
    dims = list(range(x.type.rank))
    em_win = b.emitter(indent=2 + len(dims))
    v = em_win.value(x, [f"q{j}" for j in dims])
    em_win.emit(f"acc = AOTC_COMBINE_{kind}(acc, ({acc_t})({v}));")
    window = _window_nest(b.idx_t, 2, oidx, dims, a["window"], a["strides"], a["padding"], a["dilations"], x.shape,
                          em_win.text())
    acc_val = "acc" if x.dtype.is_float else f"(({compute_type(out.dtype)})acc)"
    em_epi = b.emitter(indent=2, overrides={out: acc_val})
    b.store_root(em_epi, b.root_index(em_epi, oidx))
    slots = dict(out_index=em_idx.text(), window=window, epilogue=em_epi.text(), total=total,
                 acc_t=acc_t, init=reduce_identity(kind, x.dtype), block=LOOP_BLOCK)
    return b.finish("window", slots, _grid_1d(total, LOOP_BLOCK), (LOOP_BLOCK, 1, 1))


def module_source(kernels: list[Kernel]) -> str:
    """One translation unit holding every distinct kernel of an engine."""
    parts = []
    if any(k.uses_fp16 for k in kernels):
        parts.append("#define AOTC_USE_FP16 1")
    parts += ['#include "aotc_prelude.cuh"', '#include "aotc_ops.cuh"']
    if any(k.name.startswith(("aotc_dot_mma_", "aotc_attention_mma_")) for k in kernels):   # cp.async/ldmatrix
        parts.append('#include "aotc_async.cuh"')
    if any(k.name.startswith(("aotc_dot_mma_", "aotc_dot_tf32_", "aotc_attention_mma_")) for k in kernels):
        parts.append('#include "aotc_mma.cuh"')
    if any(k.name.startswith(("aotc_dot_mma8_", "aotc_attention_int8_mma_")) for k in kernels):
        parts.append('#include "aotc_mma8.cuh"')
    parts.append("")
    seen = set()
    for k in kernels:
        if k.name not in seen:
            seen.add(k.name)
            parts.append(k.source)
    return "\n".join(parts) + "\n"


__all__ = ["Kernel", "generate", "module_source", "literal"]
