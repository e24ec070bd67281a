"""Recognize multi-head attention: softmax(f(Q·Kᵀ)) · V, as exporters write it.

After import, attention is two dot_generals around a decomposed softmax:

    S  = dot_general(Q, K)                  (batch..., i, j)
    X  = f(S, mask, scale, ...)             elementwise chain (scale, additive mask)
    E  = exp(X - broadcast(reduce_max(X)))  over j
    P  = E / broadcast(reduce_sum(E))       over j
    O  = dot_general(P, V)                  (batch..., i, d)

`find_attention` returns one `AttentionMatch` per O whose intermediate values
are used only inside the pattern, so the whole thing can be one
flash-attention kernel (online softmax, no S x S matrix in memory). Q, K and
V may arrive through transposes/reshapes (the region's prologue); the mask
and scale are side inputs of f.

The finder is structure only: what one kernel can take (head sizes) is the
attention kernel family's rule (aotc.fusion.rules.attention), and a pass
that asks (precision) gets the same answer whatever kernel runs it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value
from aotc.ir.walk import walk

@dataclass
class AttentionMatch:
    qk: Node                  # S = dot_general(Q, K)
    pv: Node                  # O = dot_general(P, V)
    scores: Value             # X, the softmax input (f applied to S)
    nodes: set[Node] = field(default_factory=set)
    batch_shape: tuple[int, ...] = ()
    sq: int = 0
    sk: int = 0
    dh: int = 0
    dv: int = 0


def _batched_dot(n: Node, nb: int) -> bool:
    """A dot with nb batch dims (anywhere) and exactly one free and one contracted dim per operand."""
    a = n.attrs
    return (n.op == "dot_general" and len(a["lhs_batch"]) == nb and len(a["rhs_batch"]) == nb
            and len(a["lhs_contract"]) == 1 and len(a["rhs_contract"]) == 1
            and n.inputs[0].type.rank == nb + 2 and n.inputs[1].type.rank == nb + 2)


def free_dim(n: Node, side: str) -> int:
    """The one free (neither batch nor contracted) dim of operand `side` ('lhs' or 'rhs') of a batched dot."""
    a = n.attrs
    used = set(a[f"{side}_batch"]) | set(a[f"{side}_contract"])
    rank = n.inputs[0 if side == "lhs" else 1].type.rank
    return next(d for d in range(rank) if d not in used)


def _prefix_broadcast(n: Node | None, src_rank: int) -> bool:
    return (n is not None and n.op == "broadcast_in_dim"
            and tuple(n.attrs["broadcast_dimensions"]) == tuple(range(src_rank)))


def _through_converts(n: Node | None, producer, seen: list) -> Node | None:
    """Skip convert nodes upward, recording them in `seen`."""
    while n is not None and n.op == "convert":
        seen.append(n)
        n = producer.get(n.inputs[0])
    return n


def _reduce_last(n: Node | None, kind: str, rank: int) -> bool:
    return n is not None and n.op == "reduce" and n.attrs["kind"] == kind and tuple(n.attrs["axes"]) == (rank - 1,)


def _match_one(pv: Node, producer, users, outputs) -> AttentionMatch | None:
    p_val, v_val = pv.inputs
    rank = p_val.type.rank
    nb = rank - 2
    if nb < 0 or not _batched_dot(pv, nb) or tuple(pv.attrs["lhs_contract"]) != (nb + 1,) \
            or tuple(pv.attrs["lhs_batch"]) != tuple(range(nb)):
        return None
    div = producer.get(p_val)
    if div is None or div.op != "div":
        return None
    e_val, bs_val = div.inputs
    bs = producer.get(bs_val)
    if not _prefix_broadcast(bs, nb + 1):
        return None
    # reduced precision keeps the sum in f32: converts may wrap the reduction
    converts: list[Node] = []
    ssum = _through_converts(producer.get(bs.inputs[0]), producer, converts)
    exp = producer.get(e_val)
    if not _reduce_last(ssum, "sum", rank) or exp is None or exp.op != "exp":
        return None
    summed = producer.get(ssum.inputs[0])
    if ssum.inputs[0] is not e_val and not (summed is not None and summed.op == "convert"
                                            and summed.inputs[0] is e_val):
        return None
    if ssum.inputs[0] is not e_val:
        converts.append(summed)
    sub = producer.get(exp.inputs[0])
    if sub is None or sub.op != "sub":
        return None
    x_val, bm_val = sub.inputs
    bm = producer.get(bm_val)
    if not _prefix_broadcast(bm, nb + 1):
        return None
    mx = producer.get(bm.inputs[0])
    if not _reduce_last(mx, "max", rank) or mx.inputs[0] is not x_val:
        return None
    # walk the elementwise chain from X down to the Q·K dot
    chain: set[Node] = set()
    dots: set[Node] = set()

    def up(v):
        n = producer.get(v)
        if n is not None and n.op == "dot_general" and v.shape == x_val.shape:
            dots.add(n)
        elif n is not None and ops.category(n.op) == ops.ELEMENTWISE and v.shape == x_val.shape:
            chain.add(n)
            yield from n.inputs

    walk([x_val], up)
    if len(dots) != 1:
        return None
    (qk,) = dots
    if not _batched_dot(qk, nb):
        return None
    # chain nodes that do not depend on the dot are side computations, not chain
    depends = {qk}
    ordered = []
    for _ in range(len(chain) + 1):
        for n in chain:
            if n not in depends and any(producer.get(v) in depends for v in n.inputs):
                depends.add(n)
                ordered.append(n)
    chain = set(ordered)
    if x_val is not qk.outputs[0] and producer.get(x_val) not in chain:
        return None
    nodes = chain | {qk, mx, bm, sub, exp, ssum, bs, div, pv} | set(converts)
    for n in nodes - {pv}:
        for v in n.outputs:
            if v in outputs or any(u not in nodes for u in users.get(v, [])):
                return None
    q, k = qk.inputs
    batch_shape = tuple(x_val.shape[:nb])
    sq, sk = x_val.shape[nb], x_val.shape[nb + 1]
    dh = q.shape[qk.attrs["lhs_contract"][0]]
    dv = v_val.shape[free_dim(pv, "rhs")]
    if not q.dtype.is_float:
        return None
    return AttentionMatch(qk, pv, x_val, nodes, batch_shape, sq, sk, dh, dv)


def find_attention(graph: Graph, fits=None) -> dict[Node, AttentionMatch]:
    """Map each attention output dot (P·V) to its match; `fits(match)`, if given, keeps only the matches it
    accepts (a kernel family's limits)."""
    producer, users, outputs = graph.producers(), graph.users(), set(graph.outputs)
    found = {}
    for n in graph.nodes:
        if n.op == "dot_general":
            m = _match_one(n, producer, users, outputs)
            if m is not None and (fits is None or fits(m)):
                found[n] = m
    return found
