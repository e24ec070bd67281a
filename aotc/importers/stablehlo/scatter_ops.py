"""StableHLO converters for scatter and select_and_scatter (what jax emits for `x.at[...]` and max-pool gradients).

The IR has no scatter primitive; both ops become compare / select / reduce /
gather / pad, in the way the ONNX importer lowers ScatterND
(aotc/importers/onnx/index_ops.py), with the index bookkeeping of StableHLO's general
dimension numbers done at import time.

scatter: the operand is viewed as (R, C): C covers the operand dims that
every update window spans completely, R the rest. Each (scatter index,
partial-window offset) pair of the updates becomes one row key in [0, R), or
-1 when its window is out of bounds (StableHLO leaves such updates out;
jax's default FILL_OR_DROP mode relies on it, its CLIP mode clamps the indices
before the scatter). Row r then looks for the keys equal to r on an
(R, keys) grid: combiners add / multiply / maximum / minimum reduce all of
them (duplicates combine); a body that returns the update ("set") takes the
LAST matching update in row-major order of the update's scatter dims. That
order is implementation-defined in StableHLO; it is what XLA does on the CPU.
The indices_are_sorted / unique_indices flags are hints and change nothing.
Work is O(operand size x number of keys).

select_and_scatter: window offset k's elements are one strided slice of the
(padded) operand, so the select body is replayed exactly as the spec
iterates (first element, then `select(current, candidate)` per offset, in
row-major window order: GE keeps the first maximum), giving the chosen offset
per window; source values then go back to their positions by one interior
pad per offset, combined with the scatter body and the init value.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.nn_ops import identity
from aotc.importers.stablehlo.ops import bcast, convert, pad, reshape, size_scalar, slice_dim, transpose
from aotc.ir import dims as D
from aotc.ir import dtypes

_KINDS = {"stablehlo.add": "sum", "stablehlo.multiply": "prod", "stablehlo.maximum": "max",
          "stablehlo.minimum": "min"}
_BOOL_KINDS = {"stablehlo.add": "max", "stablehlo.or": "max", "stablehlo.maximum": "max",
               "stablehlo.multiply": "min", "stablehlo.and": "min", "stablehlo.minimum": "min"}
_COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


def _update_kinds(region, dts) -> list[str] | None:
    """Per output: 'set' (returns the update), 'keep' (returns the operand) or a reduce kind."""
    blk = region.blocks[0]
    args = list(blk.arguments)
    n = len(args) // 2
    ops = list(blk.operations)
    producers = {r: o for o in ops[:-1] for r in o.results}
    kinds = []
    for i, r in enumerate(ops[-1].operands):
        if r == args[n + i]:
            kinds.append("set")
            continue
        if r == args[i]:
            kinds.append("keep")
            continue
        o = producers.get(r)
        table = _BOOL_KINDS if dts[i] == dtypes.boolean else _KINDS
        if o is None or o.operation.name not in table or set(o.operands) != {args[i], args[n + i]}:
            return None
        kinds.append(table[o.operation.name])
    return kinds


def _elem_types(values) -> list:
    return [M.tensor_type(v.type, "operand")[1] for v in values]


def _body_text(region) -> list[str]:
    return [o.operation.name for o in region.blocks[0].operations]


# ----------------------------------------------------------------- scatter

def _scatter_check(op):
    n = (len(op.operands) - 1) // 2
    if _update_kinds(op.regions[0], _elem_types(op.operands[:n])) is None:
        return (f"scatter update_computation {_body_text(op.regions[0])} is not supported (supported: return the "
                "update, add, multiply, maximum, minimum of the two arguments; and/or for bool)")
    return None


class _Geometry:
    """Where each update element lands: row keys (-1 = dropped) over the operand viewed as (R, C)."""

    def __init__(self, cx, op, x, idx, upd):
        from jaxlib.mlir.dialects import stablehlo
        dn = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
        uwd = list(dn.update_window_dims)
        obd, sibd = list(dn.input_batching_dims), list(dn.scatter_indices_batching_dims)
        s2o, ivd = list(dn.scattered_dims_to_operand_dims), dn.index_vector_dim
        r = x.type.rank
        not_window = set(dn.inserted_window_dims) | set(obd)
        owd = [d for d in range(r) if d not in not_window]          # operand dim of each update window dim
        usd = [d for d in range(upd.type.rank) if d not in uwd]      # the update's scatter dims
        S = tuple(upd.shape[d] for d in usd)
        w = {d: 1 for d in range(r)}
        w.update({d: upd.shape[uwd[k]] for k, d in enumerate(owd)})
        self.full = [d for d in owd if w[d] == x.shape[d]]           # spanned by every window: C
        rows = [d for d in range(r) if d not in self.full]
        partial = [d for d in owd if d not in self.full]             # window dims that add an offset
        self.rows = rows
        K = S + tuple(w[d] for d in partial)
        self.keys_shape = K
        R = D.prod([x.shape[d] for d in rows])
        wide = idx.dtype == dtypes.i64 or max(D.upper(R), D.upper(D.prod(K))) >= 2**31   # i64 must not wrap
        self.it = dtypes.i64 if wide else dtypes.i32
        it = self.it
        starts, valid = self._starts(cx, idx, ivd, s2o, obd, sibd, S, x.shape, w)
        strides = {d: D.prod([x.shape[e] for e in rows[i + 1:]]) for i, d in enumerate(rows)}
        lin = bcast(cx, cx.scalar(0, it), K, ())
        for d in rows:
            pos = bcast(cx, starts[d], K, tuple(range(len(S)))) if d in starts else None
            if d in partial:
                off = cx.add("iota", shape=K, dimension=len(S) + partial.index(d), dtype=it.name)
                pos = off if pos is None else cx.add("add", pos, off)
            if pos is not None:
                if not (D.is_static(strides[d]) and strides[d] == 1):
                    pos = cx.add("mul", pos, bcast(cx, size_scalar(cx, strides[d], it), K, ()))
                lin = cx.add("add", lin, pos)
        if valid is not None:
            lin = cx.add("select", bcast(cx, valid, K, tuple(range(len(S)))), lin,
                         bcast(cx, cx.scalar(-1, it), K, ()))
        self.keys = reshape(cx, lin, (D.prod(K),))
        # updates as (keys, C): scatter dims, then partial window dims, then full ones
        self.upd_perm = usd + [uwd[owd.index(d)] for d in partial] + [uwd[owd.index(d)] for d in self.full]
        self.R, self.C = R, D.prod([x.shape[d] for d in self.full])

    def _starts(self, cx, idx, ivd, s2o, obd, sibd, S, shape, w):
        """Per operand dim, the window start as an (S)-shaped tensor; and the in-bounds mask (or None)."""
        it = self.it
        if ivd == idx.type.rank:
            idx = reshape(cx, idx, idx.shape + (1,))
        idx = transpose(cx, idx, [d for d in range(idx.type.rank) if d != ivd] + [ivd])
        starts, valid = {}, None
        for j, d in enumerate(s2o):
            s = convert(cx, reshape(cx, slice_dim(cx, idx, idx.type.rank - 1, j, j + 1), S), it)
            starts[d] = s
            ok = cx.add("and", cx.add("compare", s, bcast(cx, cx.scalar(0, it), S, ()), direction="GE"),
                        cx.add("compare", s, bcast(cx, size_scalar(cx, shape[d] - w[d], it), S, ()), direction="LE"))
            valid = ok if valid is None else cx.add("and", valid, ok)
        for d, bi in zip(obd, sibd):   # batching dims: the position along the paired indices dim
            starts[d] = cx.add("iota", shape=S, dimension=bi if bi < ivd else bi - 1, dtype=it.name)
        return starts, valid

    def operand_2d(self, cx, x):
        return reshape(cx, transpose(cx, x, self.rows + self.full), (self.R, self.C))

    def updates_2d(self, cx, u):
        return reshape(cx, transpose(cx, u, self.upd_perm), (D.prod(self.keys_shape), self.C))

    def back(self, cx, y, x):
        order = self.rows + self.full
        y = reshape(cx, y, tuple(x.shape[d] for d in order))
        return transpose(cx, y, [order.index(d) for d in range(len(order))])


@register("stablehlo.scatter", check=_scatter_check)
def _scatter(cx, ins):
    n = (len(ins) - 1) // 2
    xs, idx, us = ins[:n], ins[n], ins[n + 1:]
    kinds = _update_kinds(cx.op.regions[0], [x.dtype for x in xs])
    g = _Geometry(cx, cx.op, xs[0], idx, us[0])
    U = D.prod(g.keys_shape)
    if U == 0 or g.R * g.C == 0:
        return list(xs)
    grid = (g.R, U)
    hit = cx.add("compare", bcast(cx, g.keys, grid, (1,)), cx.add("iota", shape=grid, dimension=0, dtype=g.it.name),
                 direction="EQ")
    last = None
    outs = []
    for x, u, kind in zip(xs, us, kinds):
        if kind == "keep":
            outs.append(x)
            continue
        x2, u2 = g.operand_2d(cx, x), g.updates_2d(cx, u)
        if kind == "set":
            if last is None:   # the last matching key per row, -1 if none
                who = cx.add("select", hit, cx.add("iota", shape=grid, dimension=1, dtype=g.it.name),
                             bcast(cx, cx.scalar(-1, g.it), grid, ()))
                last = cx.add("reduce", who, axes=(1,), kind="max")
                zero = bcast(cx, cx.scalar(0, g.it), (g.R,), ())
                found = bcast(cx, cx.add("compare", last, zero, direction="GE"), (g.R, g.C), (0,))
                pick = cx.add("max", last, zero)
            y = cx.add("select", found, cx.add("gather", u2, pick, axis=0), x2)
        else:
            y = _combine(cx, x2, u2, hit, kind)
        outs.append(g.back(cx, y, x))
    return outs


def _combine(cx, x2, u2, hit, kind):
    """x2 (R, C) combined with every row of u2 (keys, C) whose key hits it: reduce over the keys."""
    R, C = x2.shape
    U = u2.shape[0]
    wide = dtypes.i32 if x2.dtype == dtypes.boolean else x2.dtype   # the IR does not reduce bools
    grid = (R, U, C)
    vals = bcast(cx, convert(cx, u2, wide), grid, (1, 2))
    vals = cx.add("select", bcast(cx, hit, grid, (0, 1)), vals,
                  bcast(cx, cx.scalar(identity(kind, wide), wide), grid, ()))
    part = cx.add("reduce", vals, axes=(1,), kind=kind)
    return convert(cx, cx.add(_COMBINE[kind], convert(cx, x2, wide), part), x2.dtype)


# ----------------------------------------------------------------- select_and_scatter

def _select_rule(op):
    """(direction, swapped) when the select body is one compare of its two arguments, else None."""
    blk = op.regions[0].blocks[0]
    a = list(blk.arguments)
    ops = list(blk.operations)
    if len(ops) != 2 or ops[0].operation.name != "stablehlo.compare" or list(ops[1].operands) != [ops[0].result]:
        return None
    d = M.enum_text(ops[0].attributes["comparison_direction"])
    if list(ops[0].operands) == a:
        return d, False
    if list(ops[0].operands) == a[::-1]:
        return d, True
    return None


def _select_and_scatter_check(op):
    if _select_rule(op) is None:
        return f"select_and_scatter select body {_body_text(op.regions[0])} (supported: one compare of the arguments)"
    kinds = _update_kinds(op.regions[1], _elem_types(op.operands[2:]))
    if kinds is None or kinds[0] in ("set", "keep"):
        return (f"select_and_scatter scatter body {_body_text(op.regions[1])} "
                "(supported: add, multiply, maximum, minimum)")
    return None


@register("stablehlo.select_and_scatter", check=_select_and_scatter_check)
def _select_and_scatter(cx, ins):
    x, src, init = ins
    direction, swapped = _select_rule(cx.op)
    kind = _update_kinds(cx.op.regions[1], [src.dtype])[0]
    r = x.type.rank
    win = M.ints(cx.op, "window_dimensions")
    strides = M.ints(cx.op, "window_strides", (1,) * r)
    pads = M.int_matrix(cx.op, "padding")
    pads = [(0, 0)] * r if pads is None else [(int(a), int(b)) for a, b in pads]
    low, high = [p[0] for p in pads], [p[1] for p in pads]
    xp = pad(cx, x, cx.scalar(0, x.dtype), low, high)
    inside = np.zeros(xp.shape, bool)       # padding never takes part in the selection
    inside[tuple(slice(a, a + n) for a, n in zip(low, x.shape))] = True
    out = src.shape
    offsets = list(np.ndindex(*win))

    def window_slice(v, k):
        lim = tuple(k[d] + (out[d] - 1) * strides[d] + 1 for d in range(r))
        return v[tuple(slice(k[d], lim[d], strides[d]) for d in range(r))] if isinstance(v, np.ndarray) else \
            cx.add("slice", v, start=tuple(k), limit=lim, stride=tuple(strides))

    cur, who, have = None, None, None
    for i, k in enumerate(offsets):
        cand, real = window_slice(xp, k), window_slice(inside, k)
        if cur is None:
            cur, who, have = cand, bcast(cx, cx.scalar(0, dtypes.i32), out, ()), real
            continue
        keep = cx.add("compare", cand, cur, direction=direction) if swapped else \
            cx.add("compare", cur, cand, direction=direction)
        if not have.all():                   # nothing selected yet: take the first real element
            keep = cx.add("and", keep, cx.const(have, dtypes.boolean))
        if not real.all():                   # a padding candidate never replaces the selection
            keep = cx.add("or", keep, cx.const(~real, dtypes.boolean))
        cur = cx.add("select", keep, cur, cand)
        who = cx.add("select", keep, who, bcast(cx, cx.scalar(i, dtypes.i32), out, ()))
        have = have | real
    ident = cx.scalar(identity(kind, src.dtype), src.dtype)
    total = None
    for i, k in enumerate(offsets):
        mine = cx.add("compare", who, bcast(cx, cx.scalar(i, dtypes.i32), out, ()), direction="EQ")
        part = cx.add("select", mine, src, bcast(cx, ident, out, ()))
        hi = [xp.shape[d] - (k[d] + (out[d] - 1) * strides[d] + 1) for d in range(r)]
        part = pad(cx, part, ident, list(k), hi, [s - 1 for s in strides])
        total = part if total is None else cx.add(_COMBINE[kind], total, part)
    for d in range(r):
        total = slice_dim(cx, total, d, low[d], low[d] + x.shape[d])
    s = cx.static(init)
    if s is not None and float(s) == float(identity(kind, src.dtype)):
        return total
    return cx.add(_COMBINE[kind], total, bcast(cx, init, total.shape, ()))
