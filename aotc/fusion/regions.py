"""Partition a Graph into Regions, one generated kernel each.

Regions grow backwards from a root (a value that must be materialized: a
graph output, or a value some consumer region did not absorb):

- anchors (`reduce`, `dot_general`, `convolution`, `reduce_window`) each get
  their own region; a region rooted at an elementwise op absorbs an anchor
  below it as an *epilogue* when every node between them is elementwise with
  the anchor's result shape and the anchor has no other user;
- a LayerNorm/RMSNorm-style row computation (elementwise + reductions over
  the contracted axes) whose result only feeds GEMMs' lhs is recomputed in
  each GEMM's prologue (*norm prologue*): the GEMM derives the row statistics
  of its 64-row tile in a pre-pass, so the normalized tensor never goes
  through memory and the norm needs no kernel of its own (code generation folds
  it into 16-bit constant weights, kernels/norm_fold.py); with POST_LN_FOLD a post-LN
  encoder's norm, whose GEMMs are such, and whose result also feeds a later
  residual add, is recomputed by that add's GEMM epilogue too (epilogue_norm_plan);
- a GEMM whose result is read only as k equal column blocks (SwiGLU's gate and
  up halves, an LSTM's four gates) takes the unit over the blocks as a *gated
  epilogue*, values the unit also hands to later ops (the LSTM's c_t) written as
  extra roots (see fusion/gated.py);
- a pointwise (1x1) conv fed by a depthwise conv takes that conv, its
  epilogue and its own fused expansion as prologue (*depthwise prologue*,
  MobileNet's inverted-residual block in one kernel, see prologues.py);
- elementwise, injective and source producers are absorbed as *prologue*
  (loop body, operand loads) when all their users are in the region;
  injective and source ops (pure index math) are absorbed even when they have
  other users, i.e. duplicated, since recomputing an index is cheaper than a
  round trip through memory.

Every bail-out records a one-line reason. `check_partition` verifies that
each node is materialized by exactly one region (duplicated index-math nodes
and norm prologues aside) and that the region order is a valid schedule.
"""
from __future__ import annotations

from aotc.errors import VerifyError
from aotc.fusion.chains import merge_tiny_chains
from aotc.fusion.gated import gated_anchor, merge_sliced_loops
from aotc.fusion.prologues import depthwise_prologue, expand_into_depthwise, lhs_prologue_pays, staged_conv
from aotc.fusion.region import (AttentionPayload, ConvPayload, GatedPayload, Region, dependents,
                                region_inputs)
from aotc.fusion.rules import ANCHOR_KINDS, loads_operands_repeatedly, prologue_accepts, rule_for
from aotc.fusion.rules.attention import attention_refusal, operand_epilogues
from aotc.fusion.rules.conv import materialized_channel_pad, staged_depthwise
from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph, Node, Value
from aotc.ir.walk import users_of, walk
from aotc.patterns.attention import classify

_FUSIBLE = (ops.ELEMENTWISE, ops.INJECTIVE, ops.SOURCE)
_DUPLICABLE = (ops.INJECTIVE, ops.SOURCE)

# The post-LN fold (epilogue_norm_plan). It pays only because the GEMM taking the norm as its prologue
# runs on raw s (kernels/norm_fold.py: W' = diag(gamma) W, the correction in the epilogue), so it is
# taken only where that GEMM's weights are constants. With a normalizing prologue (weights computed at
# run time) the profile model predicted BERT-base fp16 156.6 -> 359.6 us at batch 1: dot_mma normalized
# each A element in its main loop instead of staging A by cp.async. With the weights folded, BERT-base
# fp16 (python -m bench.profile_report --full): batch 1 146.6 -> 133.4 us, batch 32 1208.7 -> 1114.9 us,
# 85 -> 62 launches. f32 GEMMs keep the exact prologue (norm_fold.FOLDED_DTYPES), so f32 encoders keep
# their norms in row kernels: the SIMT GEMM normalizing A cost more than the row kernel saved.
POST_LN_FOLD = True


def explain(region: Region) -> dict:
    """What one region computes and why it stopped growing (`aotc compile --explain`).

    `ops` names the compute nodes as ONNX-name/aotc-op, each once (index
    math is left out: it is recomputed wherever it is needed); `prologue` those of them a GEMM/conv computes
    while it loads its operands (prologue_of); `why_not_larger` are the region's bail-out reasons, each once.
    """
    def label(n):
        return f"{n.name}/{n.op}" if n.name else n.op

    compute = [n for n in region.nodes if ops.category(n.op) not in _DUPLICABLE]
    return {"kind": region.kind, "anchor": region.anchor.name if region.anchor is not None else None,
            "ops": list(dict.fromkeys(map(label, compute))),
            "prologue": list(dict.fromkeys(map(label, prologue_of(region)))), "root": str(region.root.type),
            "why_not_larger": list(dict.fromkeys(region.reasons))}


def prologue_of(region: Region) -> list[Node]:
    """The compute nodes a GEMM/conv region evaluates while loading its operands (a norm prologue, a
    staged depthwise conv, an elementwise lhs prologue): members that neither are the anchor nor
    consume its result. Empty for other kinds."""
    if region.kind not in ("dot", "conv") or region.anchor is None:
        return []
    produced = {v: n for n in region.nodes for v in n.outputs}
    feeds = set(walk([region.anchor], lambda n: (produced[v] for v in n.inputs if v in produced)))
    # an epilogue norm (epilogue_norm_plan) is neither: the epilogue reads it, the anchor does not
    return [n for n in region.nodes if n in feeds and n is not region.anchor and n not in region.epilogue
            and ops.category(n.op) not in _DUPLICABLE]


def _is_anchor(n: Node) -> bool:
    return ops.category(n.op) in ANCHOR_KINDS


def partition(graph: Graph) -> list[Region]:
    """Regions in execution order (roots in graph order)."""
    users = graph.users()
    producer = graph.producers()
    position = {n: i for i, n in enumerate(graph.nodes)}
    outputs = set(graph.outputs)
    # absorbed_in[node] = ids of regions holding a copy of the node
    absorbed_in: dict[Node, set[int]] = {}
    regions: list[Region] = []
    attention, refused = classify(graph, attention_refusal)     # --explain says why one is not one kernel
    written: set[Value] = set()          # extra roots: values a region writes beside its root
    folded = epilogue_norm_plan(graph, users, producer, outputs, attention)

    def fully_absorbed(n: Node) -> bool:
        """Every region computing a user of n also computes n (so n needs no buffer)."""
        if any(v in outputs for v in n.outputs):
            return False
        holders = absorbed_in.get(n, set())
        for v in n.outputs:
            for u in users.get(v, []):
                regs = absorbed_in.get(u, set())
                if not regs or not regs <= holders:
                    return False
        return True

    for n in reversed(graph.nodes):
        if fully_absorbed(n) or (n.outputs and all(v in written for v in n.outputs)):
            continue
        rid = len(regions)
        region = _grow(n, rid, users, producer, outputs, absorbed_in, attention, position, folded)
        if region.anchor in refused:
            region.reasons.append(refused[region.anchor])
        written.update(region.extra_roots)
        regions.append(region)

    regions.reverse()
    for r in regions:
        r.nodes.sort(key=position.__getitem__)
        r.epilogue.sort(key=position.__getitem__)
        r.inputs = region_inputs(r)
    regions = merge_sibling_loops(regions, users, outputs, position)
    regions = merge_sliced_loops(regions, users, producer, outputs, position)
    return merge_tiny_chains(regions, users, producer, outputs, position)


def merge_sibling_loops(regions: list[Region], users, outputs, position) -> list[Region]:
    """Fuse a loop region into the one before it when it reads that one's result element by element.

    An LSTM step computes c_t (a loop) and then h_t = o * tanh(c_t) (a loop reading
    c_t at the same index); both are needed later, so neither absorbs the other.
    One kernel writing both saves a launch and a read of c_t. Only when the later
    region reads the earlier root through elementwise ops at its shape, both roots
    have that shape, and the later root is no graph output.
    """
    out: list[Region] = []
    for r in regions:
        prev = out[-1] if out else None
        if prev is not None and _loop_reads_elementwise(prev, r, users, outputs):
            merged = Region("loop", prev.root, sorted(set(prev.nodes) | set(r.nodes), key=position.__getitem__),
                            reasons=prev.reasons + r.reasons + [f"{r.root.name} computed in the same kernel"])
            merged.extra_roots = prev.extra_roots + [r.root]
            merged.inputs = [v for v in region_inputs(merged) if v is not prev.root]
            out[-1] = merged
        else:
            out.append(r)
    return out


def _loop_reads_elementwise(a: Region, b: Region, users, outputs) -> bool:
    if a.kind != "loop" or b.kind != "loop" or not a.nodes or not b.nodes or a.extra_roots:
        return False
    shape = a.root.shape
    if b.root.shape != shape or b.root in outputs or a.root not in b.inputs:
        return False
    members = set(b.nodes)
    reached = walk([u for u in users.get(a.root, []) if u in members],
                   lambda n: (u for u in users_of(users, n.outputs) if u in members))
    return all(ops.category(n.op) == ops.ELEMENTWISE and n.outputs[0].shape == shape for n in reached)


def _grow(root: Node, rid: int, users, producer, outputs, absorbed_in, attention, position=None,
          folded=None) -> Region:
    """Grow the region rooted at `root`; try a row region first, then without reductions."""
    region = _grow_once(root, users, producer, outputs, True, attention, position, folded=folded)
    if region.kind == "row" and not row_structure_ok(region, producer):
        region = _grow_once(root, users, producer, outputs, False, attention, position, folded=folded)
        region.reasons.append("reductions not fused into a row kernel: not a row-wise pattern")
    for m in region.nodes:
        absorbed_in.setdefault(m, set()).add(rid)
    return region


def _grow_once(root: Node, users, producer, outputs, allow_rows: bool, attention=None, position=None,
               shared=None, folded=None) -> Region:
    members: set[Node] = {root}
    reasons: list[str] = []
    anchor = root if _is_anchor(root) else None
    epilogue: list[Node] = []
    gated, gates, extra = 0, 0, []
    if anchor is None:
        anchor, epilogue = _find_epilogue_anchor(root, users, producer, outputs, reasons)
        if anchor is None:
            anchor, epilogue, gated, gates, extra = gated_anchor(root, users, producer, outputs, position)
        if anchor is not None:
            members.update(epilogue)
            members.add(anchor)
    # absorb prologue producers. A gemm/conv operand is loaded many times per
    # element, so only index math (injective ops) and casts (fp16 engines' input
    # convert) join its prologue; compute stays with the producer, where it can
    # be that region's epilogue.
    heavy = loads_operands_repeatedly(anchor) and not staged_depthwise(anchor)
    match = (attention or {}).get(anchor)
    if match is not None:
        members |= match.nodes
    row_reduces: list[Node] = []
    # an attention kernel stages each Q, K, V tile in shared memory once per query tile, so an
    # elementwise prologue (ONNX Attention's sqrt(scale) on Q and K, RoPE) costs little there
    restricted = {m: heavy and match is None and m is anchor for m in members}
    if match is not None and match.quantized:
        # the int8 kernel loads 8-bit Q, K, V: the projections' requantize stays their GEMMs' epilogue
        operands = {*match.qk.inputs, match.pv.inputs[1]}
        restricted.update({n: True for n in match.nodes if n in (match.qk, match.pv) or operands & set(n.inputs)})
    # a tensor-core attention copies plain views of its operands: a projection's bias add stays its GEMM's
    left_out = operand_epilogues(match, producer, users, outputs) if match is not None else set()
    once = heavy and match is None and lhs_prologue_pays(anchor, users, producer, outputs)
    pre_reasons = list(reasons)
    depthwise = None
    if heavy and match is None:
        norm, why = norm_prologue(anchor, users, producer, outputs, folded)
        if why:
            pre_reasons.append(why)
        if norm:
            members |= norm
            restricted.update({m: True for m in norm})
        for h in dict.fromkeys(v for e in epilogue for v in e.inputs if v in (folded or {})):
            naxes = len(next(m for m in folded[h] if m.op == "reduce").attrs["axes"])
            if _epilogue_norm_gemm(anchor, h, naxes, attention or {}):     # LN(s) an epilogue adds, from s's rows
                members |= folded[h]
                restricted.update({m: True for m in folded[h]})
                pre_reasons.append(f"norm '{_norm_name(folded[h])}' recomputed in the epilogue from its input's rows "
                                   f"(its result is not materialized)")
        staged, why = depthwise_prologue(anchor, users, producer, outputs)
        if why:
            pre_reasons.append(why)
        if staged:            # computed once per staged element: elementwise prologues may join it
            members |= staged
            depthwise = next(m for m in staged if staged_depthwise(m))
            restricted.update({m: False for m in staged})

    def absorb(node):
        """The producers of `node`'s inputs that join the region (each refusal noted in `reasons`)."""
        nonlocal changed
        for v in node.inputs:
            p = producer.get(v)
            if p is None or p in members:
                continue
            if p in left_out:
                reasons.append(f"{p.op} '{p.name}' left to its GEMM's epilogue: Q, K, V copied as views")
                continue
            limited = restricted[node] and not (node is anchor and v is anchor.inputs[0] and once)
            why = _absorb_refusal(p, v, anchor if limited else None, anchor, allow_rows, root, users, members,
                                  outputs, shared, folded)
            if why:
                reasons.append(why)
                continue
            # below a fused expansion conv only index math joins (row reduces stay unrestricted)
            restricted[p] = limited or ops.category(p.op) == ops.CONV
            if p.op == "reduce":
                row_reduces.append(p)
            changed = True
            yield p

    changed = True
    while changed:              # a producer shared by two members joins once both are in
        changed, reasons = False, list(pre_reasons)
        walk(list(members), absorb, members)
    kind = ANCHOR_KINDS[ops.category(anchor.op)] if anchor is not None else ("row" if row_reduces else "loop")
    payload = GatedPayload(gated, gates) if gated else ConvPayload(depthwise) if depthwise is not None else None
    if match is not None:
        kind, payload = "attention", AttentionPayload(match)
    return Region(kind, root.outputs[0], list(members), anchor, epilogue, reasons=reasons, extra_roots=extra,
                  payload=payload)


def _absorb_refusal(p: Node, v: Value, restricted, anchor, allow_rows: bool, root: Node,
                    users, members, outputs, shared=None, folded=None) -> str:
    """Why producer `p` of `v` cannot join the region ("" if it can).

    `restricted`: the anchor whose operand prologue `p` would join (its family's rule
    says which ops it takes), or None where any fusible op may join. `shared(v)`, if
    given, admits a value with users outside the region (each of them recomputes it)."""
    cat = ops.category(p.op)
    if cat == ops.CONV and expand_into_depthwise(p, v, staged_conv(anchor, members), anchor, users, members,
                                                  outputs):
        return ""
    if cat == ops.REDUCTION and allow_rows and anchor is None and v not in outputs:
        if _row_reduce_ok(p, root.outputs[0].shape, users, members):
            return ""
        return f"reduce '{p.name}' not fused into a row kernel: shape, axes or users differ"
    if cat not in _FUSIBLE:
        return f"{p.op} '{p.name}' not fused: {cat} ops anchor their own region"
    h = next((w for w in p.inputs if w in (folded or {})), None)
    if h is not None:        # only a GEMM epilogue recomputes that norm: p stays one (epilogue_norm_plan)
        return f"{p.op} '{p.name}' not fused: it reads norm '{_norm_name(folded[h])}', which GEMM kernels recompute"
    if anchor is not None and v is anchor.inputs[0] and materialized_channel_pad(anchor, p):
        return f"pad '{p.name}' not fused: conv '{anchor.name}' stages its channel-padded input by cp.async"
    if restricted is not None and not prologue_accepts(rule_for(restricted), p.op):
        return (f"{p.op} '{p.name}' not fused: a {rule_for(restricted).kind} operand prologue takes only index math "
                f"and casts (computed by another kernel)")
    if (restricted is not None or root.op in ("reduce_window", "reduce")) and p.op == "convert" and \
            v.dtype.itemsize == 1 < p.inputs[0].dtype.itemsize:
        # a requantize to 8 bits is cheapest where its input is computed (an int8 conv's epilogue): the
        # producer stores the 8-bit value, and a GEMM operand or a pooling window reads 1 byte, not 4
        return f"convert '{p.name}' not fused: a cast to 8 bits stays with its producer, which stores the 8-bit value"
    if v in outputs:
        return f"{p.op} '{p.name}' not fused: graph output"
    exclusive = all(u in members for u in users.get(v, [])) or (shared is not None and shared(v))
    if not exclusive and cat not in _DUPLICABLE:
        return f"{p.op} '{p.name}' not fused: used outside the region"
    return ""


def norm_prologue(anchor: Node, users, producer, outputs, folded=None) -> tuple[set[Node], str]:
    """(the row-norm nodes a GEMM recomputes in its lhs prologue, why not: "" or a reason).

    The lhs must be the root of a row pattern (see row_structure_ok) reducing
    exactly the contracted axes, which trail the free ones (no batch dims), so a
    reduction's row is the GEMM's m index. Every user of the lhs must be such a
    GEMM: each then computes the norm itself (the statistics are cheap next to
    the GEMM) and the normalized tensor is never materialized. A post-LN norm that
    GEMM epilogues also recompute (`folded`, epilogue_norm_plan) joins as it is.
    """
    if anchor.op != "dot_general":
        return set(), ""
    lhs = anchor.inputs[0]
    if lhs in (folded or {}):
        return set(folded[lhs]), ""
    p = producer.get(lhs)
    if p is None or lhs in outputs or ops.category(p.op) != ops.ELEMENTWISE or not lhs.dtype.is_float \
            or lhs.dtype == dtypes.f64:           # the row statistics pre-pass reduces in float
        return set(), ""
    sub = _grow_once(p, users, producer, outputs, True, shared=lambda v: _feeds_norm_gemms(v, users, outputs))
    if sub.kind != "row" or not row_structure_ok(sub, producer):
        return set(), ""
    reduces = [n for n in sub.nodes if n.op == "reduce"]
    why = f"norm '{reduces[0].name}' not fused into the gemm prologue: "
    for u in users.get(lhs, []):
        if u.op != "dot_general" or u.inputs[0] is not lhs or u.inputs[1] is lhs or not _norm_layout_ok(u):
            return set(), why + f"its result also feeds {u.op} '{u.name}'"
    if tuple(reduces[0].attrs["axes"]) != tuple(anchor.attrs["lhs_contract"]):
        return set(), why + "it reduces other axes than the gemm contracts"
    # cost: each GEMM block re-reads its rows once per reduction phase (from L2). Keep that within
    # what its main loop reads anyway (A and B tiles): LayerNorm (2 phases over x) and RMSNorm
    # qualify; a norm over a sum of tensors (add + residual + norm) stays a row kernel.
    reads = sum(len(_full_reads(r.inputs[0], sub.nodes, producer, lhs.shape)) for r in reduces)
    if reads > 2:
        return set(), why + f"its {len(reduces)} row passes read {reads} row tensors, more than the tile loads"
    return set(sub.nodes), ""


def epilogue_norm_plan(graph: Graph, users, producer, outputs, attention=None) -> dict[Value, frozenset]:
    """Post-LN encoders' norms that GEMMs recompute instead of a row kernel materializing them.

    In BERT's layer h = LN(s), s = x + GEMM + b, and h feeds two consumers: the next
    GEMM's lhs and the residual add that follows that block (s' = h + GEMM' + b'). A
    norm qualifies when its input s is in memory anyway (it is the residual sum some
    GEMM's epilogue writes) and every user of h is either a GEMM's lhs laid out for a
    norm prologue, 16-bit with constant weights, or an elementwise op whose region is a
    GEMM epilogue over the norm's rows (output shape h's, rows the GEMM's m). The GEMMs
    then run on raw s with the norm folded into their weights (kernels/norm_fold.py) and
    the epilogues compute LN(s)[r, c] from s[r, c] and the row's stats,
    taken by the same pre-pass over s's rows (kernels/codegen_norm_prologue.py), so
    the row kernel goes and h never goes through memory. h -> the norm's nodes, which
    stop at s: the residual sum stays its GEMM's epilogue and is materialized there.
    """
    plan: dict[Value, frozenset] = {}
    if not POST_LN_FOLD:
        return plan
    attention = attention or {}
    position = {n: i for i, n in enumerate(graph.nodes)}
    for n in graph.nodes:
        if ops.category(n.op) != ops.ELEMENTWISE or len(n.outputs) != 1:
            continue
        h = n.outputs[0]
        gemms = [u for u in users.get(h, []) if u.op == "dot_general" and u.inputs[0] is h]
        if not gemms or not all(_constant_weights(u, graph, producer) for u in gemms):
            continue
        nodes = _epilogue_norm(h, users, producer, outputs, attention, position)
        if nodes:
            plan[h] = frozenset(nodes)
    for h in list(plan):          # one norm per region: an epilogue GEMM's lhs is no norm of its own
        for u in users.get(h, []):
            if u.op != "dot_general":
                anchor, _ = _find_epilogue_anchor(u, users, producer, outputs, [])
                if anchor.inputs[0] in plan or norm_prologue(anchor, users, producer, outputs)[0]:
                    plan.pop(h)
                    break
    return plan


def _constant_weights(gemm: Node, graph: Graph, producer) -> bool:
    """The GEMM is 16-bit and its rhs a constant (maybe transposed): code generation folds a norm prologue
    into it (kernels/norm_fold.py, which folds f16/bf16 only), so the prologue costs no more than the
    GEMM on a materialized norm."""
    if gemm.inputs[0].dtype not in (dtypes.f16, dtypes.bf16):
        return False
    rhs = gemm.inputs[1]
    p = producer.get(rhs)
    if p is not None and p.op == "transpose":
        rhs = p.inputs[0]
    return rhs in graph.constants


def _epilogue_norm(h: Value, users, producer, outputs, attention, position) -> set[Node]:
    """The nodes computing row norm h from its materialized input, if h qualifies (epilogue_norm_plan)."""
    p = producer.get(h)
    if h in outputs or not h.dtype.is_float or h.dtype == dtypes.f64:
        return set()
    sub = _grow_once(p, users, producer, outputs, True)
    reduces = sorted((m for m in sub.nodes if m.op == "reduce"), key=position.__getitem__)
    if sub.kind != "row" or not reduces:
        return set()
    s = reduces[0].inputs[0]                          # the first reduction reads the norm's input (the mean's)
    while producer.get(s) is not None and producer[s].op == "convert" and s not in outputs:
        s = producer[s].inputs[0]                     # the norm's input: LayerNorm in f32 of an f16 sum
    sub = _grow_once(p, users, producer, outputs | {s}, True)
    q = producer.get(s)
    if q is not None and s not in outputs and all(u in sub.nodes for u in users.get(s, [])) \
            and _find_epilogue_anchor(q, users, producer, outputs, [])[0] is None:
        return set()              # s is no GEMM's result (BERT's embedding sum): its norm stays a row kernel
    reduces = [m for m in sub.nodes if m.op == "reduce"]
    if sub.kind != "row" or not reduces or not row_structure_ok(sub, producer) or s.shape != h.shape:
        return set()
    if any(_full_reads(r.inputs[0], sub.nodes, producer, h.shape) != {s} for r in reduces) \
            or _full_reads(h, sub.nodes, producer, h.shape) != {s}:
        return set()              # the norm reads s alone, once per phase
    axes = tuple(reduces[0].attrs["axes"])
    rank = h.type.rank
    if axes != tuple(range(rank - len(axes), rank)) or len(axes) == rank:
        return set()
    gemm = epi = 0
    for u in users.get(h, []):
        if u.op == "dot_general" and u.inputs[0] is h and u.inputs[1] is not h and _norm_layout_ok(u) \
                and tuple(u.attrs["lhs_contract"]) == axes and u not in attention:
            gemm += 1
            continue
        if ops.category(u.op) != ops.ELEMENTWISE or u.outputs[0].shape != h.shape:
            return set()
        anchor, _ = _find_epilogue_anchor(u, users, producer, outputs, [])
        if anchor is None or not _epilogue_norm_gemm(anchor, h, len(axes), attention):
            return set()
        epi += 1
    return set(sub.nodes) if gemm and epi else set()


def _epilogue_norm_gemm(anchor: Node, h: Value, naxes: int, attention) -> bool:
    """A GEMM whose epilogue can add norm h over its `naxes` trailing axes: a float dot (SIMT, mma or tf32
    template) with no batch dims whose output is h's shape and whose n dims are the norm's axes, so a row
    of h is the GEMM's m index."""
    if anchor is None or anchor.op != "dot_general" or anchor in attention:
        return False
    a = anchor.attrs
    lhs, rhs = anchor.inputs
    _, rf = ops.dot_free_dims(a, lhs.type.rank, rhs.type.rank)
    return (not a["lhs_batch"] and lhs.dtype == rhs.dtype and lhs.dtype in (dtypes.f16, dtypes.bf16, dtypes.f32)
            and anchor.outputs[0].shape == h.shape and len(rf) == naxes)


def _norm_name(nodes) -> str:
    """A norm's name for --explain: its first reduction's."""
    return next((n.name for n in sorted(nodes, key=lambda n: n.name) if n.op == "reduce"), "?")


def _feeds_norm_gemms(v: Value, users, outputs) -> bool:
    """Every use of `v` ends, through elementwise ops of its shape, as the lhs of a GEMM laid out for a
    norm prologue: each of those GEMMs may recompute `v` in its own prologue.

    Two LayerNorms of one tensor (GPT-NeoX's parallel attention and MLP) share their
    statistics and normalized value after CSE; each projection recomputes the shared
    part, so neither norm needs a kernel of its own."""
    ok = True

    def down(w):
        nonlocal ok
        for u in users.get(w, []):
            if u.op == "dot_general" and u.inputs[0] is w and u.inputs[1] is not w and _norm_layout_ok(u):
                continue
            if ops.category(u.op) == ops.ELEMENTWISE and len(u.outputs) == 1 and u.outputs[0].shape == w.shape \
                    and u.outputs[0] not in outputs:
                yield u.outputs[0]
            else:
                ok = False

    walk([v], down)
    return ok and v not in outputs and v.dtype.is_float


def _full_reads(v: Value, nodes, producer, shape) -> set[Value]:
    """The materialized tensors of `shape` that computing `v` inside `nodes` reads."""
    inside = set(nodes)
    reached = walk([v], lambda u: producer[u].inputs if producer.get(u) in inside else ())
    return {u for u in reached if producer.get(u) not in inside and u.shape == shape}


def _norm_layout_ok(dot: Node) -> bool:
    """lhs laid out (free..., contracted...): row-major rows are the GEMM's m index."""
    a = dot.attrs
    r = dot.inputs[0].type.rank
    lc = tuple(a["lhs_contract"])
    return not a["lhs_batch"] and lc == tuple(range(r - len(lc), r))


def _row_reduce_ok(p: Node, shape, users, members) -> bool:
    """A reduction a loop region may fold in as a per-row scalar (softmax, norms)."""
    x = p.inputs[0]
    axes = tuple(p.attrs["axes"])
    r = len(shape)
    return (x.shape == shape and r >= 1 and axes == tuple(range(r - len(axes), r)) and len(axes) < r
            and x.dtype.is_float and x.dtype != dtypes.f64 and p.attrs["kind"] in ("sum", "max", "min")
            and all(u in members for u in users.get(p.outputs[0], [])))


def row_structure_ok(region: Region, producer) -> bool:
    """Every value derived from a reduction is indexed by the row alone.

    Row regions override each reduction's result with one scalar per row, so
    the values that depend on a reduction must be row-shaped (R) elementwise
    ops, reshapes that only add/remove trailing unit dims, and broadcasts from
    R back to the full shape S along the leading dims.
    """
    reduces = [n for n in region.nodes if n.op == "reduce"]
    shape = reduces[0].inputs[0].shape
    axes = reduces[0].attrs["axes"]
    if any(n.inputs[0].shape != shape or n.attrs["axes"] != axes for n in reduces):
        return False
    rows = reduces[0].outputs[0].shape
    if region.root.shape != shape:
        return False

    def row_like(s):
        trimmed = list(s)
        while len(trimmed) > len(rows) and trimmed[-1] == 1:
            trimmed.pop()
        return tuple(trimmed) == rows

    member = set(region.nodes)
    dependent = set(reduces)
    for n in region.nodes:                       # graph order
        if n in dependent or not any(producer.get(v) in dependent for v in n.inputs):
            continue
        dependent.add(n)
        out = n.outputs[0].shape
        if n.op == "reduce":
            continue
        cat = ops.category(n.op)
        if cat == ops.ELEMENTWISE and (row_like(out) or out == shape):
            if out == shape and any(producer.get(v) in dependent and v.shape != shape for v in n.inputs):
                return False
            continue
        if n.op == "reshape" and row_like(out) and row_like(n.inputs[0].shape):
            continue
        if n.op == "broadcast_in_dim" and (out == shape or row_like(out)) and row_like(n.inputs[0].shape) \
                and tuple(n.attrs["broadcast_dimensions"]) == tuple(range(n.inputs[0].type.rank)):
            continue        # back to the full shape along the leading dims, or a unit dim added (jax's keepdims)
        return False
    del member
    return True


def _find_epilogue_anchor(root: Node, users, producer, outputs, reasons):
    """Walk down a chain of elementwise ops (and reshapes and transposes) to an anchor, if any.

    The chain keeps the anchor's element count. The kernel maps its accumulator's
    index through the chain's reshapes (same linear offset) and transposes
    (permuted) to the root's index and evaluates the epilogue there
    (builder.KernelBuilder.root_index): an NCHW model's output transpose after its
    last conv costs no kernel of its own.
    """
    if ops.category(root.op) != ops.ELEMENTWISE and root.op not in ("reshape", "transpose"):
        return None, []
    shape = root.outputs[0].shape
    size = root.outputs[0].type.size
    seen = {root}
    anchor = None

    def down(node):
        """The chain's producers of `node`'s inputs; an anchor met on the way is noted, not walked."""
        nonlocal anchor
        for v in node.inputs:
            p = producer.get(v)
            if p is None or p in seen:
                continue
            if _is_anchor(p):
                if anchor is not None and p is not anchor:
                    reasons.append(f"{p.op} '{p.name}' not fused as epilogue: second anchor")
                    continue
                same = v.shape == shape or (v.type.size == size and ops.category(p.op) in (ops.DOT, ops.REDUCTION,
                                                                                           ops.CONV))
                if not same or len(p.outputs) != 1:
                    reasons.append(f"{p.op} '{p.name}' not fused as epilogue: result shape differs")
                    continue
                if v in outputs:
                    reasons.append(f"{p.op} '{p.name}' not fused as epilogue: graph output")
                    continue
                anchor = p
                continue
            if (ops.category(p.op) == ops.ELEMENTWISE or p.op in ("reshape", "transpose")) and v.type.size == size \
                    and v not in outputs \
                    and all(u in seen or u is root for u in users.get(v, [])):
                yield p

    chain = walk([root], down, seen)
    if anchor is None:
        return None, []
    # every user of the anchor must be in the chain, and the chain nodes that do
    # not depend on the anchor are ordinary prologue (kept out of `epilogue`)
    if not all(u in seen for u in users.get(anchor.outputs[0], [])):
        reasons.append(f"{anchor.op} '{anchor.name}' not fused as epilogue: used outside the region")
        return None, []
    epilogue = dependents(chain, {anchor}, producer)
    # a chain node feeding the epilogue but not depending on the anchor must be
    # exclusive to the region; those are simply prologue members
    return anchor, epilogue


def check_partition(graph: Graph, regions: list[Region]) -> None:
    """Raise VerifyError unless `regions` is a valid schedule covering the graph.

    Every region input must be a graph input, a constant, or the root of an
    earlier region; every graph output must be a region root, input or constant.
    """
    available = set(graph.inputs) | set(graph.constants)
    roots = [r.root for r in regions]
    if len(set(roots)) != len(roots):
        raise VerifyError("partition: a value is the root of two regions")
    for i, r in enumerate(regions):
        for v in r.inputs:
            if v not in available:
                raise VerifyError(f"partition: region {i} ({r.describe()}) reads %{v.name} "
                                  f"before it is computed")
        if r.anchor is not None and r.anchor not in r.nodes:
            raise VerifyError(f"partition: region {i} anchor not among its nodes")
        if r.nodes and r.root not in {v for n in r.nodes for v in n.outputs}:
            raise VerifyError(f"partition: region {i} does not compute its root")
        available.add(r.root)
        available.update(r.extra_roots)
    used_nodes = {n for r in regions for n in r.nodes}
    for n in graph.nodes:
        if n not in used_nodes:
            raise VerifyError(f"partition: node '{n.name}' ({n.op}) is in no region")
    for v in graph.outputs:
        if v not in available:
            raise VerifyError(f"partition: graph output %{v.name} is never computed")
