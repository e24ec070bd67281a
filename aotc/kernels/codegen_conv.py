"""Channels-last convolution regions -> implicit GEMM or the depthwise kernel.

NHWC makes a convolution a GEMM without materializing anything: with
M = N*OH*OW output pixels, N = O output channels and K = KH*KW*C taps, row m
of A is the receptive field of pixel m, read straight from x (zero where it
falls in the padding), and B[k, o] is w[o, kh, kw, c] (weights are stored
(O, *K, C), so K is contiguous). So a dense NHWC conv reuses the GEMM kernels
(templates/dot.cu; dot_mma.cu for f16/bf16 and dot_tf32.cu for precision='tf32'
on tensor cores) with conv-specific operand loads; only the index math differs.
Depthwise convs (one filter per channel) do too little work per byte for a GEMM
and get their own kernel (templates/depthwise.cu), which may also compute a
fused 1x1 expansion conv while it stages its input patch. A 1x1 conv fed by
such a depthwise conv runs in that kernel too (templates/depthwise_project.cu):
the depthwise result stays in shared memory and each block multiplies its
channels into the pointwise outputs, channel splits meeting as split-K
partials (MobileNet's whole block, one kernel). Everything else
(NCHW, grouped convs, windows too large for shared memory) stays on the direct
kernel in codegen.py.
"""
from __future__ import annotations

import math

from aotc.ir import dims as D
from aotc.fusion.region import ConvPayload
from aotc.fusion.rules.conv import DW_BLOCK, channel_tile, depthwise_node_fits, depthwise_project_fits
from aotc.fusion.rules.conv import depthwise_tile as _depthwise_tile
from aotc.fusion.rules.conv import project_plan as _project_plan
from aotc.ir import dtypes
from aotc.kernels.builder import (Kernel, KernelBuilder, dot_epilogue, plain_operand, simt_grid, simt_tile_slots,
                                  simt_tiling, unravel)
from aotc.kernels.emitter import linear, strides
from aotc.kernels.codegen_dot_mma import mma_grid, mma_tiling
from aotc.kernels.mma_staging import CHUNK, ROW_MARK, Operand, staging_slots, store_slot, tile_slots
from aotc.kernels.template import instantiate


def conv_geometry(b: KernelBuilder):
    """(x, w, out, attrs, spatial rank) of the region's convolution."""
    anchor = b.region.anchor
    x, w = anchor.inputs
    return x, w, anchor.outputs[0], anchor.attrs, x.type.rank - 2


def is_depthwise(b: KernelBuilder) -> bool:
    x, w, out, a, nsp = conv_geometry(b)
    return nsp == 2 and w.shape[-1] == 1 and a["groups"] == x.shape[-1] == out.shape[-1]


def _tap_coords(em, pix, taps, a, sizes, prefix: str):
    """Input coordinates of output pixel `pix` at tap `taps`, and the in-bounds condition (or '')."""
    coords, conds = [], []
    for j, (o, k) in enumerate(zip(pix, taps)):
        s, d, (lo, _) = a["strides"][j], a["dilations"][j], a["padding"][j]
        parts = [o if s == 1 else f"{o} * {s}"]
        if lo:
            parts.append(f"- {lo}")
        parts.append(f"+ {k}" if d == 1 else f"+ {k} * {d}")
        q = f"{prefix}{j}"
        em.emit(f"const {em.idx_t} {q} = {' '.join(parts)};")
        coords.append(q)
        if a["padding"][j] != (0, 0):
            conds.append(f"{q} >= 0 && {q} < {sizes[j]}")
    return coords, " && ".join(conds)


def generate_implicit_gemm(b: KernelBuilder) -> Kernel:
    """A dense (groups == 1) NHWC convolution as a GEMM over (pixels) x (taps) x (channels)."""
    x, w, out, a, nsp = conv_geometry(b)
    mshape, nshape, kshape = list(out.shape[:-1]), [out.shape[-1]], list(w.shape[1:])
    M, N, K = math.prod(mshape), nshape[0], math.prod(kshape)
    tf32 = a.get("precision") == "tf32"
    mma = x.dtype == w.dtype and x.dtype in (dtypes.f16, dtypes.bf16)
    indent = 4
    ema = b.emitter(indent=indent)
    pix = unravel(ema, "am", mshape, "Am")               # (n, *spatial)
    tap = unravel(ema, "ak", kshape, "Ak")               # (*kernel, c)
    q, inside = _tap_coords(ema, pix[1:], tap[:-1], a, x.shape[1:-1], "Aq")
    if inside:
        ema.open(f"if ({inside})")
    ema.emit(f"a = {ema.value(x, [pix[0]] + q + [tap[-1]])};")
    if inside:
        ema.close()
    emb = b.emitter(indent=indent)
    wtap = unravel(emb, "bk", kshape, "Bk")
    emb.emit(f"bv = {emb.value(w, ['bn'] + wtap)};")
    epi = dot_epilogue(b, [], mshape, nshape, M, N, indent=5 if mma or tf32 else 4)
    if tf32:
        slots = dict(load_a=ema.text(), load_b=emb.text(), epilogue=epi.text(), batch=1, m=M, n=N, k=K,
                     to_elt="aotc_tf32", **tile_slots())
        return b.finish("dot_tf32", slots, (D.ceildiv(N, 64), D.ceildiv(M, 64), 1), (128, 1, 1))
    if mma:
        bf16 = x.dtype == dtypes.bf16
        to_elt = "__float2bfloat16" if bf16 else "__float2half"
        op_a, op_b = _mma_operands(b, x, w, mshape, kshape, a, ema.text(), emb.text())
        elt = "bf16" if bf16 else "f16"
        tiling = mma_tiling(b, 1, M, N, K)
        tile = (tiling.bm, tiling.bn)
        slots = dict(store=store_slot(epi.text(), b.idx_t, M, N, registers=False, tile=tile), batch=1, m=M, n=N,
                     k=K, elt=elt, ctype=x.dtype.c, tiling=tiling,
                     **staging_slots(op_a, op_b, b.idx_t, x.dtype.c, to_elt, elt, M, N,
                                     b.param_names.get(x, "nullptr"), b.param_names.get(w, "nullptr"), tile))
        return b.finish("dot_mma", slots, mma_grid(tiling, 1, M, N), (128, 1, 1))
    tiling = simt_tiling(b, 1, M, N, K)
    slots = dict(load_a=ema.text(), load_b=emb.text(), epilogue=epi.text(), batch=1, m=M, n=N, k=K,
                 **simt_tile_slots(tiling, True, x.dtype))      # w[o, *taps, c]: K contiguous
    return b.finish("dot", slots, simt_grid(tiling, 1, M, N), (tiling.threads, 1, 1))


def _mma_operands(b: KernelBuilder, x, w, mshape, kshape, a, load_a: str, load_b: str):
    """dot_mma's staging of the implicit GEMM: both operands are k-major (C, then the taps, contiguous);
    16-byte cp.async chunks of 8 channels of one tap where C % 8 == 0 and the operand is a plain load,
    a chunk in the padding zero-filled."""
    C = x.shape[-1]
    chunks = isinstance(C, int) and C % CHUNK == 0
    op_a = Operand("A", "k", load=load_a)
    if chunks and plain_operand(b, x):
        op_a = _async_input(b, x, mshape, kshape, a, load_a)
    op_b = Operand("B", "k", load=load_b)
    if chunks and plain_operand(b, w):
        em = b.emitter(indent=2)
        wtap = unravel(em, "bk", kshape, "Bk")
        em.emit(f"src = {b.param_names[w]} + {linear(['bn'] + wtap, w.shape)};")
        em.emit("nbytes = 16;")
        op_b = Operand("B", "k", address=em.text(), load=load_b, k_stride="1",
                       mn_stride=str(math.prod(kshape)))    # w[o, *taps, c]: k contiguous
    return op_a, op_b


def _async_input(b: KernelBuilder, x, mshape, kshape, a, load_a: str) -> Operand:
    """The implicit GEMM's A by cp.async, its address split so the loop does little: each of the thread's
    rows (pixels) gets its window origin once (offset Ao@ and coordinates Ay@_j), each stage its tap's
    offset once (ak is the same for the thread's four rows), and a row then adds the two and checks the
    padding without a branch."""
    idx_t, sizes, st = b.idx_t, x.shape[1:-1], strides(x.shape)
    rows = b.emitter(indent=0)
    pix = unravel(rows, f"(m0 + (threadIdx.x >> 3) + 16 * {ROW_MARK})", mshape, f"Ar{ROW_MARK}_")
    origin = [] if pix[0] == "0" else [f"({pix[0]}) * {st[0]}"]
    taps = b.emitter(indent=0)
    # k >= 0: unsigned, the tap's divisions by constants need no sign fix-ups
    taps.emit(f"const {'unsigned' if idx_t == 'int' else idx_t} ak = k0 + {CHUNK} * (threadIdx.x & 7);")
    tap = unravel(taps, "ak", kshape, "Ak")
    offset, conds = [tap[-1]], []
    for j, (o, k) in enumerate(zip(pix[1:], tap[:-1])):
        s, d, (lo, _) = a["strides"][j], a["dilations"][j], a["padding"][j]
        rows.emit(f"const {idx_t} Ay{ROW_MARK}_{j} = {o} * {s} - {lo};")
        taps.emit(f"const {idx_t} At{j} = {k} * {d};")
        origin.append(f"Ay{ROW_MARK}_{j} * {st[j + 1]}")
        offset.append(f"At{j} * {st[j + 1]}")
        if a["padding"][j] != (0, 0):
            conds.append(f"(unsigned)(Ay{ROW_MARK}_{j} + At{j}) < {sizes[j]}u")
    rows.emit(f"const {idx_t} Ao{ROW_MARK} = {' + '.join(origin) or '0'};")
    taps.emit(f"const {idx_t} Ako = {' + '.join(offset)};")
    cond = " && ".join(conds)       # one 32-bit sum and one wide multiply-add make the row's pointer
    address = (f"  src = {b.param_names[x]} + (Ao{ROW_MARK} + Ako);\n"
               f"  nbytes = {f'{cond} ? 16u : 0u' if cond else '16u'};")
    return Operand("A", "k", address=address, load=load_a, row_setup=rows.text(), stage_setup=taps.text())


def depthwise_fits(b: KernelBuilder) -> bool:
    return depthwise_node_fits(b.region.anchor)


def _expansion(b: KernelBuilder, conv, indent: int) -> str:
    """Code setting `ex` = the fused conv `conv` at (n, yi, xi, c): a dot product over its taps and input channels."""
    x0, w0 = conv.inputs
    a = conv.attrs
    kh, kw = w0.shape[1:3]
    slots = dict(rnd="aotc_tf32" if a.get("precision") == "tf32" else "", cin=x0.shape[-1])
    if kh == kw == 1 and tuple(a["strides"]) == (1, 1) and all(tuple(q) == (0, 0) for q in a["padding"]):
        em = b.emitter(indent=indent + 1)
        slots.update(x=em.value(x0, ["n", "yi", "xi", "ci"]), w=em.value(w0, ["c", "0", "0", "ci"]), load=em.text())
        return instantiate("depthwise_expand_1x1.part", slots, indent=2 * indent)
    (sh, sw), (dh, dw), ((ph, _), (pw, _)) = a["strides"], a["dilations"], a["padding"]
    em = b.emitter(indent=indent + 3)
    slots.update(x=em.value(x0, ["n", "ey", "ex_x", "ci"]), w=em.value(w0, ["c", "ky", "kx", "ci"]), load=em.text(),
                 kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, ph=ph, pw=pw, height=x0.shape[1], width=x0.shape[2],
                 idx_t=b.idx_t)
    return instantiate("depthwise_expand.part", slots, indent=2 * indent)


def _staging(b: KernelBuilder, conv, tile=None, indent: int = 3):
    """Geometry and patch/filter staging slots of depthwise conv `conv` (a fused expansion included);
    `indent` is the emitter depth of the loads inside the staging loops."""
    x, w = conv.inputs
    out, a = conv.outputs[0], conv.attrs
    chans = out.shape[-1]
    kh, kw = w.shape[1:3]
    tc = channel_tile(chans)
    th, tw, ih, iw = tile or _depthwise_tile((kh, kw), a["strides"], a["dilations"], tc, out.shape)
    (ph, _), (pw, _) = a["padding"]
    sh, sw = a["strides"]
    dh, dw = a["dilations"]
    rnd = "aotc_tf32" if a.get("precision") == "tf32" else ""   # a dense 1-channel conv may land here
    inner = [n for n in b.region.nodes if n.op == "convolution" and n is not conv and n is not b.region.anchor]
    emx = b.emitter(indent=indent, overrides={inner[0].outputs[0]: "ex"} if inner else None)
    emx.emit(f"v = {rnd}({emx.value(x, ['n', 'yi', 'xi', 'c'])});")
    # a fused expansion conv: computed per staged element, before the load reads it as `ex`
    load_x = (_expansion(b, inner[0], indent) + "\n" if inner else "") + emx.text()
    emw = b.emitter(indent=indent)
    emw.emit(f"v = {rnd}({emw.value(w, ['c', 'ky', 'kx', '0'])});")
    slots = dict(load_x=load_x, load_w=emw.text(), th=th, tw=tw, ih=ih, iw=iw,
                 tc=tc, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, ph=ph, pw=pw, tiles_w=D.ceildiv(out.shape[2], tw),
                 height=x.shape[1], width=x.shape[2], chans=chans, out_h=out.shape[1], out_w=out.shape[2],
                 block=DW_BLOCK, lanes=DW_BLOCK // tc)
    return slots       # both depthwise templates include the staging loops (depthwise_stage.part)


def generate_depthwise(b: KernelBuilder) -> Kernel:
    """One filter per channel (NHWC, 2-D): input patch and filters staged in shared memory per tile."""
    x, w, out, a, _ = conv_geometry(b)
    n_img, oh_n, ow_n, chans = out.shape
    slots = _staging(b, b.region.anchor)
    epi = b.emitter(indent=2, overrides={out: "acc"})
    b.store_root(epi, b.root_index(epi, ["n", "oh", "ow", "c"]))
    slots["epilogue"] = epi.text()
    grid = (D.ceildiv(oh_n, slots["th"]) * slots["tiles_w"], D.ceildiv(chans, slots["tc"]), n_img)
    return b.finish("depthwise", slots, grid, (DW_BLOCK, 1, 1))


def project_source(region):
    """The depthwise conv a pointwise-conv region computes as its prologue (None if it has none)."""
    payload = region.payload_as(ConvPayload)
    return payload.depthwise if payload else None


def generate_depthwise_project(b: KernelBuilder) -> Kernel:
    """A depthwise conv (its expansion and epilogue included) and the pointwise conv it feeds, one kernel."""
    proj = b.region.anchor
    x, wp = proj.inputs
    dw = project_source(b.region)
    tile, splits, per, workspace, tiles = _project_plan(dw, proj, b.split_k, b._traffic())
    outs = proj.outputs[0].shape[-1]
    slots = _staging(b, dw, tile, indent=4)
    rnd = "aotc_tf32" if proj.attrs.get("precision") == "tf32" else ""
    emd = b.emitter(indent=5, overrides={dw.outputs[0]: "acc"})
    emd.emit(f"d = {rnd}({emd.value(x, ['n', 'oh', 'ow', 'c'])});")
    emp = b.emitter(indent=5)
    emp.emit(f"const float wv = {rnd}({emp.value(wp, ['o', '0', '0', 'c'])});")
    n_img, oh, ow, _ = proj.outputs[0].shape
    epi = dot_epilogue(b, [], [n_img, oh, ow], [outs], n_img * oh * ow, outs, indent=3)
    pixels = tile[0] * tile[1]
    fixup = instantiate("depthwise_project_split.part", dict(
        splits=splits, tile_outs=pixels * outs, reps=D.ceildiv(pixels * outs, DW_BLOCK), block=DW_BLOCK),
        indent=2) if splits > 1 else ""
    stage = (slots["ih"] * slots["iw"] + slots["kh"] * slots["kw"]) * slots["tc"]
    slots.update(dw_value=emd.text(), load_wp=emp.text(), epilogue=epi.text(), oc=outs, splits=splits,
                 per_split=per * slots["tc"], chunks=per, reps=D.ceildiv(pixels * outs, DW_BLOCK),
                 stage_floats=stage, smem_floats=stage + pixels * (slots["tc"] + 1), split_fixup=fixup)
    grid = (D.ceildiv(oh, tile[0]) * slots["tiles_w"], splits, n_img)
    return b.finish("depthwise_project", slots, grid, (DW_BLOCK, 1, 1),
                    split=(splits, workspace, tiles) if splits > 1 else None)


__all__ = ["generate_implicit_gemm", "generate_depthwise", "generate_depthwise_project", "is_depthwise",
           "depthwise_fits", "depthwise_project_fits"]
