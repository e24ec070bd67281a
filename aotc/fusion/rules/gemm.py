"""GEMM kernel rules: when its lhs is loaded exactly once, so compute on it may join the prologue.

The GEMM kernels (templates/dot*.cu) tile the output 64 x 64: a block loads its
rows of A once per block column, so an A operand whose B side is at most one
tile wide is read exactly once. The same holds for a 1x1 unstrided conv with at
most one tile of output channels (each input pixel feeds one output pixel).
"""
from __future__ import annotations

from aotc.ir import dims as D
from aotc.ir import dtypes, ops

GEMM_TILE_N = 64         # output columns per block


def pointwise_conv(n) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped NHWC 2-D conv: a GEMM over pixels x channels."""
    if n is None or n.op != "convolution":
        return False
    x, w = n.inputs
    a = n.attrs
    return (a.get("layout") == "NHWC" and x.type.rank == 4 and a["groups"] == 1
            and all(k == 1 for k in w.shape[1:-1]) and all(s == 1 for s in a["strides"])
            and all(tuple(q) == (0, 0) for q in a["padding"]))


def lhs_loaded_once(anchor) -> bool:
    """The GEMM kernel loads each element of this f32 dot's lhs / pointwise conv's input exactly once.

    One 64-wide N tile means one block column, and a 1x1 unstrided conv reads each
    input pixel for one output pixel, so a compute prologue on that operand costs
    what it would in its producer's kernel, and its result need not go to memory
    (EfficientNet's squeeze-excite scale before the project conv).
    """
    if anchor.inputs[0].dtype != dtypes.f32:
        # f16/bf16: a materialized operand is rounded to its storage type after every op, which
        # references (onnxruntime, the ONNX node suite) reproduce; f32 math inside the loads
        # would differ from them by an ulp
        return False
    if anchor.op == "dot_general":
        _, rf = ops.dot_free_dims(anchor.attrs, anchor.inputs[0].type.rank, anchor.inputs[1].type.rank)
        n = 1
        for d in rf:
            n *= anchor.inputs[1].shape[d]
        return D.upper(n) <= GEMM_TILE_N
    return pointwise_conv(anchor) and anchor.outputs[0].shape[-1] <= GEMM_TILE_N
