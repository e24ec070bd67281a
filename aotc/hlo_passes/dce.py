"""dce: dead code elimination.

Guarantees: the result keeps exactly the nodes with at least one output that
reaches a graph output, in their original order, and the constants that a
kept node or a graph output reads. Kept nodes and Values are the same objects.

Leaves alone: graph inputs, even unused ones (they are the signature), and
the outputs list. Every op in the table is free of side effects, so liveness
is the only thing that keeps a node.
"""
from __future__ import annotations

from aotc.ir.graph import Graph


def run(graph: Graph) -> Graph:
    """A new Graph without dead nodes and unused constants."""
    live = set(graph.outputs)
    kept = []
    for n in reversed(graph.nodes):
        if any(v in live for v in n.outputs):
            kept.append(n)
            live.update(n.inputs)
    kept.reverse()
    constants = {v: a for v, a in graph.constants.items() if v in live}
    return graph.with_nodes(kept, constants=constants)
