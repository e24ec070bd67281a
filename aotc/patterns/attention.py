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

A Q/DQ model quantizes the probabilities before P·V (both dots integer, i32
out): O = dot(q(P), V) where q is an elementwise chain from P (scale, round,
clamp, convert to i8/u8). The match then holds that chain too and records P
as `probs`; the int8 attention kernel (templates/attention_int8_mma.cu) computes
it per element with a two-pass softmax, since an online one cannot quantize
normalized probabilities. Zero points add sums to the chains (sum_d Q per
row, sum_d K per key, sum_j V per column, sum_j q(P) per row: reductions the
quantize pass writes); those whose operands are used for nothing else join
the match (`operand_sums`, `p_row_sum`) and the kernel takes them from its
staged tiles. `classify` also says, per attention that is not one kernel,
why (for `aotc compile --explain`).

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
    probs: Value | None = None    # P, the softmax result, when P·V reads it quantized (an integer attention)
    p_row_sum: Value | None = None    # sum_j q(P) (i32), when P's zero point corrects P·V's epilogue
    operand_sums: dict = field(default_factory=dict)   # zero-point sums of Q, K, V: reduce result -> "q"/"k"/"v"

    @property
    def quantized(self) -> bool:
        return self.probs is not None


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


def _elementwise_chain(top: Value, producer, shape, stop) -> tuple[set[Node], set[Node]]:
    """(elementwise nodes at `shape` from `top` upward, the nodes where `stop(node)` ended the walk)."""
    chain: set[Node] = set()
    ends: set[Node] = set()

    def up(v):
        n = producer.get(v)
        if n is not None and stop(n) and v.shape == shape:
            ends.add(n)
        elif n is not None and ops.category(n.op) == ops.ELEMENTWISE and v.shape == shape:
            chain.add(n)
            yield from n.inputs

    walk([top], up)
    return chain, ends


def _depending(chain: set[Node], root: Node, producer) -> set[Node]:
    """The nodes of `chain` that depend on `root`; the others are side computations (scales, masks)."""
    depends = {root}
    for _ in range(len(chain) + 1):
        for n in chain:
            if n not in depends and any(producer.get(v) in depends for v in n.inputs):
                depends.add(n)
    return depends - {root}


def _integer_dot(n: Node) -> bool:
    return n.attrs.get("out_dtype") == "i32" and all(v.dtype.name in ops.INTEGER_MMA for v in n.inputs)


def _row_sum(p_val: Value, pv: Node, users, nb: int) -> list[Node] | None:
    """[convert, reduce]: the i32 row sums of q(P) that P's zero-point correction of P·V reads
    (acc - z_p * colsum(V) - ...), the only use of q(P) besides P·V; [] without one; None otherwise."""
    others = [u for u in users.get(p_val, []) if u is not pv]
    if not others:
        return []
    (cv,) = others if len(others) == 1 else (None,)
    if cv is None or cv.op != "convert" or cv.outputs[0].dtype.name != "i32":
        return None
    red = users.get(cv.outputs[0], [])
    if len(red) != 1 or not _reduce_last(red[0], "sum", nb + 2):
        return None
    if not all(_prefix_broadcast(u, nb + 1) and u.outputs[0].shape == pv.outputs[0].shape
               for u in users.get(red[0].outputs[0], [])):
        return None
    return [cv, red[0]]


def _sum_over_contracted(r: Node, x: Value, dot: Node, side: str, free_at: int, target, producer, users) -> bool:
    """Whether reduce `r` sums operand `x` (side `side` of `dot`) over its contracted dim, through converts
    to i32 and transposes, and every user broadcasts the sums per (batch..., free dim) into a `target`-shaped
    tensor whose batch dims lead and whose free dim is at `free_at`: a zero-point correction term."""
    if r.attrs["kind"] != "sum" or len(r.attrs["axes"]) != 1:
        return False
    v, perm = r.inputs[0], list(range(r.inputs[0].type.rank))     # perm[k]: the dim of v that r's input dim k is
    n = producer.get(v)
    while n is not None and n.op in ("transpose", "convert") and v is not x:
        if n.op == "transpose":
            perm = [n.attrs["permutation"][p] for p in perm]
        elif n.outputs[0].dtype.name != "i32":
            return False
        v = n.inputs[0]
        n = producer.get(v)
    (a,) = r.attrs["axes"]
    if v is not x or perm[a] != dot.attrs[f"{side}_contract"][0]:
        return False
    batch = list(dot.attrs[f"{side}_batch"])
    want = [batch.index(d) if d in batch else free_at for k, d in enumerate(perm) if k != a]
    return all(u.op == "broadcast_in_dim" and u.outputs[0].shape == target
               and list(u.attrs["broadcast_dimensions"]) == want for u in users.get(r.outputs[0], []))


def _operand_sums(qk: Node, pv: Node, nb: int, producer, users, outputs) -> tuple[dict, set[Node]]:
    """(reduce result -> "q"/"k"/"v", the nodes computing them): the sums over the contracted dim that
    zero points on Q, K and V add to the score chain and the epilogue. The kernel has each operand
    tile staged and sums it there; a sum whose operand casts are used elsewhere stays an input."""
    found, nodes = {}, set()
    x_shape, o_shape = qk.outputs[0].shape, pv.outputs[0].shape
    for tag, x, dot, side, free_at, target in (("q", qk.inputs[0], qk, "lhs", nb, x_shape),
                                               ("k", qk.inputs[1], qk, "rhs", nb + 1, x_shape),
                                               ("v", pv.inputs[1], pv, "rhs", nb + 1, o_shape)):
        for first in users.get(x, []):
            path, n = [], first
            while n.op in ("convert", "transpose") and len(users.get(n.outputs[0], [])) == 1 \
                    and n.outputs[0] not in outputs:
                path.append(n)
                n = users[n.outputs[0]][0]
            if path and n.op == "reduce" and n.outputs[0] not in outputs \
                    and _sum_over_contracted(n, x, dot, side, free_at, target, producer, users):
                found[n.outputs[0]] = tag
                nodes |= set(path) | {n}
    return found, nodes


def _match_one(pv: Node, producer, users, outputs) -> AttentionMatch | str | None:
    """The match at P·V dot `pv`; None where `pv` is no attention; a reason where it is an integer
    attention (both dots i8/u8) that one kernel cannot take."""
    p_val, v_val = pv.inputs
    rank = p_val.type.rank
    nb = rank - 2
    if nb < 0 or not _batched_dot(pv, nb) or tuple(pv.attrs["lhs_contract"]) != (nb + 1,) \
            or tuple(pv.attrs["lhs_batch"]) != tuple(range(nb)):
        return None
    quant: set[Node] = set()
    div = producer.get(p_val)
    if pv.attrs.get("out_dtype") is not None and div is not None and div.op == "convert":   # an 8-bit P·V
        def softmax_div(n):
            return n.op == "div" and _prefix_broadcast(producer.get(n.inputs[1]), nb + 1)
        chain, divs = _elementwise_chain(p_val, producer, p_val.shape, softmax_div)
        if len(divs) != 1:
            return None
        (div,) = divs
        quant = _depending(chain, div, producer)
        if producer.get(p_val) not in quant:
            return None
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
    chain, dots = _elementwise_chain(x_val, producer, x_val.shape, lambda n: n.op == "dot_general")
    if len(dots) != 1:
        return None
    (qk,) = dots
    if not _batched_dot(qk, nb):
        return None
    # chain nodes that do not depend on the dot are side computations, not chain
    chain = _depending(chain, qk, producer)
    if x_val is not qk.outputs[0] and producer.get(x_val) not in chain:
        return None
    if quant and not (_integer_dot(qk) and _integer_dot(pv)):
        if any(v.dtype.is_float8 for v in list(qk.inputs) + list(pv.inputs)):
            return "fp8 attention not fused: the attention kernel takes i8/u8 Q, K, V and P; fp8 runs in the fp8 GEMMs"
        return "int8 attention not fused: Q·K and P·V are not both i8/u8 dots with i32 sums"
    row_sum = _row_sum(p_val, pv, users, nb) if quant else []
    if row_sum is None:
        return ("int8 attention not fused: the quantized probabilities are read outside P·V "
                "(beyond the row sums of a zero-point correction)")
    sums, sum_nodes = _operand_sums(qk, pv, nb, producer, users, outputs) if quant else ({}, set())
    nodes = chain | quant | {qk, mx, bm, sub, exp, ssum, bs, div, pv} | set(converts) | set(row_sum) | sum_nodes
    # the sums feed the score chain and P·V's epilogue through per-row/column broadcasts
    exempt = {pv} | set(row_sum[1:]) | {producer[v] for v in sums}
    for n in nodes - exempt:
        for v in n.outputs:
            if v in outputs or any(u not in nodes for u in users.get(v, [])):
                if not quant:
                    return None
                if v in outputs:
                    return f"int8 attention not fused: '{outputs[v]}' is a graph output"
                return f"int8 attention not fused: '{v.name}' is used outside the attention"
    q, k = qk.inputs
    batch_shape = tuple(x_val.shape[:nb])
    sq, sk = x_val.shape[nb], x_val.shape[nb + 1]
    dh = q.shape[qk.attrs["lhs_contract"][0]]
    dv = v_val.shape[free_dim(pv, "rhs")]
    if not q.dtype.is_float and not quant:
        return None
    return AttentionMatch(qk, pv, x_val, nodes, batch_shape, sq, sk, dh, dv, div.outputs[0] if quant else None,
                          row_sum[1].outputs[0] if row_sum else None, sums)


def _matches(graph: Graph):
    producer, users = graph.producers(), graph.users()
    outputs = dict(zip(graph.outputs, graph.signature_output_names()))      # value -> the name users know
    for n in graph.nodes:
        if n.op == "dot_general":
            m = _match_one(n, producer, users, outputs)
            if m is not None:
                yield n, m


def classify(graph: Graph, why_not=None) -> tuple[dict[Node, AttentionMatch], dict[Node, str]]:
    """(P·V dot -> match, for the matches `why_not(match)` accepts; P·V dot -> why its attention is not one
    kernel: the pattern's reason (integer attentions only) or `why_not`'s, a kernel family's limits)."""
    found, refused = {}, {}
    for n, m in _matches(graph):
        why = m if isinstance(m, str) else (why_not(m) if why_not is not None else "")
        if why:
            refused[n] = why
        else:
            found[n] = m
    return found, refused


def find_attention(graph: Graph, fits=None) -> dict[Node, AttentionMatch]:
    """Map each attention output dot (P·V) to its match; `fits(match)`, if given, keeps only the matches it
    accepts (a kernel family's limits)."""
    return {n: m for n, m in _matches(graph) if isinstance(m, AttentionMatch) and (fits is None or fits(m))}


def refusals(graph: Graph, why_not=None) -> dict[Node, str]:
    """P·V dot -> why its attention is not one kernel (see classify)."""
    return classify(graph, why_not)[1]
