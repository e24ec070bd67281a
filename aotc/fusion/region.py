"""The Region: a set of graph nodes one generated kernel computes, and two helpers over it.

Kept apart from the partitioner (regions.py) so the fusion rules in their own modules
(gated.py, prologues.py) can build and edit regions without importing it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aotc.ir.graph import Node, Value


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
    attention: object = None        # AttentionMatch for kind "attention"
    gated: int = 0                  # F of a gated epilogue (act(D[..., :F]) * D[..., F:]), see gated.py
    gates: int = 0                  # its k column blocks of width F (2: SwiGLU, 4: an LSTM cell)
    extra_roots: list = field(default_factory=list)   # more values the kernel writes (merge_sibling_loops)
    phases: list = field(default_factory=list)        # kind "chain": (anchor, result) per phase, in order

    def describe(self) -> str:
        ops_list = "+".join(n.op for n in self.nodes) or "copy"
        return f"{self.kind}: {ops_list} -> {self.root.type}"


def dependents(chain, seeds: set, producer) -> list[Node]:
    """The nodes of `chain` that depend on `seeds` (directly or through each other): an epilogue."""
    depends, out = set(seeds), []
    changed = True
    while changed:
        changed = False
        for n in chain:
            if n not in depends and any(producer.get(v) in depends for v in n.inputs):
                depends.add(n)
                out.append(n)
                changed = True
    return out


def region_inputs(region: Region) -> list[Value]:
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
