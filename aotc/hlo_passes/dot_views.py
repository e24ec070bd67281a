"""dot-views: a GEMM on a 2-D view of an activation reads the activation itself.

torch.onnx.export writes a transformers Linear or Conv1D on a (B, S, D)
activation as `Reshape(x, (B*S, D)) -> Gemm -> Reshape(back to (B, S, N))`.
The 2-D view hides from fusion that the GEMM's lhs is the row-norm's result
(LayerNorm, RMSNorm), so the norm cannot become the GEMM's prologue, and the
reshapes sit between the GEMM and its epilogue.

Guarantee (exact, pure data movement): `dot_general(reshape(x), w)` where the
reshape only merges x's leading dims into one (the trailing, contracted dim
kept), with no batch dims and the lhs free dim leading, becomes
`reshape(dot_general(x, w))` reading x directly, contracting its last dim; the
result keeps the original Value. transpose-sink then moves the new reshape below
the bias add and the following reshape back cancels it (algsimp).

Leaves alone: reshapes that touch the contracted dim, batched dots, and rhs
views (weights are constants, folded anyway). A view with other users stays for
them; only the dot stops reading it.
"""
from __future__ import annotations

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir.graph import Graph, Node


def _merged_view(view: Node) -> tuple | None:
    """x's shape when `view` reshapes x (a..., K) to (prod(a), K), else None."""
    src, dst = view.inputs[0].shape, view.outputs[0].shape
    if len(dst) != 2 or len(src) < 3 or src[-1] != dst[-1]:
        return None
    lead = 1
    for d in src[:-1]:
        lead *= d
    return src if lead == dst[0] else None


def _rewrite(rw: Rewriter, n: Node) -> bool:
    a = n.attrs
    if a["lhs_batch"] or a["rhs_batch"] or tuple(a["lhs_contract"]) != (1,) or n.inputs[0].type.rank != 2:
        return False
    view = rw.made.get(rw.get(n.inputs[0]))
    if view is None or view.op != "reshape":
        return False
    src = _merged_view(view)
    if src is None:
        return False
    x = rw.get(view.inputs[0])
    rhs = rw.get(n.inputs[1])
    out = n.outputs[0]
    full = rw.add("dot_general", x, rhs, name=n.name, hint=out.name, lhs_batch=(), rhs_batch=(),
                  lhs_contract=(len(src) - 1,), rhs_contract=tuple(a["rhs_contract"]))
    rw.add("reshape", full, name=n.name, out=out, shape=out.shape)
    return True


def run(graph: Graph) -> Graph:
    """A new Graph whose GEMMs on merged-leading-dim views read the unviewed activation."""
    rw = Rewriter(graph)
    for n in graph.nodes:
        if not (n.op == "dot_general" and _rewrite(rw, n)):
            rw.keep(n)
    return rw.finish()
