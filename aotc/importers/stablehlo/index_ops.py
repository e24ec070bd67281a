"""StableHLO converters for indexing: gather, dynamic_slice, dynamic_update_slice.

The IR's gather is numpy's `take` along one axis. Any StableHLO gather
(what jax emits for `table[ids]`, `x[:, idx]`, `x[i, j]`
with arrays, `x[ids, 1:4]`, take_along_axis with batching dims) maps onto it: the indexed dims
move to the front and merge into one, the index vector becomes one linear
index (each component clamped, as StableHLO clamps start indices; an indexed
dim that slices a window of size s adds `stride * arange(s)` along a new
dim), one take, then a reshape/transpose puts batch and offset dims where the
gather wants them.

dynamic_slice with indices known at import time is a slice; otherwise each
dynamic dim is a take of `clamp(start) + iota`. dynamic_update_slice is a pad
and a select (constant mask) or, with traced indices, an iota-built mask and
a take from the update.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.ops import bcast, convert, reshape, size_scalar, slice_dim, transpose
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.graph import Value


def _gather_dims(op):
    from jaxlib.mlir.dialects import stablehlo
    return stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])


def _clamp(cx, i, lo, hi):
    """clamp(lo, i, hi) elementwise on an index tensor (bounds may be dynamic sizes)."""
    c = lambda x: bcast(cx, size_scalar(cx, x, i.dtype), i.shape, ())  # noqa: E731
    return cx.add("clamp", c(lo), i, c(hi))


@register("stablehlo.gather")
def _gather(cx, ins, sizes=None):
    x, idx = ins[:2]
    dn = _gather_dims(cx.op)
    sizes = M.ints(cx.op, "slice_sizes") if sizes is None else sizes
    ivd = dn.index_vector_dim
    offset = list(dn.offset_dims)
    # operand batching dims (take_along_axis, vmapped indexing) are indexed dims whose
    # index is the position along the paired indices dim: an iota
    K = list(dn.start_index_map) + list(dn.operand_batching_dims)
    collapsed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    if ivd == idx.type.rank:
        idx = reshape(cx, idx, idx.shape + (1,))
    idx = transpose(cx, idx, [d for d in range(idx.type.rank) if d != ivd] + [ivd])
    batch = idx.shape[:-1]
    n = [x.shape[k] for k in K]
    total = D.prod(n)
    it = dtypes.i64 if D.upper(total) >= 2**31 else idx.dtype
    comps = [reshape(cx, slice_dim(cx, idx, idx.type.rank - 1, j, j + 1), batch)
             for j in range(len(dn.start_index_map))]
    for bi in dn.start_indices_batching_dims:
        comps.append(cx.add("iota", shape=batch, dimension=bi if bi < ivd else bi - 1, dtype=it.name))
    lin = None
    for j, (k, comp) in enumerate(zip(K, comps)):
        comp = _clamp(cx, convert(cx, comp, it), 0, x.shape[k] - sizes[k])
        stride = D.prod(n[j + 1:])
        if not (D.is_static(stride) and stride == 1):
            comp = cx.add("mul", comp, bcast(cx, size_scalar(cx, stride, it), batch, ()))
        lin = comp if lin is None else cx.add("add", lin, comp)
    wide = [j for j, k in enumerate(K) if sizes[k] != 1]   # indexed dims that slice a window
    if wide:   # every start expands to start + stride * arange(size) along one new trailing dim each
        shape = batch + tuple(sizes[K[j]] for j in wide)
        lin = bcast(cx, lin, shape, tuple(range(len(batch))))
        for w, j in enumerate(wide):
            if not D.is_static(sizes[K[j]]) or not D.is_static(D.prod(n[j + 1:])):
                raise cx.fail("a gather window of dynamic size along an indexed dim is not supported")
            step = np.arange(sizes[K[j]], dtype=it.np) * D.prod(n[j + 1:])
            lin = cx.add("add", lin, bcast(cx, cx.const(step, it), shape, (len(batch) + w,)))
    rest = [d for d in range(x.type.rank) if d not in K]
    y = transpose(cx, x, K + rest)
    for i, d in enumerate(rest):
        y = slice_dim(cx, y, len(K) + i, 0, sizes[d])
    y = reshape(cx, y, (total,) + y.shape[len(K):])
    g = cx.add("gather", y, lin, axis=0)                       # batch + wide + rest
    nb = len(batch)
    got = [K[j] for j in wide] + rest                          # operand dim of each non-batch dim
    g = transpose(cx, g, list(range(nb)) + [nb + got.index(d) for d in sorted(got)])
    kept = [d for d in range(x.type.rank) if d not in collapsed]
    g = reshape(cx, g, batch + tuple(sizes[d] for d in kept))  # size-1 dims in or out
    out_rank = nb + len(kept)
    perm, bi = [], 0
    for p in range(out_rank):
        if p in offset:
            perm.append(nb + offset.index(p))
        else:
            perm.append(bi)
            bi += 1
    return transpose(cx, g, perm)


# ----------------------------------------------------------------- dynamic slices

def _start(cx, v, n, size):
    """A start index clamped to [0, n - size]: a size (int or DimExpr) if known now, else a scalar Value."""
    s = cx.static(v)
    if s is not None:
        s = D.as_dim(np.asarray(s).reshape(()).item())
        return D.dmin(D.dmax(s, 0), n - size)
    return _clamp(cx, v, 0, n - size)


@register("stablehlo.dynamic_slice")
def _dynamic_slice(cx, ins):
    x, starts = ins[0], ins[1:]
    sizes = M.ints(cx.op, "slice_sizes")
    for d, (v, size) in enumerate(zip(starts, sizes)):
        s = _start(cx, v, x.shape[d], size)
        if not isinstance(s, Value) and not D.is_static(s):   # a start that is a dim expression: a
            s = size_scalar(cx, s, dtypes.i32)                 # run-time value (the IR's slice bounds stay
        if not isinstance(s, Value):                           # decidable over the ranges)
            x = slice_dim(cx, x, d, s, s + size)
        elif size != x.shape[d]:
            io = cx.add("iota", shape=(size,), dimension=0, dtype=s.dtype.name)
            x = cx.add("gather", x, cx.add("add", io, bcast(cx, s, (size,), ())), axis=d)
    return x


@register("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(cx, ins):
    x, upd, starts = ins[0], ins[1], ins[2:]
    st = [_start(cx, v, n, u) for v, n, u in zip(starts, x.shape, upd.shape)]
    if all(isinstance(s, int) for s in st) and x.type.is_static:
        low = tuple(st)
        high = tuple(n - s - u for n, s, u in zip(x.shape, st, upd.shape))
        padded = cx.add("pad", upd, cx.scalar(0, x.dtype), low=low, high=high)
        mask = np.zeros(x.shape, bool)
        mask[tuple(slice(s, s + u) for s, u in zip(st, upd.shape))] = True
        return cx.add("select", cx.const(mask, dtypes.boolean), padded, x)
    mask, val = None, upd
    for d, (s, n, u) in enumerate(zip(st, x.shape, upd.shape)):
        if isinstance(s, int) and s == 0 and u == n:     # the update spans this dim
            continue
        it = s.dtype if isinstance(s, Value) else dtypes.i32
        sv = s if isinstance(s, Value) else size_scalar(cx, s, it)
        io = cx.add("iota", shape=(n,), dimension=0, dtype=it.name)
        rel = cx.add("sub", io, bcast(cx, sv, (n,), ()))
        inside = cx.add("and", cx.add("compare", rel, bcast(cx, cx.scalar(0, it), (n,), ()), direction="GE"),
                        cx.add("compare", rel, bcast(cx, size_scalar(cx, u, it), (n,), ()), direction="LT"))
        inside = bcast(cx, inside, x.shape, (d,))
        mask = inside if mask is None else cx.add("and", mask, inside)
        val = cx.add("gather", val, _clamp(cx, rel, 0, u - 1), axis=d)
    return val if mask is None else cx.add("select", mask, val, x)
