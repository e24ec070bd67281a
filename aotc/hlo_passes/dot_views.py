"""dot-views: row-wise work on a (B*S, D) view of an activation runs on the (B, S, D) activation itself.

torch.onnx.export writes a transformers Linear or Conv1D on a (B, S, D)
activation as `Reshape(x, (B*S, D)) -> Gemm -> Reshape(back to (B, S, N))`, and
some decoders (OPT) flatten the residual stream before their MLP, so a LayerNorm,
two GEMMs and the residual add all run on the 2-D view. The view hides from
fusion that a GEMM's lhs is a row norm's result (the norm cannot become the
GEMM's prologue), and its reshapes sit between the GEMM and its epilogue.

The pass follows each view that merges leading dims, `v = reshape(x)` with x
(a..., r...) and v (prod(a), r...), forward through the ops that treat the merged
dim as rows, and computes each of them on the unmerged value instead:

- elementwise ops whose other operands are views of the same rows, scalars,
  broadcasts that do not follow the rows (a bias), or constants;
- reductions that keep the row dim (a norm's statistics, (B*S,) -> (B, S));
- broadcasts of a row value that keep the rows leading (the statistics back to
  (B*S, D));
- reshapes that keep the row dim (keepdims), and the reshape back to x's shape,
  which disappears;
- a dot_general with the view as lhs, no batch dims and the row dim free;
- a dot_general batched over the merged dim alone whose operands are both views
  of the same rows (BLOOM's (B*H, S, D) attention), batched over the unmerged
  dims instead; a broadcast operand whose first dim follows the rows (its ALiBi
  bias) is viewed unmerged too.

Guarantee (exact, pure data movement): each rewritten op keeps its original
result Value, now a reshape of the unviewed op (DCE removes it when nothing else
reads it), so ops that do not treat the rows as rows still see the view.
Leaves alone: views that split or touch a trailing dim (`(B, S, D) -> (B, S*D)`),
single-dim "merges", dots batched otherwise, and an op with any operand it cannot unview.
"""
from __future__ import annotations

import math

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value


def _merged_lead(src: tuple, dst: tuple) -> int:
    """k >= 2 when dst = (prod(src[:k]),) + src[k:] (a view merging src's k leading dims), else 0."""
    if not dst or len(src) < 2:
        return 0
    for k in range(2, len(src) + 1):
        if math.prod(src[:k]) == dst[0] and tuple(src[k:]) == tuple(dst[1:]):
            return k
    return 0


class _Unviewer:
    def __init__(self, graph: Graph):
        self.rw = Rewriter(graph)
        self.full: dict[Value, Value] = {}    # a view of rows (new graph) -> the same data, rows unmerged

    def run(self) -> Graph:
        for n in self.rw.graph.nodes:
            if not self._node(n):
                self.rw.keep(n)
        return self.rw.finish()

    def _lead(self, v: Value):
        """The unmerged row dims of a view `v` (new graph), or None."""
        u = self.full.get(self.rw.get(v))
        if u is None:
            return None
        return tuple(u.shape[:u.type.rank - (v.type.rank - 1)])

    def _node(self, n: Node) -> bool:
        if len(n.outputs) != 1 or not n.inputs:
            return False
        if n.op == "reshape":
            return self._reshape(n)
        leads = {self._lead(v) for v in n.inputs} - {None}
        if len(leads) != 1:
            return False
        (lead,) = leads
        out = n.outputs[0]
        shape = lead + tuple(out.shape[1:])
        k = len(lead) - 1                         # how far the trailing dims move
        a = dict(n.attrs)
        if n.op == "reduce":
            if 0 in a["axes"]:
                return False
            a["axes"] = tuple(d + k for d in a["axes"])
            return self._emit(n, [self.full[self.rw.get(n.inputs[0])]], a)
        if n.op == "broadcast_in_dim":
            dims = tuple(a["broadcast_dimensions"])
            if not dims or dims[0] != 0 or out.shape[0] != n.inputs[0].shape[0]:
                return False
            a["broadcast_dimensions"] = tuple(range(len(lead))) + tuple(d + k for d in dims[1:])
            a["shape"] = shape
            return self._emit(n, [self.full[self.rw.get(n.inputs[0])]], a)
        if n.op == "dot_general" and a["lhs_batch"]:
            return self._batched_dot(n, lead, a)
        if n.op == "dot_general":
            if a["rhs_batch"] or 0 in a["lhs_contract"] or self._lead(n.inputs[1]) is not None:
                return False
            a["lhs_contract"] = tuple(d + k for d in a["lhs_contract"])
            return self._emit(n, [self.full[self.rw.get(n.inputs[0])], self.rw.get(n.inputs[1])], a)
        if ops.category(n.op) != ops.ELEMENTWISE:
            return False
        ins = [self._operand(v, lead, shape) for v in n.inputs]
        if any(x is None for x in ins):
            return False
        return self._emit(n, [x() if callable(x) else x for x in ins], a)

    def _batched_dot(self, n: Node, lead, a) -> bool:
        """A dot batched over the merged dim alone, both operands views of the same rows: batched over
        the unmerged dims (BLOOM's Q·K and P·V on (B*H, S, D) views of (B, H, S, D))."""
        if tuple(a["lhs_batch"]) != (0,) or tuple(a["rhs_batch"]) != (0,) \
                or any(self._lead(v) != lead for v in n.inputs):
            return False
        k = len(lead) - 1
        batch = tuple(range(len(lead)))
        a.update(lhs_batch=batch, rhs_batch=batch, lhs_contract=tuple(d + k for d in a["lhs_contract"]),
                 rhs_contract=tuple(d + k for d in a["rhs_contract"]))
        return self._emit(n, [self.full[self.rw.get(v)] for v in n.inputs], a)

    def _operand(self, v: Value, lead, shape):
        """An elementwise op's operand, unviewed to `shape` (or a thunk making it), else None."""
        rw = self.rw
        v = rw.get(v)
        if v.shape != (math.prod(lead),) + tuple(shape[len(lead):]):
            return None
        if v in self.full:
            return self.full[v]
        s = rw.splat(v)
        if s is not None:
            return lambda: rw.add("broadcast_in_dim", rw.constant(np.array(s, v.dtype.np), f"{v.name}.s", v.dtype),
                                  shape=shape, broadcast_dimensions=())
        if v in rw.constants:
            return lambda: rw.constant(rw.constants[v].reshape(shape), f"{v.name}.r", v.dtype)
        p = rw.made.get(v)
        if p is not None and p.op == "broadcast_in_dim" and 0 not in p.attrs["broadcast_dimensions"]:
            k = len(lead) - 1
            dims = tuple(d + k for d in p.attrs["broadcast_dimensions"])
            return lambda: rw.add("broadcast_in_dim", rw.get(p.inputs[0]), name=p.name, shape=shape,
                                  broadcast_dimensions=dims)
        if p is not None and p.op == "broadcast_in_dim" and p.attrs["broadcast_dimensions"][:1] == (0,):
            return self._row_broadcast(p, lead, shape)
        return None

    def _row_broadcast(self, p: Node, lead, shape):
        """A broadcast whose operand's first dim follows the rows (BLOOM's ALiBi bias, (B*H, 1, S) ->
        (B*H, S, S)) or is one for all rows: its operand viewed with the rows unmerged."""
        rw = self.rw
        src = rw.get(p.inputs[0])
        rows = src.shape[0]
        if rows not in (1, math.prod(lead)):
            return None
        k = len(lead) - 1
        unmerged = (lead if rows > 1 else (1,) * len(lead)) + tuple(src.shape[1:])
        dims = tuple(range(len(lead))) + tuple(d + k for d in p.attrs["broadcast_dimensions"][1:])

        def make():
            viewed = rw.add("reshape", src, name=p.name, shape=unmerged)
            return rw.add("broadcast_in_dim", viewed, name=p.name, shape=shape, broadcast_dimensions=dims)
        return make

    def _emit(self, n: Node, ins, attrs) -> bool:
        """The op on unviewed operands; its original result becomes a view of that."""
        out = n.outputs[0]
        full = self.rw.add(n.op, *ins, name=n.name, hint=out.name, **attrs)
        self.rw.add("reshape", full, name=n.name, out=out, shape=out.shape)
        self.full[out] = full
        return True

    def _reshape(self, n: Node) -> bool:
        rw = self.rw
        src, out = rw.get(n.inputs[0]), n.outputs[0]
        lead = self._lead(src)
        if lead is not None:
            full = self.full[src]
            if out.shape == full.shape and rw.can_replace(out, full):
                rw.replace(out, full)                # the view back: gone
                return True
            if out.shape and out.shape[0] == src.shape[0]:
                rw.keep(n)
                self.full[out] = rw.add("reshape", full, name=n.name, shape=lead + tuple(out.shape[1:]))
                return True
            return False
        if _merged_lead(src.shape, out.shape):
            rw.keep(n)
            self.full[out] = src
            return True
        return False


def run(graph: Graph) -> Graph:
    """A new Graph whose row-wise ops on merged-leading-dim views run on the unviewed activations."""
    return _Unviewer(graph).run()
