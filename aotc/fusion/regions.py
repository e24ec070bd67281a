"""Partition a Graph into Regions, one generated kernel each.

Regions grow backwards from a root (a value that must be materialized: a
graph output, or a value some consumer region did not absorb):

- anchors (`reduce`, `dot_general`, `convolution`, `reduce_window`) each get
  their own region; a region rooted at an elementwise op absorbs an anchor
  below it as an *epilogue* when every node between them is elementwise with
  the anchor's result shape and the anchor has no other user;
- elementwise, injective and source producers are absorbed as *prologue*
  (loop body, operand loads) when all their users are in the region;
  injective and source ops (pure index math) are absorbed even when they have
  other users, i.e. duplicated, since recomputing an index is cheaper than a
  round trip through memory.

Every bail-out records a one-line reason. `check_partition` verifies that
each node is materialized by exactly one region (duplicated index-math nodes
aside) and that the region order is a valid schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aotc.errors import VerifyError
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value

ANCHOR_KINDS = {ops.REDUCTION: "reduction", ops.DOT: "dot", ops.CONV: "conv", ops.WINDOW: "window"}
_FUSIBLE = (ops.ELEMENTWISE, ops.INJECTIVE, ops.SOURCE)
_DUPLICABLE = (ops.INJECTIVE, ops.SOURCE)


@dataclass
class Region:
    """A set of nodes computed by one kernel, writing one root value.

    `nodes` are in graph order. `anchor` is the reduce/dot/conv/window node,
    or None for a loop region. `epilogue` are the nodes that consume the
    anchor's result (elementwise, same shape). `inputs` are the materialized
    values the kernel reads. A region with no nodes copies `root` (a graph
    input or constant) into an output buffer.
    """
    kind: str
    root: Value
    nodes: list[Node]
    anchor: Node | None = None
    epilogue: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def describe(self) -> str:
        ops_list = "+".join(n.op for n in self.nodes) or "copy"
        return f"{self.kind}: {ops_list} -> {self.root.type}"


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

    def fully_absorbed(n: Node) -> bool:
        if any(v in outputs for v in n.outputs):
            return False
        holders = absorbed_in.get(n, set())
        return all(_region_of_user(u, holders) for v in n.outputs for u in users.get(v, []))

    def _region_of_user(u: Node, holders: set[int]) -> bool:
        return bool(absorbed_in.get(u, set()) & holders)

    for n in reversed(graph.nodes):
        if fully_absorbed(n):
            continue
        rid = len(regions)
        region = _grow(n, rid, users, producer, outputs, absorbed_in)
        regions.append(region)

    regions.reverse()
    for r in regions:
        r.nodes.sort(key=position.__getitem__)
        r.epilogue.sort(key=position.__getitem__)
        r.inputs = _region_inputs(r)
    return regions


def _grow(root: Node, rid: int, users, producer, outputs, absorbed_in) -> Region:
    members: set[Node] = {root}
    reasons: list[str] = []
    anchor = root if _is_anchor(root) else None
    epilogue: list[Node] = []
    if anchor is None:
        anchor, epilogue = _find_epilogue_anchor(root, users, producer, outputs, reasons)
        if anchor is not None:
            members.update(epilogue)
            members.add(anchor)
    # absorb prologue producers. A gemm/conv operand is loaded many times per
    # element, so only index math (injective ops) joins its prologue; compute
    # stays with the producer, where it can be that region's epilogue.
    heavy = anchor is not None and ops.category(anchor.op) in (ops.DOT, ops.CONV)
    work = [(m, heavy and m is anchor) for m in members]
    while work:
        node, restricted = work.pop()
        for v in node.inputs:
            p = producer.get(v)
            if p is None or p in members:
                continue
            cat = ops.category(p.op)
            if cat not in _FUSIBLE:
                continue
            if restricted and cat not in _DUPLICABLE:
                reasons.append(f"{p.op} '{p.name}' not fused: compute in a gemm/conv prologue")
                continue
            if v in outputs:
                reasons.append(f"{p.op} '{p.name}' not fused: graph output")
                continue
            exclusive = all(u in members for u in users.get(v, []))
            if not exclusive and cat not in _DUPLICABLE:
                reasons.append(f"{p.op} '{p.name}' not fused: used outside the region")
                continue
            members.add(p)
            work.append((p, restricted))
    for m in members:
        absorbed_in.setdefault(m, set()).add(rid)
    kind = ANCHOR_KINDS[ops.category(anchor.op)] if anchor is not None else "loop"
    return Region(kind, root.outputs[0], list(members), anchor, epilogue, reasons=reasons)


def _find_epilogue_anchor(root: Node, users, producer, outputs, reasons):
    """Walk down a chain of same-shape elementwise ops to an anchor, if any."""
    if ops.category(root.op) != ops.ELEMENTWISE:
        return None, []
    chain = [root]
    frontier = [root]
    shape = root.outputs[0].shape
    seen = {root}
    anchor = None
    while frontier:
        node = frontier.pop()
        for v in node.inputs:
            p = producer.get(v)
            if p is None or p in seen:
                continue
            if _is_anchor(p):
                if anchor is not None and p is not anchor:
                    reasons.append(f"{p.op} '{p.name}' not fused as epilogue: second anchor")
                    continue
                if v.shape != shape or len(p.outputs) != 1:
                    reasons.append(f"{p.op} '{p.name}' not fused as epilogue: result shape differs")
                    continue
                if v in outputs:
                    reasons.append(f"{p.op} '{p.name}' not fused as epilogue: graph output")
                    continue
                anchor = p
                continue
            if ops.category(p.op) == ops.ELEMENTWISE and v.shape == shape and v not in outputs \
                    and all(u in seen or u is root for u in users.get(v, [])):
                seen.add(p)
                chain.append(p)
                frontier.append(p)
    if anchor is None:
        return None, []
    # every user of the anchor must be in the chain, and the chain nodes that do
    # not depend on the anchor are ordinary prologue (kept out of `epilogue`)
    if not all(u in seen for u in users.get(anchor.outputs[0], [])):
        reasons.append(f"{anchor.op} '{anchor.name}' not fused as epilogue: used outside the region")
        return None, []
    depends = {anchor}
    epilogue = []
    changed = True
    while changed:
        changed = False
        for n in chain:
            if n not in depends and any(producer.get(v) in depends for v in n.inputs):
                depends.add(n)
                epilogue.append(n)
                changed = True
    # a chain node feeding the epilogue but not depending on the anchor must be
    # exclusive to the region; those are simply prologue members
    return anchor, epilogue


def _region_inputs(region: Region) -> list[Value]:
    members = set(region.nodes)
    produced = {v for n in region.nodes for v in n.outputs}
    seen: dict[Value, None] = {}
    for n in region.nodes:
        for v in n.inputs:
            if v not in produced:
                seen.setdefault(v, None)
    if not region.nodes:
        seen[region.root] = None
    del members
    return list(seen)


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
    used_nodes = {n for r in regions for n in r.nodes}
    for n in graph.nodes:
        if n not in used_nodes:
            raise VerifyError(f"partition: node '{n.name}' ({n.op}) is in no region")
    for v in graph.outputs:
        if v not in available:
            raise VerifyError(f"partition: graph output %{v.name} is never computed")
