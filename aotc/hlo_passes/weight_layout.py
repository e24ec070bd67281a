"""weight-kmajor: an f16/bf16 GEMM reads a constant B stored K-major where its N rows are not whole 16-byte chunks.

The tensor-core GEMM (kernels/mma_staging.py) stages an operand by 16-byte cp.async chunks along the
operand's contiguous dim. A constant B stored (K, N) with N x 2 bytes not a multiple of 16 cannot be: GPT-2's
LM head as torch.onnx writes it, MatMul(x, W^T) with W^T a (768, 50257) initializer, is staged an element at
a time, and a warp's 64 contiguous bytes straddle three sectors (76% load efficiency measured at 2051
columns) on the kernel's largest stream, the 77 MB of weights. Stored (N, K), its rows of K (768 x 2 bytes)
are whole chunks: cp.async at 100%, and the 32x128 row tile (split_k.ROW_TILE) that stores such a GEMM's
off-grid output rows at 16 of every 17 sectors' bytes. The transpose happens at compile time and every
output is the same sum of the same products.

Leaves alone: f32 and 8-bit GEMMs (the SIMT and integer kernels read B along N), B that is not a constant,
is batched or contracts several dims, is already K-major, whose N rows are whole chunks (the "mn" tile
then stages by cp.async too) or whose K rows are not, and a constant something else reads too (its two
layouts would both be stored).
"""
from __future__ import annotations

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import dtypes
from aotc.ir.graph import Graph, Node

CHUNK_BYTES = 16          # one cp.async copy
last_stats: dict[str, int] = {}


def wants_k_major(graph: Graph, n: Node, users: dict) -> bool:
    """GEMM `n`'s constant B is (K, N) with rows of N off the 16-byte chunks and rows of K on them."""
    if n.op != "dot_general":
        return False
    lhs, rhs = n.inputs
    a = n.attrs
    if rhs not in graph.constants or rhs.dtype not in (dtypes.f16, dtypes.bf16) or lhs.dtype != rhs.dtype:
        return False
    if rhs.type.rank != 2 or a["rhs_batch"] or tuple(a["rhs_contract"]) != (0,) or len(users[rhs]) != 1 \
            or rhs in graph.outputs:
        return False
    k, width = rhs.shape
    item = rhs.dtype.itemsize
    return isinstance(k, int) and isinstance(width, int) and (width * item) % CHUNK_BYTES != 0 \
        and (k * item) % CHUNK_BYTES == 0


def run(graph: Graph) -> Graph:
    """A new Graph where each qualifying GEMM reads its constant B transposed to (N, K)."""
    last_stats.clear()
    last_stats.update(gemms=0)
    users = graph.users()
    rw = Rewriter(graph)
    for n in graph.nodes:
        if not wants_k_major(graph, n, users):
            rw.keep(n)
            continue
        lhs, w = n.inputs
        wt = rw.constant(graph.constants[w].T, f"{w.name}.kmajor", w.dtype)
        rw.add("dot_general", lhs, wt, name=n.name, out=n.outputs[0], **dict(n.attrs, rhs_contract=(1,)))
        last_stats["gemms"] += 1
    return rw.finish()
