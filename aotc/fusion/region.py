"""The Region: a set of graph nodes one generated kernel computes, and two helpers over it.

Kept apart from the partitioner (regions.py) so the fusion steps in their own modules
(gated.py, prologues.py, chains.py) and the kernels and launch planning that read
regions import it without importing the partitioner.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aotc.ir.graph import Node, Value
from aotc.patterns.attention import AttentionMatch


@dataclass(frozen=True)
class GatedPayload:
    """A "dot" region whose epilogue gates its GEMM's `blocks` column blocks of `width` F each
    (act(D[..., :F]) * D[..., F:] for SwiGLU, blocks = 4 for an LSTM cell; see gated.py)."""
    width: int
    blocks: int


@dataclass(frozen=True)
class ConvPayload:
    """A "conv" region whose pointwise anchor computes the staged depthwise conv `depthwise` (with its
    expansion and epilogue) as its prologue: one depthwise_project kernel (see prologues.py)."""
    depthwise: Node


@dataclass(frozen=True)
class AttentionPayload:
    """An "attention" region: the matched softmax(f(Q·Kᵀ))·V pattern (aotc.patterns.attention)."""
    match: AttentionMatch


@dataclass(frozen=True)
class ChainPayload:
    """A "chain" region: (anchor, result) per phase, in order (see chains.py)."""
    phases: tuple[tuple[Node, Value], ...]


# what each kind may carry; kinds not listed carry nothing
PAYLOADS = {"dot": GatedPayload, "conv": ConvPayload, "attention": AttentionPayload, "chain": ChainPayload}
_REQUIRED = ("attention", "chain")


@dataclass
class Region:
    """A set of nodes computed by one kernel, writing one root value.

    `nodes` are in graph order. `anchor` is the reduce/dot/conv/window node,
    or None for a loop region. `epilogue` are the nodes that consume the
    anchor's result (elementwise, same shape). `inputs` are the materialized
    values the kernel reads. `extra_roots` are values the kernel writes beside
    the root (a merged sibling loop's, a gated unit's). A region with no nodes
    copies `root` (a graph input or constant) into an output buffer.

    What only one kind needs rides in `payload`, a type per kind (PAYLOADS):
    readers ask `payload_as(GatedPayload)` and get None from any other region.
    """
    kind: str
    root: Value
    nodes: list[Node]
    anchor: Node | None = None
    epilogue: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    extra_roots: list = field(default_factory=list)
    payload: object = None

    def __post_init__(self):
        want = PAYLOADS.get(self.kind)
        if self.payload is None and self.kind not in _REQUIRED:
            return
        if want is None or not isinstance(self.payload, want):
            raise TypeError(f"a {self.kind!r} region carries {type(self.payload).__name__}, "
                            f"not {want.__name__ if want else 'a payload'}")

    def payload_as(self, cls):
        """The payload if it is a `cls`, else None."""
        return self.payload if isinstance(self.payload, cls) else None

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
