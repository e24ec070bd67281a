"""GEMM regions with f16/bf16 operands -> the tensor-core kernel (templates/dot_mma.cu).

Same region semantics as the SIMT GEMM (prologue loads, f32 accumulation,
epilogue on the accumulator); the inner product runs on mma.m16n8k16 through
aotc's wrappers (templates/aotc_mma.cuh), whose host fallback lets the cpu
device run the identical source.
"""
from __future__ import annotations

import math

from aotc.ir import dtypes, ops
from aotc.kernels.codegen import Kernel, _Builder, dot_epilogue, dot_operand_load


def generate_dot_mma(b: _Builder, geometry) -> Kernel:
    bshape, mshape, nshape, kshape, B, M, N, K = geometry
    anchor = b.region.anchor
    lhs, rhs = anchor.inputs
    a = anchor.attrs
    lf, rf = ops.dot_free_dims(a, lhs.type.rank, rhs.type.rank)
    load_a = dot_operand_load(b, bshape, "A", lhs, a["lhs_batch"], lf, a["lhs_contract"], "am", "ak",
                              mshape, kshape, "a", indent=4)
    load_b = dot_operand_load(b, bshape, "B", rhs, a["rhs_batch"], a["rhs_contract"], rf, "bk", "bn",
                              kshape, nshape, "bv", indent=4)
    em = dot_epilogue(b, bshape, mshape, nshape, M, N, indent=5)
    bf16 = lhs.dtype == dtypes.bf16
    slots = dict(load_a=load_a, load_b=load_b, epilogue=em.text(), batch=B, m=M, n=N, k=K,
                 elt="bf16" if bf16 else "f16", ctype=lhs.dtype.c,
                 to_elt="__float2bfloat16" if bf16 else "__float2half")
    return b.finish("dot_mma", slots, (math.ceil(N / 64), math.ceil(M / 64), B), (128, 1, 1))
