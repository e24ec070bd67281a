"""8-bit GEMM regions on tensor cores: int8 (i8/u8 -> i32) and fp8 e4m3 (-> f32), templates/dot_mma8.cu.

A dot_general or NHWC convolution whose op says out_dtype='i32' (both operands
i8/u8) or out_dtype='f32' with float8 operands is a quantized anchor: its
inner product runs on mma.m16n8k32 through the wrappers in
templates/aotc_mma8.cuh, whose host fallbacks let the cpu device run the very
source. Integer sums are exact and wrap mod 2**32 as the op table's reference
does, so int8 kernels match the interpreter bit for bit; the epilogue (convert,
per-channel scale, bias, activation, requantize) reads the i32 accumulator as
the anchor's value. fp8 runs e4m3 mma in the sm_90 cubin and PTX, and two f16
mma per tile on sm_80 (aotc_mma8.cuh); `math_of` names what each arch runs.
Split-K stays off: its partials are f32, and integer sums must stay exact.
Shared with codegen.py's dot and codegen_conv.py's implicit GEMM: only the
operand loads differ (a conv's padding loads its zero point, `pad_value`).
"""
from __future__ import annotations

from typing import NamedTuple

from aotc.errors import UnsupportedError
from aotc.fusion.rules import quantized_anchor
from aotc.ir import dims as D
from aotc.ir import dtypes, ops
from aotc.kernels.builder import Kernel, KernelBuilder, dot_epilogue, unravel
from aotc.kernels.emitter import linear
from aotc.kernels.template import instantiate

FP8_MMA = ("f8e4m3fn",)          # float8 dtypes with a tensor-core instruction aotc uses


def is_mma8(anchor) -> bool:
    """Whether a dot/conv anchor takes the 8-bit kernels (its op names an out_dtype; fusion/rules)."""
    return quantized_anchor(anchor)


def _operand_kind(dt, anchor) -> str:
    if dt.name in ops.INTEGER_MMA:
        return "s8" if dt == dtypes.i8 else "u8"
    if dt.name in FP8_MMA:
        return "e4m3"
    raise UnsupportedError(f"{anchor.op} '{anchor.name}': no 8-bit tensor-core kernel for {dt} operands "
                           f"(supported: i8, u8, float8 {', '.join(FP8_MMA)})")


class Load(NamedTuple):
    """One operand's staging: code setting its variable at (row, k), and how it is staged."""
    code: str
    raw: bool = False      # the stored byte itself (a float8 region input read as it is)
    vector: bool = False   # four K-contiguous bytes as one word (mma8_stage4.part)


def contiguous_k(b: KernelBuilder, v, contract_dims, K) -> bool:
    """Whether operand `v` can be staged four bytes at a time: a region input (not a view) whose
    contracted dims are its trailing ones, K a multiple of 4 (so every word is aligned)."""
    r = v.type.rank
    return (v.dtype.itemsize == 1 and v in b.param_names and v not in b.views and D.is_static(K) and K % 4 == 0
            and tuple(contract_dims) == tuple(range(r - len(contract_dims), r)))


def operand_value(b: KernelBuilder, em, v, idx, vector: bool = False) -> tuple[str, bool]:
    """(C expression of operand `v` at `idx`, whether it is the stored byte itself); `vector`: the
    word of the four bytes from `idx` on (contiguous_k).

    A float8 operand read straight from a region input is staged as its byte, never
    decoded and re-encoded; anything computed (a cast prologue) is an f32 value that
    aotc_float_to_e4m3 rounds to its byte. Integer operands are their values."""
    if vector:
        return f"*reinterpret_cast<const unsigned *>(&{b.param_names[v]}[{linear(idx, v.shape)}])", True
    if v.dtype.is_float and v in b.param_names and v not in b.views:
        return f"{b.param_names[v]}[{linear(idx, v.shape)}]", True
    return em.value(v, idx), False


def _stage(b: KernelBuilder, operand: str, load: Load, kind: str, rows, K) -> str:
    """The staging loop of operand "A" or "B" (mma8_stage.part or mma8_stage4.part)."""
    names = dict(A=dict(arr="As", row="am", row0="m0", kv="ak", var="a"),
                 B=dict(arr="Bs", row="bn", row0="n0", kv="bk", var="bv"))[operand]
    slots = dict(names, idx_t=b.idx_t, rows=rows, k=K, load=load.code)
    if load.vector:
        return instantiate("mma8_stage4.part", slots, indent=4)
    if kind != "e4m3" or load.raw:
        t, to = ("int" if kind != "e4m3" else "unsigned"), "(unsigned char)"
    else:
        t, to = "float", "aotc_float_to_e4m3"
    return instantiate("mma8_stage.part", dict(slots, t=t, to=to), indent=4)


def finish_mma8(b: KernelBuilder, load_a: Load, load_b: Load, epilogue: str, B, M, N, K,
                row_stats: str = "") -> Kernel:
    """The dot_mma8 kernel for operand loads `load_a` (sets `a` at am, ak) and `load_b` (sets `bv` at bk, bn)."""
    anchor = b.region.anchor
    x, w = anchor.inputs
    ka, kb = _operand_kind(x.dtype, anchor), _operand_kind(w.dtype, anchor)
    if D.upper(B) > 65535:
        raise UnsupportedError(f"{anchor.op} '{anchor.name}': batch {B} exceeds the grid's z limit 65535")
    slots = dict(elt="e4m3" if ka == "e4m3" else ka + kb, acc_t="float" if ka == "e4m3" else "int",
                 stage_a=_stage(b, "A", load_a, ka, M, K), stage_b=_stage(b, "B", load_b, kb, N, K),
                 epilogue=epilogue, batch=B, m=M, n=N, k=K, row_stats=row_stats)
    return b.finish("dot_mma8", slots, (D.ceildiv(N, 64), D.ceildiv(M, 64), B), (128, 1, 1))


def _operand_load(b: KernelBuilder, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b,
                  shape_a, shape_b, target, vector: bool, overrides=None) -> Load:
    """Code setting `target` to a dot operand at (batch b, flat_a, flat_b)."""
    em = b.emitter(indent=4, overrides=overrides)
    bi = unravel(em, "b", bshape, f"{var}b_") if bshape else []
    ai = unravel(em, flat_a, shape_a, f"{var}x_")
    ci = unravel(em, flat_b, shape_b, f"{var}y_")
    idx = [""] * value.type.rank
    for dims, names in ((batch_dims, bi), (dims_a, ai), (dims_b, ci)):
        for d, e in zip(dims, names):
            idx[d] = e
    expr, raw = operand_value(b, em, value, idx, vector)
    em.emit(f"{target} = {expr};")
    return Load(em.text(), raw, vector)


def generate_dot_mma8(b: KernelBuilder, geometry, row_stats: str = "", norm=None) -> Kernel:
    """A quantized dot_general: (batch, lhs free, rhs free, contracting) flattened to (B, M, N, K)."""
    bshape, mshape, nshape, kshape, B, M, N, K = geometry
    anchor = b.region.anchor
    lhs, rhs = anchor.inputs
    a = anchor.attrs
    lf, rf = ops.dot_free_dims(a, lhs.type.rank, rhs.type.rank)
    vec_a = not norm and contiguous_k(b, lhs, a["lhs_contract"], K)
    load_a = _operand_load(b, bshape, "A", lhs, a["lhs_batch"], lf, a["lhs_contract"], "am", "ak",
                           mshape, kshape, "a", vec_a, overrides=norm)
    load_b = _operand_load(b, bshape, "B", rhs, a["rhs_batch"], a["rhs_contract"], rf, "bk", "bn",
                           kshape, nshape, "bv", contiguous_k(b, rhs, a["rhs_contract"], K))
    epi = dot_epilogue(b, bshape, mshape, nshape, M, N, indent=5)
    return finish_mma8(b, load_a, load_b, epi.text(), B, M, N, K, row_stats)


def math_of(kernel_name: str, source: str = "") -> str | None:
    """"int8" or "fp8" for a quantized GEMM/conv kernel (by its name and source), None for any other kernel."""
    if kernel_name.startswith("aotc_conv_int_"):
        return "int8"
    if not kernel_name.startswith("aotc_dot_mma8_"):
        return None
    return "fp8" if "aotc_mma8_tile_e4m3" in source else "int8"


__all__ = ["Load", "is_mma8", "finish_mma8", "generate_dot_mma8", "operand_value", "contiguous_k", "math_of", "FP8_MMA"]
