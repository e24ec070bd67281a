"""merge-dots: sibling matmuls that read the same activation become one GEMM.

Transformers project one activation three times (Q, K, V) with three
weight matrices: three GEMM launches that each read the activation. When
several `dot_general`s share their LHS and have constant 2-D RHS weights
with the same contraction, this pass concatenates the weights (and, when
every one of them is followed by a bias add, the biases) and computes one
wider GEMM; each original result becomes a `slice` of it, which fusion folds
into the consumers as index math.

A sibling whose result has an activation of its own (Phi's fc1 and its
gelu, beside Q/K/V on the same LayerNorm) stays out of the merged GEMM:
fusion would make that activation its GEMM's epilogue, which a merged GEMM
cannot have (the epilogue covers every column), so merging it would write its
result and read it back in a loop kernel of its own. Siblings whose chains
meet in one elementwise op (SwiGLU's gate and up) form one unit that stays
together: the gated epilogue needs both in one GEMM. A linear chain (BART's
`q_proj(x) * scaling`) is no activation: the attention kernel takes it.

Guarantees: results are unchanged up to float summation order (each output
element is the same dot product). Siblings with a bias and siblings without
one form two groups. Leaves alone: dots whose RHS is not a constant, batched
dots, dots whose result (or bias-add result) is a graph output, and integer /
fp8 dots (`out_dtype`): each has its own scale epilogue, which stays fused
into its own GEMM instead of reading a merged accumulator back.
"""
from __future__ import annotations

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value

# elementwise ops a chain may hold and stay linear (a scale, a bias, a cast); any other
# elementwise op (tanh, logistic, erf, max, pow, exp...) makes the chain an activation
_LINEAR = frozenset({"add", "sub", "mul", "div", "neg", "convert"})
_VIEWS = ("reshape", "transpose")


def _bias_of(d: Node, users, producer, constants, outputs):
    """(add node, 1-D bias array) when d's only user adds a per-column constant bias."""
    us = users.get(d.outputs[0], [])
    if len(us) != 1 or us[0].op != "add" or d.outputs[0] in outputs:
        return None
    add = us[0]
    other = add.inputs[1] if add.inputs[0] is d.outputs[0] else add.inputs[0]
    bc = producer.get(other)
    rank = d.outputs[0].type.rank
    if bc is None or bc.op != "broadcast_in_dim" or tuple(bc.attrs["broadcast_dimensions"]) != (rank - 1,):
        return None
    b = constants.get(bc.inputs[0])
    if b is None or b.ndim != 1 or b.shape[0] != d.outputs[0].shape[-1] or add.outputs[0] in outputs:
        return None
    return add, b


def _key(d: Node, constants):
    a = d.attrs
    w = constants.get(d.inputs[1])
    if (w is None or w.ndim != 2 or a.get("out_dtype") or a["lhs_batch"] or a["rhs_batch"] or len(a["lhs_contract"]) != 1
            or tuple(a["rhs_contract"]) not in ((0,), (1,))):
        return None
    # the free dim of the RHS must be the result's last dim: a single-LHS-free-dims dot
    return (d.inputs[0], tuple(a["lhs_contract"]), tuple(a["rhs_contract"]), str(w.dtype), w.shape[a["rhs_contract"][0]])


def _chain_node(n: Node) -> bool:
    """An op fusion walks through from a GEMM's result into its epilogue."""
    return len(n.outputs) == 1 and (ops.category(n.op) == ops.ELEMENTWISE or n.op in _VIEWS)


def _reach(d: Node, users, outputs) -> tuple[set[Node], set[Value]]:
    """The elementwise chain below `d` that fusion could make its epilogue, and the values it ends in.

    A value continues the chain when every reader is elementwise (or a reshape or
    transpose); otherwise it ends the chain (a sink): it is materialized, or some
    other kernel (attention, a reduction) takes it as a prologue.
    """
    nodes: set[Node] = set()
    sinks: set[Value] = set()
    todo = [d.outputs[0]]
    while todo:
        v = todo.pop()
        us = users.get(v, [])
        if v in outputs or not us or not all(_chain_node(u) for u in us):
            sinks.add(v)
            continue
        for u in us:
            if u not in nodes:
                nodes.add(u)
                todo.append(u.outputs[0])
    return nodes, sinks


def _materialized(v: Value, users, outputs) -> bool:
    """The chain's end goes to memory: a graph output, or read only by GEMMs and convs, whose
    operand loads take index math only. (A reduction or loop kernel reading it would take the
    activation as its own prologue: merged, the activation costs no extra kernel or pass.)"""
    us = users.get(v, [])
    return v in outputs or (bool(us) and all(ops.category(u.op) in (ops.DOT, ops.CONV) for u in us))


def _units(dots: list[Node], users, outputs) -> list[tuple[list[Node], bool]]:
    """Dots whose chains meet (gate and up) as one unit each, with whether the unit has an activation
    of its own: a non-linear op in its chain and the chain ending in one materialized value, the
    root of the epilogue fusion would give its GEMM (several ends: Qwen3's per-head q norm, which
    a reduction reads; no epilogue region forms)."""
    reach = [_reach(d, users, outputs) for d in dots]
    parent = list(range(len(dots)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[Node, int] = {}
    for i, (nodes, _) in enumerate(reach):
        for n in nodes:
            j = owner.setdefault(n, i)
            if find(j) != find(i):
                parent[find(j)] = find(i)
    members: dict[int, list[int]] = {}
    for i in range(len(dots)):
        members.setdefault(find(i), []).append(i)
    out = []
    for idx in members.values():
        nodes = set().union(*(reach[i][0] for i in idx))
        sinks = set().union(*(reach[i][1] for i in idx))
        act = (len(sinks) == 1 and _materialized(next(iter(sinks)), users, outputs)
               and any(ops.category(n.op) == ops.ELEMENTWISE and n.op not in _LINEAR for n in nodes))
        out.append(([dots[i] for i in idx], act))
    return out


def run(graph: Graph) -> Graph:
    users, producer, outputs = graph.users(), graph.producers(), set(graph.outputs)
    groups: dict[tuple, list[Node]] = {}
    for n in graph.nodes:
        if n.op == "dot_general" and n.outputs[0] not in outputs:
            k = _key(n, graph.constants)
            if k is not None:
                groups.setdefault(k, []).append(n)
    plans = {}
    for key, dots in groups.items():
        if len(dots) < 2:
            continue
        bias = {d: _bias_of(d, users, producer, graph.constants, outputs) for d in dots}
        # a unit with an activation of its own merges alone; the rest merge together
        unit = {d: (i if act else -1) for i, (ds, act) in enumerate(_units(dots, users, outputs)) for d in ds}
        # with and without a bias merge apart (GPT-J's bias-free Q/K/V beside its biased fc_in)
        parts: dict[tuple, list[Node]] = {}
        for d in dots:
            parts.setdefault((bias[d] is not None, unit[d]), []).append(d)
        for part in parts.values():
            if len(part) >= 2:
                plans[part[0]] = (key, part, [bias[d] for d in part])
    if not plans:
        return graph.with_nodes(graph.nodes)
    rw = Rewriter(graph)
    skip: set[Node] = set()
    for plan in plans.values():
        for d, bias in zip(plan[1][1:], plan[2][1:]):
            skip.add(d)
        for bias in plan[2]:
            if bias is not None:
                skip.add(bias[0])
    for n in graph.nodes:
        if n in plans:
            _emit_merged(rw, graph, *plans[n])
        elif n not in skip:
            rw.keep(n)
    return rw.finish()


def _emit_merged(rw: Rewriter, graph: Graph, key, dots: list[Node], biases):
    rc = key[2][0]
    ws = [graph.constants[d.inputs[1]] for d in dots]
    w = np.concatenate(ws, axis=1 - rc)
    wv = rw.constant(w, f"{dots[0].name}.merged_w", dots[0].inputs[1].dtype)
    a = dots[0].attrs
    y = rw.add("dot_general", dots[0].inputs[0], wv, name=f"{dots[0].name}.merged", lhs_batch=(), rhs_batch=(),
               lhs_contract=a["lhs_contract"], rhs_contract=a["rhs_contract"])
    if biases[0] is not None:
        bv = rw.constant(np.concatenate([b for _, b in biases]), f"{dots[0].name}.merged_b", y.dtype)
        bb = rw.add("broadcast_in_dim", bv, shape=y.shape, broadcast_dimensions=(y.type.rank - 1,))
        y = rw.add("add", y, bb, name=f"{biases[0][0].name}.merged")
    off = 0
    for d, bias in zip(dots, biases):
        old: Value = bias[0].outputs[0] if bias is not None else d.outputs[0]
        n = old.shape[-1]
        start = (0,) * (y.type.rank - 1) + (off,)
        limit = y.shape[:-1] + (off + n,)
        s = rw.add("slice", y, hint=old.name, start=start, limit=limit, stride=(1,) * y.type.rank)
        rw.replace(old, s)
        off += n
