"""Quantized convolution regions: dense NHWC on the 8-bit tensor-core GEMM, the rest in exact integers.

A convolution whose op names an out_dtype (i8/u8 -> 'i32', float8 -> 'f32') is
a quantized anchor. Dense NHWC convs (groups = 1) are an implicit GEMM, as in
codegen_conv.py: M = N*OH*OW pixels, N = O channels, K = KH*KW*C taps, row m of
A read straight from x; here the operands go to dot_mma8.cu (codegen_mma8.py),
and a tap in the padding loads the op's `pad_value` (the activation zero point,
so padding dequantizes to 0 as it does in float) instead of 0. Integer convs
the GEMM does not take (NCHW, grouped, depthwise) run the direct kernel
templates/conv_int.cu: one output per thread, 32-bit wrapping sums, padded taps
reading `pad_value`. The epilogue (scale, bias, relu, requantize) reads the i32
accumulator in both.
"""
from __future__ import annotations

from aotc.errors import UnsupportedError
from aotc.ir import dims as D
from aotc.kernels.builder import MAX_GRID, Kernel, KernelBuilder, dot_epilogue, unravel
from aotc.kernels.codegen_mma8 import Load, contiguous_k, finish_mma8, operand_value
from aotc.kernels.template import instantiate

DIRECT_BLOCK = 256


def generate_conv8(b: KernelBuilder) -> Kernel:
    """The kernel of a quantized convolution region."""
    anchor = b.region.anchor
    a = anchor.attrs
    layout = a.get("layout", "NCHW")
    if layout == "NHWC" and a["groups"] == 1:
        return _implicit_gemm(b)
    if a["out_dtype"] != "i32":
        raise UnsupportedError(f"convolution '{anchor.name}': an fp8 convolution needs layout NHWC and groups=1 "
                               f"(the fp8 implicit GEMM), got layout {layout} and groups={a['groups']}")
    return _direct(b)


def _tap_coord(out_coord: str, tap: str, stride: int, lo: int, dilation: int) -> str:
    parts = [out_coord if stride == 1 else f"{out_coord} * {stride}"]
    if lo:
        parts.append(f"- {lo}")
    parts.append(f"+ {tap}" if dilation == 1 else f"+ {tap} * {dilation}")
    return " ".join(parts)


def _implicit_gemm(b: KernelBuilder) -> Kernel:
    anchor = b.region.anchor
    x, w = anchor.inputs
    out, a = anchor.outputs[0], anchor.attrs
    mshape, nshape, kshape = list(out.shape[:-1]), [out.shape[-1]], list(w.shape[1:])
    M, N, K = D.prod(mshape), nshape[0], D.prod(kshape)
    # four taps at a time where the channels come in fours (one pixel, one tap, C contiguous)
    vec_x = contiguous_k(b, x, [x.type.rank - 1], x.shape[-1])
    vec_w = contiguous_k(b, w, list(range(1, w.type.rank)), K)
    ema = b.emitter(indent=4)
    pix = unravel(ema, "am", mshape, "Am")               # (n, *spatial)
    tap = unravel(ema, "ak", kshape, "Ak")               # (*kernel, c)
    coords, conds = [], []
    for j, (o, k) in enumerate(zip(pix[1:], tap[:-1])):
        q = f"Aq{j}"
        ema.emit(f"const {b.idx_t} {q} = {_tap_coord(o, k, a['strides'][j], a['padding'][j][0], a['dilations'][j])};")
        coords.append(q)
        if tuple(a["padding"][j]) != (0, 0):
            conds.append(f"{q} >= 0 && {q} < {x.shape[1 + j]}")
    if conds:
        ema.open(f"if ({' && '.join(conds)})")
    xv, raw_x = operand_value(b, ema, x, [pix[0]] + coords + [tap[-1]], vec_x)
    ema.emit(f"a = {xv};")
    if conds:
        pad = a.get("pad_value", 0)
        if pad and vec_x:           # the zero point's byte in each of the word's four taps
            pad = f"{(pad & 0xFF) * 0x01010101}u"
        ema.close(f"}} else a = {pad};" if pad else "}")
    emb = b.emitter(indent=4)
    wtap = unravel(emb, "bk", kshape, "Bk")
    wv, raw_w = operand_value(b, emb, w, ["bn"] + wtap, vec_w)
    emb.emit(f"bv = {wv};")
    epi = dot_epilogue(b, [], mshape, nshape, M, N, indent=5)
    return finish_mma8(b, Load(ema.text(), raw_x, vec_x), Load(emb.text(), raw_w, vec_w), epi.text(), 1, M, N, K)


def _direct(b: KernelBuilder) -> Kernel:
    anchor = b.region.anchor
    x, w = anchor.inputs
    out, a = anchor.outputs[0], anchor.attrs
    nsp = x.type.rank - 2
    last = a.get("layout", "NCHW") == "NHWC"
    cdim = x.type.rank - 1 if last else 1
    spatial = list(range(1, 1 + nsp)) if last else list(range(2, 2 + nsp))
    em_idx = b.emitter(indent=2)
    oidx = unravel(em_idx, "i", out.shape, "o")
    oc = f"o{cdim}"            # the template reads the channel variable even when the dim is 1
    if out.shape[cdim] == 1:
        em_idx.emit(f"(void){oc};")
    em = b.emitter(indent=3 + nsp)
    q, ks = [f"q{j}" for j in range(nsp)], [f"k{j}" for j in range(nsp)]
    em.emit(f"int xv = {a.get('pad_value', 0)};")
    em.open(f"if (!pad{nsp - 1})")         # a tap inside the input: read it
    em.emit(f"xv = {em.value(x, [oidx[0]] + q + ['ci'] if last else [oidx[0], 'ci'] + q)};")
    em.close()
    wv = em.value(w, [oidx[cdim]] + ks + ["c"] if last else [oidx[cdim], "c"] + ks)
    em.emit(f"acc += (unsigned)xv * (unsigned)(int)({wv});")
    body = em.text()
    for j in reversed(range(nsp)):
        d = spatial[j]
        body = instantiate("window_tap_int.part", dict(
            idx_t=b.idx_t, k=ks[j], q=q[j], taps=w.shape[d], size=x.shape[d], pad=f"pad{j}",
            outer=f"pad{j - 1} || " if j else "", body=body,
            coord=_tap_coord(oidx[d], ks[j], a["strides"][j], a["padding"][j][0], a["dilations"][j])),
            indent=2 * (3 + j))
    em_epi = b.emitter(indent=2, overrides={out: "accv"})
    b.store_root(em_epi, b.root_index(em_epi, oidx))
    total = out.type.size
    slots = dict(out_index=em_idx.text(), window=body, epilogue=em_epi.text(), total=total,
                 cg=w.shape[cdim], og=w.shape[0] // a["groups"], oc=oc, block=DIRECT_BLOCK)
    grid = (D.dmax(1, D.dmin(D.ceildiv(total, DIRECT_BLOCK), MAX_GRID)), 1, 1)
    return b.finish("conv_int", slots, grid, (DIRECT_BLOCK, 1, 1))


__all__ = ["generate_conv8"]
