"""The rest of the chlo dialect: implicitly broadcasting binary ops, constants, square, mulhi, next_after, conj.

chlo ("client HLO") is the layer jax and TensorFlow emit above StableHLO.
`chlo.broadcast_<op>` is `stablehlo.<op>` with numpy-style broadcasting: each
operand is broadcast to the result shape (the lower-rank operand through
`broadcast_dimensions` when given, else aligned to the trailing dims), then
the op's own StableHLO converter runs, so its checks and semantics are
shared. The special functions are in special_ops.py; the trig and erf ops
in ops.py and math_ops.py; top_k in sort_ops.py.

Ops that aotc cannot express are listed in UNSUPPORTED with the reason the
pre-scan reports (and docs/stablehlo_ops.md shows).
"""
from __future__ import annotations

import re

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.stablehlo import mlir as M
from aotc.importers.stablehlo.importer import CHECKS, CONVERTERS, UNSUPPORTED, register
from aotc.importers.stablehlo.ops import bcast, convert, full, transpose
from aotc.ir import dims as D
from aotc.ir import dtypes

_COMPLEX = "complex element types are not supported"
UNSUPPORTED.update({
    "chlo.broadcast_complex": _COMPLEX,
    "chlo._asin_acos_kernel": f"an internal step of complex asin/acos decompositions; {_COMPLEX}",
    "chlo.scan": "no decomposition to StableHLO exists yet and jax does not emit it (lax.scan lowers to while)",
})

# chlo.broadcast_<name> -> the converter that does the element op after broadcasting
BROADCASTING = {
    "add": "stablehlo.add", "subtract": "stablehlo.subtract", "multiply": "stablehlo.multiply",
    "divide": "stablehlo.divide", "remainder": "stablehlo.remainder", "power": "stablehlo.power",
    "maximum": "stablehlo.maximum", "minimum": "stablehlo.minimum", "and": "stablehlo.and",
    "or": "stablehlo.or", "xor": "stablehlo.xor", "atan2": "stablehlo.atan2",
    "shift_left": "stablehlo.shift_left", "shift_right_arithmetic": "stablehlo.shift_right_arithmetic",
    "shift_right_logical": "stablehlo.shift_right_logical", "compare": "stablehlo.compare",
    "select": "stablehlo.select", "next_after": "chlo.next_after", "polygamma": "chlo.polygamma",
    "zeta": "chlo.zeta",
}


def _operand_dims(op, i: int, rank: int, out_rank: int) -> tuple[int, ...]:
    if rank == out_rank:
        return tuple(range(rank))
    given = M.ints(op, "broadcast_dimensions")
    if given is not None and len(given) == rank:
        return tuple(given)
    return tuple(range(out_rank - rank, out_rank))


def _broadcast_check(op):
    target = BROADCASTING[op.operation.name.removeprefix("chlo.broadcast_")]
    check = CHECKS.get(target)
    return check(op) if check else None


def _broadcasting(cx, ins):
    rank = len(M.tensor_type(cx.op.results[0].type, "result")[0])
    dims = [_operand_dims(cx.op, i, v.type.rank, rank) for i, v in enumerate(ins)]
    aligned = []    # each operand's shape at the result's rank, 1 where it has no dim
    for v, ds in zip(ins, dims):
        full_shape = [1] * rank
        for i, d in zip(range(v.type.rank), ds):
            full_shape[d] = v.shape[i]
        aligned.append(tuple(full_shape))
    try:
        shape = cx.out_shape(0, D.broadcast_shapes(*aligned))
    except D.DynamicDecisionError as e:
        raise cx.fail(str(e)) from None
    ins = [bcast(cx, v, shape, ds) for v, ds in zip(ins, dims)]
    return CONVERTERS[BROADCASTING[cx.name.removeprefix("chlo.broadcast_")]](cx, ins)


register(*(f"chlo.broadcast_{n}" for n in BROADCASTING), check=_broadcast_check)(_broadcasting)


@register("chlo.constant")
def _constant(cx, ins):
    return cx.const(M.elements_to_numpy(cx.op.attributes["value"]), cx.out_dtype())


@register("chlo.constant_like")
def _constant_like(cx, ins):
    shape, dt = ins[0].shape, cx.out_dtype()
    value = M.attr(cx.op, "value")
    v = value.value if hasattr(value, "value") else M.elements_to_numpy(value).reshape(-1)[0]
    return bcast(cx, cx.scalar(v, dt), shape, ())


@register("chlo.square")
def _square(cx, ins):
    return cx.add("mul", ins[0], ins[0])


@register("chlo.conj")
def _conj(cx, ins):
    return ins[0]        # real types only (the pre-scan rejects complex ones)


# ----------------------------------------------------------------- mulhi

@register("chlo.mulhi")   # integer operands (the op's verifier insists)
def _mulhi(cx, ins):
    """The high half of the double-width product; 64-bit operands through 32-bit halves."""
    a, b = ins
    if a.dtype != dtypes.i64:
        bits = 8 * a.dtype.itemsize
        wide = dtypes.i64 if a.dtype == dtypes.i32 else dtypes.i32
        p = cx.add("mul", convert(cx, a, wide), convert(cx, b, wide))
        return convert(cx, cx.add("shift_right", p, full(cx, bits, p)), a.dtype)
    low = full(cx, 0xFFFFFFFF, a)
    k32 = full(cx, 32, a)

    def high32(v):   # logical v >> 32
        return cx.add("and", cx.add("shift_right", v, k32), low)

    a0, a1 = cx.add("and", a, low), high32(a)
    b0, b1 = cx.add("and", b, low), high32(b)
    p00, p01, p10, p11 = (cx.add("mul", x, y) for x, y in ((a0, b0), (a0, b1), (a1, b0), (a1, b1)))
    mid = Ex(cx, high32(p00)) + cx.add("and", p01, low) + cx.add("and", p10, low)
    hi = Ex(cx, p11) + high32(p01) + high32(p10) + high32(mid.v)
    zero = full(cx, 0, a)
    neg_a, neg_b = (Ex(cx, v).cmp("LT", zero) for v in (a, b))     # signed: subtract the sign corrections
    hi = hi - cx.add("select", neg_a, b, zero) - cx.add("select", neg_b, a, zero)
    return hi.v


# ----------------------------------------------------------------- next_after

def _f32_only(op):
    _, dt = M.tensor_type(op.results[0].type, "result")
    return None if dt == dtypes.f32 else f"{dt} operands are not supported (f32 only: it steps the bit pattern)"


@register("chlo.next_after", check=_f32_only)
def _next_after(cx, ins):
    """The float after x towards y: the bit pattern +-1 (sign-magnitude), a signed denormal from zero."""
    x, y = Ex(cx, ins[0]), Ex(cx, ins[1])
    xi = Ex(cx, cx.add("bitcast_convert", x.v, dtype="i32"))
    yi = cx.add("bitcast_convert", y.v, dtype="i32")
    away = cx.add("not", cx.add("xor", y.cmp("GT", x), x.cmp("GT", 0.0)))   # |result| > |x|
    step = (xi + 1).where(away, xi - 1)
    tiny = Ex(cx, cx.add("or", cx.add("and", yi, full(cx, -2 ** 31, xi.v)), full(cx, 1, xi.v)))
    bits = tiny.where(x.cmp("EQ", 0.0), step)
    out = Ex(cx, cx.add("bitcast_convert", bits.v, dtype="f32"))
    out = y.where(x.cmp("EQ", y), out)
    nan = cx.add("or", x.cmp("NE", x), y.cmp("NE", y))
    return (x + y).where(nan, out).v


# ----------------------------------------------------------------- ragged_dot

def _ragged_dims(op) -> dict[str, tuple[int, ...]]:
    text = str(op.attributes["ragged_dot_dimension_numbers"])
    return {k: tuple(int(d) for d in re.findall(r"-?\d+", v))
            for k, v in re.findall(r"(\w+_dimensions) = \[([^\]]*)\]", text)}


def _ragged_check(op):
    d = _ragged_dims(op)
    lhs_rank, rhs_rank = (len(M.tensor_type(op.operands[i].type, "operand")[0]) for i in (0, 1))
    batched = d.get("lhs_batching_dimensions") or d.get("rhs_batching_dimensions")
    ragged, contract = d.get("lhs_ragged_dimensions", ()), d.get("lhs_contracting_dimensions", ())
    if batched or lhs_rank != 2 or rhs_rank != 3 or len(ragged) != 1 or ragged[0] in contract \
            or len(d.get("rhs_group_dimensions", ())) != 1 or len(contract) != 1:
        return ("only the [m,k] x [g,k,n] -> [m,n] form (ragged rows, one group dim, no batch dims) "
                "is supported")
    _, dt = M.tensor_type(op.results[0].type, "result")
    return None if dt.is_float else f"{dt} operands are not supported (float only)"


@register("chlo.ragged_dot", check=_ragged_check)
def _ragged_dot(cx, ins):
    """Row i of lhs times rhs[g] for the group g holding row i: every group's product, masked, summed.

    (m, k) x (g, k, n) -> (m, g, n) with one dot_general; rows past sum(group_sizes) are zeros.
    """
    d = _ragged_dims(cx.op)
    lhs, rhs, sizes = ins
    lc, rc, rg = d["lhs_contracting_dimensions"][0], d["rhs_contracting_dimensions"][0], d["rhs_group_dimensions"][0]
    out_dt = cx.out_dtype()
    lhs = transpose(cx, lhs, (1 - lc, lc))
    rhs = transpose(cx, rhs, (rg, rc, 3 - rg - rc))
    m, g, n = lhs.shape[0], rhs.shape[0], rhs.shape[2]
    prod = cx.add("dot_general", convert(cx, lhs, dtypes.f32), convert(cx, rhs, dtypes.f32), lhs_batch=(),
                  rhs_batch=(), lhs_contract=(1,), rhs_contract=(1,))                      # (m, g, n)
    sizes = convert(cx, sizes, dtypes.i32)
    upto = cx.const(np.tril(np.ones((g, g), np.int32)), dtypes.i32)                        # [j, i]: i <= j
    ends = cx.add("reduce", cx.add("mul", bcast(cx, sizes, (g, g), (1,)), upto), axes=(1,), kind="sum")
    starts = cx.add("sub", ends, sizes)
    row = cx.add("iota", shape=(m, g), dimension=0, dtype="i32")
    inside = cx.add("and", cx.add("compare", row, bcast(cx, starts, (m, g), (1,)), direction="GE"),
                    cx.add("compare", row, bcast(cx, ends, (m, g), (1,)), direction="LT"))
    kept = cx.add("select", bcast(cx, inside, (m, g, n), (0, 1)), prod, full(cx, 0.0, prod))
    out = cx.add("reduce", kept, axes=(1,), kind="sum")
    return convert(cx, out, out_dt)
