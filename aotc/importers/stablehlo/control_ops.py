"""StableHLO control flow onto a dataflow graph: while loops unrolled, conditionals if-converted.

aotc's IR has no control flow, so:
- `while`: the condition is evaluated at import time, iteration by
  iteration, and the body inlined while it holds. That covers what jax emits
  for `fori_loop` with static bounds and `lax.scan` (the counter starts as a
  constant and is bumped by a constant); a condition that depends on input
  values cannot be unrolled and is reported. The unrolled size is bounded by
  MAX_TRIPS iterations.
- `case` / `if`: with an index or predicate known at import time only the
  taken branch is inlined; otherwise every branch is converted (StableHLO
  branches have no side effects aotc supports) and the results are selected
  by the index, as `case` defines: an out-of-range index takes the last branch.
  Both branches are then computed at run time.
"""
from __future__ import annotations

from aotc.importers.stablehlo.importer import register
from aotc.importers.stablehlo.ops import bcast
from aotc.ir import dims as D
from aotc.ir import dtypes

MAX_TRIPS = 1024


@register("stablehlo.while")
def _while(cx, ins):
    cond, body = cx.op.regions
    carried = list(ins)
    for trip in range(MAX_TRIPS + 1):
        (pred,) = cx.run_region(cond, carried)
        try:
            p = cx.static(pred)
        except D.DynamicDecisionError as e:
            raise cx.fail(f"the loop's trip count depends on dynamic dims ({e}); aotc unrolls loops whose trip "
                          "count is known at compile time") from None
        if p is None:
            raise cx.fail("the loop condition depends on input values; aotc unrolls loops whose trip count "
                          "is known at import time (fori_loop with static bounds, scan)")
        if not bool(p):
            return carried
        if trip == MAX_TRIPS:
            raise cx.fail(f"the loop runs more than {MAX_TRIPS} iterations (aotc unrolls loops)")
        carried = cx.run_region(body, carried)
    return carried


def _select_branch(cx, index, branches):
    """Branch `index` (clamped into the last one) of regions without arguments."""
    n = len(branches)
    k = cx.static(index)
    if k is not None:
        k = int(k)
        return cx.run_region(branches[k if 0 <= k < n else n - 1], [])
    results = [cx.run_region(b, []) for b in branches]
    outs = results[-1]
    for k in range(n - 2, -1, -1):
        hit = cx.add("compare", index, cx.scalar(k, index.dtype), direction="EQ")
        outs = [cx.add("select", bcast(cx, hit, a.shape, ()), a, b) for a, b in zip(results[k], outs)]
    return outs


@register("stablehlo.case")
def _case(cx, ins):
    return _select_branch(cx, ins[0], list(cx.op.regions))


@register("stablehlo.if")
def _if(cx, ins):
    index = cx.add("select", ins[0], cx.scalar(0, dtypes.i32), cx.scalar(1, dtypes.i32))
    return _select_branch(cx, index, list(cx.op.regions))
