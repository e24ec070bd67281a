"""Row vectors: a loop kernel's VEC consecutive outputs of one row, with one 16-byte load per input row.

codegen_vector's flat path vectorizes only inputs read at the output's own
offset. Where the root's last dim is a whole number of vectors, the VEC
outputs of thread q share every coordinate but the last, so any input whose
last coordinate *is* the output's last coordinate (through reshapes and
transposes that keep the last dim, slices that keep a vector's alignment,
concatenations and gathers along other dims, broadcasts) is read as one
16-byte vector at element 0's offset: the embedding row a token gathers, the
class token and patch rows a ViT concatenates. Values that do not depend on
the last coordinate (a gathered index, a per-row scale) are computed once per
vector. Everything else falls back to the emitter's per-element index math.
"""
from __future__ import annotations

from aotc.ir import ops
from aotc.ir.graph import Value
from aotc.kernels.emitter import Emitter, compute_type, linear, load_expr, strides


class RowVectors:
    """Emits, through `em`, the VEC values of `v` at outer coordinates `outer` and last coordinates
    j, j+1, ..., j+VEC-1, where j is a multiple of VEC; `row_loads` lists the params read as vectors."""

    def __init__(self, b, em: Emitter, vec: int):
        self.b, self.em, self.vec = b, em, vec
        self.size = b.region.root.dtype.itemsize
        self.row_loads: list[Value] = []

    def values(self, v: Value, outer: list[str], j: str) -> list[str]:
        em = self.em
        key = ("rows", v, tuple(outer), j)
        hit = em._memo_get(key)
        if hit is not None:
            return hit
        out = self._values(v, outer, j)
        em.scopes[-1][key] = out
        return out

    def _values(self, v: Value, outer: list[str], j: str) -> list[str]:
        em = self.em
        if v in em.overrides or v in em.bands or (v in em.consts and v.type.size == 1):
            return self._each(v, outer, j)
        if self._loads_rows(v):             # a param, or a slice passed as a view of one
            return self._row_load(v, outer, j)
        node = em.producer.get(v)
        if node is not None and node in em.members:
            handler = getattr(self, "_" + node.op, None)
            if ops.category(node.op) == ops.ELEMENTWISE:
                return self._elementwise(node, outer, j)
            out = handler(node, outer, j) if handler is not None else None
            return out if out is not None else self._each(v, outer, j)
        return self._each(v, outer, j)

    def _row_load(self, v: Value, outer: list[str], j: str) -> list[str]:
        em = self.em
        name = em.tmp("r")
        em.emit(f"const aotc_vec16<{v.dtype.c}> {name} = *reinterpret_cast<const aotc_vec16<{v.dtype.c}> *>"
                f"({em.params[v]} + {linear(list(outer) + [j], v.shape)});")
        if v not in self.row_loads:
            self.row_loads.append(v)
        return [load_expr(f"{name}.v", str(e), v.dtype) for e in range(self.vec)]

    def _loads_rows(self, v: Value) -> bool:
        """A dense param (or view) of the root's item size whose rows are whole vectors."""
        last = v.shape[-1] if v.type.rank else 1
        return (v in self.em.params and v not in self.em.overrides and self.b.dense(v)
                and v.dtype.itemsize == self.size and isinstance(last, int) and last % self.vec == 0)

    def _each(self, v: Value, outer: list[str], j: str) -> list[str]:
        """The emitter's own per-element index math."""
        return [self.em.value(v, list(outer) + [j if e == 0 else f"{j} + {e}"]) for e in range(self.vec)]

    def _uniform(self, v: Value, idx: list[str]) -> list[str]:
        return [self.em.value(v, idx)] * self.vec

    def _elementwise(self, n, outer, j):
        em = self.em
        args = [self.values(u, outer, j) for u in n.inputs]
        out = []
        for e in range(self.vec):
            name = em.tmp()
            em.emit(f"const {compute_type(n.outputs[0].dtype)} {name} = {em._elementwise(n, [a[e] for a in args])};")
            out.append(name)
        return out

    def _broadcast_in_dim(self, n, outer, j):
        src = n.inputs[0]
        rank = n.outputs[0].type.rank
        dims = n.attrs["broadcast_dimensions"]
        sub = [outer[d] if d < rank - 1 and src.shape[i] != 1 else "0" for i, d in enumerate(dims)]
        if dims and dims[-1] == rank - 1 and src.shape[-1] != 1:
            return self.values(src, sub[:-1], j)
        return self._uniform(src, sub)

    def _reshape(self, n, outer, j):
        src, shape = n.inputs[0], n.outputs[0].shape
        if src.type.rank == 0 or src.shape[-1] != shape[-1]:
            return None
        em = self.em
        flat = em.tmp("f")
        em.emit(f"const {em.idx_t} {flat} = {linear(outer, shape[:-1])};")
        sub = []
        for i, (s, d) in enumerate(zip(strides(src.shape[:-1]), src.shape[:-1])):
            if d == 1:
                sub.append("0")
                continue
            e = flat if s == 1 else f"{flat} / {s}"
            sub.append(e if i == 0 else f"({e}) % {d}")
        return self.values(src, sub, j)

    def _transpose(self, n, outer, j):
        perm = n.attrs["permutation"]
        if perm[-1] != len(perm) - 1:
            return None
        sub = [""] * (len(perm) - 1)
        for i, p in enumerate(perm[:-1]):
            sub[p] = outer[i]
        return self.values(n.inputs[0], sub, j)

    def _slice(self, n, outer, j):
        if n.outputs[0] in self.em.params:          # a view: the emitter's strided loads
            return None
        start, stride = n.attrs["start"], n.attrs["stride"]
        if stride[-1] != 1 or start[-1] % self.vec:
            return None
        sub = []
        for i, s, k in zip(outer, start[:-1], stride[:-1]):
            e = i if k == 1 else f"({i}) * {k}"
            sub.append(e if s == 0 else f"{e} + {s}")
        return self.values(n.inputs[0], sub, j if start[-1] == 0 else f"{j} + {start[-1]}")

    def _concatenate(self, n, outer, j):
        ax = n.attrs["dimension"]
        if ax == n.outputs[0].type.rank - 1:
            return None
        em = self.em
        names = [em.tmp() for _ in range(self.vec)]
        em.emit(f"{compute_type(n.outputs[0].dtype)} {', '.join(names)};")

        def assign(src, local):
            sub = list(outer)
            sub[ax] = local
            for name, val in zip(names, self.values(src, sub, j)):
                em.emit(f"{name} = {val};")
        em.concat_branches(n, outer[ax], assign)
        return names

    def _gather(self, n, outer, j):
        data, ind = n.inputs
        ax, r = n.attrs["axis"], ind.type.rank
        if ax >= data.type.rank - 1:
            return None
        em = self.em
        k = em.value(ind, outer[ax:ax + r])
        g = em.tmp("g")
        size = data.shape[ax]
        em.emit(f"{em.idx_t} {g} = ({em.idx_t})({k});")      # as Emitter._gather: wrap, then clamp
        em.emit(f"{g} = {g} < 0 ? {g} + {size} : {g};")
        em.emit(f"{g} = {g} < 0 ? 0 : ({g} >= {size} ? {size - 1} : {g});")
        return self.values(data, list(outer[:ax]) + [g] + list(outer[ax + r:]), j)
