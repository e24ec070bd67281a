"""StableHLO ops with a per-element region: sort (comparator) and map (elementwise body).

A scalar region made of elementwise ops is evaluated on whole tensors
(`elementwise_region`): its block arguments are bound to tensors of one
shape, rank-0 values inside it (constants) are broadcast where they meet
those, and each op goes through the ordinary converter.

sort is a rank computation, as the ONNX importer does TopK: on the grid
(..., i, j) the comparator says whether element j goes before element i;
element i's rank is the number of elements before it plus the equal ones
with a smaller index (so the order is stable), and output slot r gathers the
element of rank r from every operand. Work is O(n^2) per sorted row: fine for
the short axes models sort (top-k candidates, small vocabularies), costly on
long ones.
"""
from __future__ import annotations

from collections import ChainMap

import numpy as np

from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import CONVERTERS, register, where
from aotc.importers.stablehlo.ops import bcast, reshape, size_scalar, transpose
from aotc.ir import dims as D
from aotc.ir import dtypes

_ELEMENTWISE = {
    f"stablehlo.{n}" for n in (
        "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "constant", "convert", "cosine", "divide",
        "exponential", "exponential_minus_one", "floor", "is_finite", "log", "log_plus_one", "logistic", "maximum",
        "minimum", "multiply", "negate", "not", "or", "power", "remainder", "round_nearest_afz",
        "round_nearest_even", "rsqrt", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical",
        "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor")
} | {"chlo.erf", "chlo.erfc", "chlo.is_inf", "chlo.is_pos_inf", "chlo.is_neg_inf", "stablehlo.return"}


def _region_check(op, what: str) -> str | None:
    bad = sorted({o.operation.name for o in op.regions[0].blocks[0].operations} - _ELEMENTWISE)
    return f"{what} body uses {', '.join(bad)} (supported: elementwise ops)" if bad else None


def elementwise_region(cx, region, args: list, shape) -> list:
    """The region's results with its scalar block arguments bound to the `shape`-d tensors `args`."""
    blk = region.blocks[0]
    env = ChainMap(dict(zip(blk.arguments, args)), cx.env)   # bodies may use values defined outside
    outer = cx.op
    try:
        for op in blk.operations:
            ins = [env[v] for v in op.operands]
            if any(v.type.rank for v in ins):   # constants inside the body are rank 0
                ins = [bcast(cx, v, shape, ()) if v.type.rank == 0 else v for v in ins]
            if op.operation.name == "stablehlo.return":
                return ins
            cx.op = op
            outs = CONVERTERS[op.operation.name](cx, ins)
            for r, v in zip(op.results, [outs] if not isinstance(outs, (list, tuple)) else outs):
                env[r] = v
    finally:
        cx.op = outer
    raise ValueError(f"{where(outer)}: region without return")


# ----------------------------------------------------------------- map

def _map_check(op):
    rank = M.tensor_type(op.results[0].type, "result")[0]
    if list(M.ints(op, "dimensions")) != list(range(len(rank))):
        return "map over a subset of the dimensions"
    return _region_check(op, "map")


@register("stablehlo.map", check=_map_check)
def _map(cx, ins):
    return elementwise_region(cx, cx.op.regions[0], list(ins), ins[0].shape)[0]


# ----------------------------------------------------------------- sort

@register("stablehlo.sort", check=lambda op: _region_check(op, "sort comparator"))
def _sort(cx, ins):
    rank = ins[0].type.rank
    d = M.scalar(cx.op, "dimension", -1) % rank
    perm = [a for a in range(rank) if a != d] + [d]
    xs = [transpose(cx, x, perm) for x in ins]
    lead, n = xs[0].shape[:-1], xs[0].shape[-1]
    r = len(lead)
    if n <= 1:
        return list(ins)
    grid = lead + (n, n)                                   # [..., i, j]
    keep = tuple(range(r))
    args = []
    for x in xs:   # comparator(lhs = element j, rhs = element i): does j go before i?
        args += [bcast(cx, x, grid, keep + (r + 1,)), bcast(cx, x, grid, keep + (r,))]
    before = elementwise_region(cx, cx.op.regions[0], args, grid)[0]
    src = _order(cx, before, n)
    inv = [perm.index(a) for a in range(rank)]
    return [transpose(cx, _take_last(cx, x, src), inv) for x in xs]


def _order(cx, before, k: int):
    """(..., k) source index of each of the first k output slots, from before[..., i, j] = "j goes before i"."""
    grid = before.shape
    r = len(grid) - 2
    n = grid[-1]
    keep = tuple(range(r))
    after = transpose(cx, before, keep + (r + 1, r))       # [..., i, j]: does i go before j?
    tie = cx.add("not", cx.add("or", before, after))
    earlier = cx.add("compare", cx.add("iota", shape=grid, dimension=r + 1, dtype="i32"),
                     cx.add("iota", shape=grid, dimension=r, dtype="i32"), direction="LT")
    counts = cx.add("or", before, cx.add("and", tie, earlier))
    pos = cx.add("reduce", cx.add("convert", counts, dtype="i32"), axes=(r + 1,), kind="sum")   # lead + (n,)
    # slot s takes the element whose rank is s: grid [..., s, i]
    slots = grid[:r] + (k, n)
    hit = cx.add("compare", bcast(cx, pos, slots, keep + (r + 1,)),
                 cx.add("iota", shape=slots, dimension=r, dtype="i32"), direction="EQ")
    who = cx.add("select", hit, cx.add("iota", shape=slots, dimension=r + 1, dtype="i32"),
                 bcast(cx, cx.scalar(0, dtypes.i32), slots, ()))
    return cx.add("reduce", who, axes=(r + 1,), kind="max")                                   # lead + (k,)


def _take_last(cx, x, src):
    """x[..., src[..., s]] along the last axis (take_along_axis) as one flat gather."""
    lead, n = x.shape[:-1], x.shape[-1]
    rows = D.prod(lead)
    lin = src
    if not (D.is_static(rows) and rows <= 1):
        if D.is_static(rows):
            base = cx.const((np.arange(rows, dtype=np.int32) * n).reshape(lead), dtypes.i32)
        else:   # row offsets of a dynamic number of rows: iota * n
            ramp = cx.add("iota", shape=(rows,), dimension=0, dtype="i32")
            base = reshape(cx, cx.add("mul", ramp, bcast(cx, size_scalar(cx, n, dtypes.i32), (rows,), ())), lead)
        lin = cx.add("add", src, bcast(cx, base, src.shape, tuple(range(len(lead)))))
    return cx.add("gather", reshape(cx, x, (rows * n,)), lin, axis=0)


@register("chlo.top_k")
def _top_k(cx, ins):
    """The k largest along the last axis, largest first, ties to the lower index (NaN counts as largest)."""
    from aotc.importers.stablehlo.ops import total_order
    x = ins[0]
    k = int(M.scalar(cx.op, "k"))
    r = x.type.rank - 1
    grid = x.shape + (x.shape[-1],)
    keep = tuple(range(r))
    xj, xi = bcast(cx, x, grid, keep + (r + 1,)), bcast(cx, x, grid, keep + (r,))
    before = total_order(cx, xj, xi, "GT") if x.dtype.is_float else cx.add("compare", xj, xi, direction="GT")
    src = _order(cx, before, k)
    idx_dt = cx.out_dtype(1)
    return [_take_last(cx, x, src), src if idx_dt == dtypes.i32 else cx.add("convert", src, dtype=idx_dt.name)]
