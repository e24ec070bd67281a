"""merge-reduces: per-head statistics of adjacent column windows of one tensor become one reduction.

Qwen3 (and OLMo-2, Gemma3) normalize each head of Q and of K: after merge-dots
the two are column windows of the one QKV projection, `X[..., 0:Hq*dh]` and
`X[..., Hq*dh:(Hq+Hk)*dh]`, each viewed as (..., heads, dh) and reduced over dh
through the same elementwise chain (x**2 for RMSNorm). Two reductions are two
kernels; over the joined window, viewed as (..., Hq+Hk, dh), they are one, and
each norm reads its heads' statistics as a slice of the joint result.

The pass groups reductions whose input is such a chain on `slice(X)` (the
slice keeps every dim but the last, stride 1; one reshape in the chain splits
the last dim into (heads, dh); the reduction is over dh alone; the chain's
other ops take the running value and constants only), by X, dh, the reduction kind and the chain, and
merges each run of windows that touch (one's limit the next one's start).

Guarantee: exact (the same sums over the same elements); each merged
reduction's result Value is kept, now a slice of the joint reduction. Leaves
alone: windows that do not touch, different chains, kinds or head sizes,
reductions over more than the head dim, and a reduction alone in its group.
"""
from __future__ import annotations

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter, splat
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value


def _chain(v: Value, producer, constants):
    """(the slice node, the one reshape node, [(node, operand signature)] in order of application) or
    None: v = ops(slice(X)) with one reshape among the ops, every other op elementwise on the running
    value and constant-valued operands ("x" marks the running value). Elementwise ops with scalar
    operands commute with the reshape (transpose-sink moves it), so they are kept as one list."""
    steps, view = [], None
    while len(steps) <= 8:
        n = producer.get(v)
        if n is None:
            return None
        if n.op == "slice":
            return (n, view, steps[::-1]) if view is not None else None
        if n.op == "reshape" and view is None:
            view, v = n, n.inputs[0]
            continue
        if ops.category(n.op) != ops.ELEMENTWISE or len(n.outputs) != 1:
            return None
        scalars = [splat(constants, producer, x) for x in n.inputs]
        running = {x for x, c in zip(n.inputs, scalars) if c is None}
        if len(running) != 1:
            return None
        (v,) = running
        steps.append((n, tuple("x" if c is None else float(c) for c in scalars)))
    return None


def _window(reduce: Node, producer, constants):
    """(group key, (start, limit, heads), chain steps) of a per-head reduction on a column window, or None."""
    x = reduce.inputs[0]
    rank = x.type.rank
    if tuple(reduce.attrs["axes"]) != (rank - 1,) or rank < 3 or not x.dtype.is_float:
        return None
    found = _chain(x, producer, constants)
    if found is None:
        return None
    s, view, steps = found
    src = s.inputs[0]
    lead, (heads, dh) = tuple(x.shape[:-2]), x.shape[-2:]
    if tuple(view.inputs[0].shape) != lead + (heads * dh,) or tuple(view.outputs[0].shape) != tuple(x.shape) \
            or src.type.rank != rank - 1 or any(st != 1 for st in s.attrs["stride"]) \
            or any(a != 0 for a in s.attrs["start"][:-1]) or tuple(s.attrs["limit"][:-1]) != tuple(src.shape[:-1]):
        return None
    key = (src, dh, reduce.attrs["kind"], tuple((n.op, sig) for n, sig in steps), x.dtype)
    return key, (s.attrs["start"][-1], s.attrs["limit"][-1], heads), steps


def _runs(windows):
    """Runs (in column order) of windows that touch, two or more long."""
    ordered = sorted(windows, key=lambda w: w[1][0])
    runs, cur = [], [ordered[0]]
    for w in ordered[1:]:
        if w[1][0] == cur[-1][1][1]:
            cur.append(w)
        else:
            runs.append(cur)
            cur = [w]
    runs.append(cur)
    return [r for r in runs if len(r) > 1]


def run(graph: Graph) -> Graph:
    """A new Graph whose per-head reductions over touching windows of one tensor run as one."""
    rw = Rewriter(graph)
    producer = graph.producers()
    groups: dict = {}
    for n in graph.nodes:
        if n.op == "reduce":
            w = _window(n, producer, graph.constants)
            if w is not None:
                groups.setdefault(w[0], []).append((n, w[1], w[2]))
    plan: dict[Node, tuple] = {}          # reduce -> (source, run, its first head in the joint result)
    for key, windows in groups.items():
        if len(windows) < 2:
            continue
        for r in _runs(windows):
            first = 0
            for n, (_, _, heads), _ in r:
                plan[n] = (key[0], r, first)
                first += heads
    joint: dict[int, Value] = {}
    for n in graph.nodes:
        if n not in plan:
            rw.keep(n)
            continue
        src, r, first = plan[n]
        if id(r) not in joint:
            joint[id(r)] = _emit_joint(rw, src, r)
        out = n.outputs[0]
        rank = out.type.rank
        rw.add("slice", joint[id(r)], name=n.name, out=out, start=(0,) * (rank - 1) + (first,),
               limit=tuple(out.shape[:-1]) + (first + out.shape[-1],), stride=(1,) * rank)
    return rw.finish()


def _emit_joint(rw: Rewriter, src: Value, run_) -> Value:
    """The reduction over the joined window: slice, view as (..., all heads, dh), the chain, reduce."""
    reduce, (start, _, _), steps = run_[0]
    limit = run_[-1][1][1]
    x = reduce.inputs[0]
    lead, dh = tuple(x.shape[:-2]), x.shape[-1]
    heads = sum(w[1][2] for w in run_)
    v = rw.add("slice", src, name=reduce.name, start=(0,) * len(lead) + (start,), limit=lead + (limit,),
               stride=(1,) * (len(lead) + 1))
    shape = lead + (heads, dh)
    v = rw.add("reshape", v, name=reduce.name, shape=shape)
    for node, sig in steps:
        args = [v if c == "x" else rw.add("broadcast_in_dim",
                                          rw.constant(np.array(c, x.dtype.np), f"{node.name}.c", x.dtype),
                                          name=node.name, shape=shape, broadcast_dimensions=())
                for c in sig]
        v = rw.add(node.op, *args, name=node.name, **node.attrs)
    return rw.add("reduce", v, name=reduce.name, **reduce.attrs)
