"""transpose-sink: push transposes and reshapes down through elementwise ops, fold them into dots.

Exported transformers are full of transposes (split heads, K^T, merge heads)
and reshapes. Moving a transpose below the elementwise ops that read it lets
it meet the next transpose (algsimp then composes the two, or cancels them
when they are inverse) or a dot_general, which absorbs it into its dimension
numbers. Running in the `simplify` fixed point with algsimp, a chain like
`transpose(p) -> relu -> add(bias) -> transpose(p^-1)` disappears.

Guarantees, each exact (pure data movement):
- `f(transpose(a, p))` for elementwise f whose every operand is either a
  single-use transpose by the same p, a constant, or a broadcast_in_dim (of a
  constant, or whose dims stay increasing under p) becomes
  `transpose(f(a, ...), p)`; constants are permuted, broadcasts re-aimed;
- the same for `reshape`: `f(reshape(a))` with every operand a single-use
  reshape from the same shape, a constant-valued splat, a single-use constant,
  or a broadcast along trailing dims the reshape keeps (a GEMM's bias), becomes
  `reshape(f(a, ...))`;
- `dot_general(transpose(a, p), b)` (either side) reads `a` directly with
  permuted batch/contracting dims when the free dims keep their order (so
  the result layout is unchanged).
The rewritten op's result keeps the original Value (its users see no change)
and new nodes carry the original node's name.

Leaves alone: transposes or reshapes with other users (sinking would
duplicate them, not remove them), ops that are not elementwise, dots whose
free dims a transpose reorders, and `compare`/`select` operands that are not
transposes (handled like any elementwise op when they are).
"""
from __future__ import annotations

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value


def _inverse(p):
    inv = [0] * len(p)
    for i, d in enumerate(p):
        inv[d] = i
    return tuple(inv)


class _Sinker:
    def __init__(self, graph: Graph):
        self.rw = Rewriter(graph)
        self.uses = {}
        for n in graph.nodes:
            for v in n.inputs:
                self.uses[v] = self.uses.get(v, 0) + 1
        for v in graph.outputs:
            self.uses[v] = self.uses.get(v, 0) + 1

    def run(self) -> Graph:
        rw = self.rw
        for n in rw.graph.nodes:
            cat = ops.category(n.op)
            done = False
            if cat == ops.ELEMENTWISE and n.inputs and len(n.outputs) == 1:
                done = self._sink_transpose(n) or self._sink_reshape(n)
            elif n.op == "dot_general":
                done = self._fold_into_dot(n)
            if not done:
                rw.keep(n)
        return rw.finish()

    def _single_use(self, v: Value, op: str) -> Node | None:
        p = self.rw.made.get(self.rw.get(v))
        return p if p is not None and p.op == op and self.uses.get(v, 0) == 1 else None

    # -- transposes
    def _sink_transpose(self, n: Node) -> bool:
        rw = self.rw
        perm = None
        for v in n.inputs:
            t = self._single_use(v, "transpose")
            if t is not None:
                perm = tuple(t.attrs["permutation"])
                break
        if perm is None:
            return False
        inv = _inverse(perm)
        new_ins = []
        for v in n.inputs:
            nv = self._through_transpose(rw.get(v), perm, inv)
            if nv is None:
                return False
            new_ins.append(nv)
        new_ins = [x() if callable(x) else x for x in new_ins]
        inner = rw.add(n.op, *new_ins, name=n.name, hint=n.outputs[0].name, **n.attrs)
        rw.add("transpose", inner, name=n.name, out=n.outputs[0], permutation=perm)
        return True

    def _through_transpose(self, v: Value, perm, inv):
        """The operand as it is before the transpose by `perm` (or a thunk making it), else None."""
        rw = self.rw
        t = self._single_use(v, "transpose")
        if t is not None:
            return rw.get(t.inputs[0]) if tuple(t.attrs["permutation"]) == perm else None
        if v in rw.constants:
            return lambda: rw.constant(np.transpose(rw.constants[v], inv), f"{v.name}.t", v.dtype)
        p = rw.made.get(v)
        if p is None or p.op != "broadcast_in_dim":
            return None
        src = rw.get(p.inputs[0])
        dims = [perm[d] for d in p.attrs["broadcast_dimensions"]]
        shape = tuple(v.shape[i] for i in inv)
        order = sorted(range(len(dims)), key=dims.__getitem__)
        if order != list(range(len(dims))):
            if src not in rw.constants:
                return None
            arr = np.transpose(rw.constants[src], order)
            return lambda: rw.add("broadcast_in_dim", rw.constant(arr, f"{src.name}.t", src.dtype), name=p.name,
                                  shape=shape, broadcast_dimensions=tuple(sorted(dims)))
        return lambda: rw.add("broadcast_in_dim", src, name=p.name, shape=shape, broadcast_dimensions=tuple(dims))

    # -- reshapes
    def _sink_reshape(self, n: Node) -> bool:
        rw = self.rw
        src_shape = None
        for v in n.inputs:
            r = self._single_use(v, "reshape")
            if r is not None:
                src_shape = r.inputs[0].shape
                break
        if src_shape is None:
            return False
        new_ins = []
        for v in n.inputs:
            r = self._single_use(v, "reshape")
            if r is not None and r.inputs[0].shape == src_shape:
                new_ins.append(rw.get(r.inputs[0]))
                continue
            b = self._broadcast_before_reshape(v, src_shape, n.outputs[0].shape)
            if b is not None:
                new_ins.append(b)
                continue
            s = rw.splat(v)
            if s is None:
                return False
            new_ins.append(s)
        args = []
        for v, x in zip(n.inputs, new_ins):
            if callable(x):
                x = x()
            if isinstance(x, Value):
                args.append(x)
            else:
                c = rw.constant(np.array(x, v.dtype.np), f"{v.name}.s", v.dtype)
                args.append(rw.add("broadcast_in_dim", c, name=n.name, shape=src_shape, broadcast_dimensions=()))
        inner = rw.add(n.op, *args, name=n.name, hint=n.outputs[0].name, **n.attrs)
        rw.add("reshape", inner, name=n.name, out=n.outputs[0], shape=n.outputs[0].shape)
        return True

    def _broadcast_before_reshape(self, v: Value, src_shape, dst_shape):
        """A thunk making `v` as it is before a reshape from `src_shape` to `dst_shape`, or None.

        A single-use constant is reshaped; a broadcast only along trailing dims the
        reshape leaves alone (a bias over a GEMM's columns, while the reshape merges or
        splits the rows) is re-aimed."""
        rw = self.rw
        v = rw.get(v)
        if v in rw.constants and self.uses.get(v, 0) == 1:
            return lambda: rw.constant(rw.constants[v].reshape(src_shape), f"{v.name}.r", v.dtype)
        p = rw.made.get(v)
        if p is None or p.op != "broadcast_in_dim":
            return None
        dims = tuple(p.attrs["broadcast_dimensions"])
        k = len(dims)
        if not k or dims != tuple(range(len(dst_shape) - k, len(dst_shape))) or k > len(src_shape) \
                or tuple(src_shape[len(src_shape) - k:]) != tuple(dst_shape[len(dst_shape) - k:]):
            return None
        src = rw.get(p.inputs[0])
        new_dims = tuple(range(len(src_shape) - k, len(src_shape)))
        return lambda: rw.add("broadcast_in_dim", src, name=p.name, shape=tuple(src_shape),
                                   broadcast_dimensions=new_dims)

    # -- dots
    def _fold_into_dot(self, n: Node) -> bool:
        rw = self.rw
        a = dict(n.attrs)
        ins = [rw.get(v) for v in n.inputs]
        changed = False
        for side, (bk, ck) in enumerate((("lhs_batch", "lhs_contract"), ("rhs_batch", "rhs_contract"))):
            t = rw.made.get(ins[side])
            if t is None or t.op != "transpose":
                continue
            perm = t.attrs["permutation"]
            rank = len(perm)
            free = [d for d in range(rank) if d not in tuple(a[bk]) + tuple(a[ck])]
            mapped = [perm[d] for d in free]
            if mapped != sorted(mapped):
                continue
            a[bk] = tuple(perm[d] for d in a[bk])
            a[ck] = tuple(perm[d] for d in a[ck])
            ins[side] = rw.get(t.inputs[0])
            changed = True
        if not changed:
            return False
        rw.add("dot_general", *ins, name=n.name, out=n.outputs[0], **a)
        return True


def run(graph: Graph) -> Graph:
    """A new Graph with transposes/reshapes sunk below elementwise ops and folded into dots."""
    return _Sinker(graph).run()
