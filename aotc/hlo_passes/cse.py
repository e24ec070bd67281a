"""cse: common subexpression elimination, for nodes and for constants.

Guarantees: two nodes with the same op, the same input Values (after earlier
merges) and equal attributes become one; the later node's outputs are
replaced by the earlier one's, everywhere. Two constants with the same dtype,
shape and bytes become one (importers make a fresh scalar per use). Every op
in the table is pure, so equal inputs and attributes mean equal results.

Leaves alone: a node or constant that is itself a graph output keeps its own
Value when the survivor is not a node output (outputs stay produced by a
node); node order (the survivor is always the first occurrence, which
dominates the later one); constants are compared bytewise, so -0.0 and 0.0 or
two NaN payloads are never merged by value; constants over 64 KiB (weights)
are not compared at all.
"""
from __future__ import annotations

import hashlib

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir.graph import Graph

# Constants larger than this are not compared: weights are never duplicated
# by importers, and hashing every weight on every fixed-point round costs
# seconds on BERT-base.
MAX_CONSTANT_BYTES = 1 << 16


def run(graph: Graph) -> Graph:
    """A new Graph with duplicate nodes and constants merged."""
    rw = Rewriter(graph)
    by_bytes = {}
    for v, a in graph.constants.items():
        if a.nbytes > MAX_CONSTANT_BYTES:
            continue
        key = (v.dtype.name, a.shape, hashlib.sha1(a.tobytes()).hexdigest())
        first = by_bytes.setdefault(key, v)
        if first is not v and v not in rw.outputs and graph.constants[first].tobytes() == a.tobytes():
            rw.replace(v, first)
    seen = {}
    for n in graph.nodes:
        key = (n.op, tuple(rw.get(v) for v in n.inputs), n.attr_key())
        try:
            hash(key)
        except TypeError:       # an attribute that cannot be hashed: never merged
            rw.keep(n)
            continue
        first = seen.get(key)
        if first is not None and all(rw.can_replace(old, new) for old, new in zip(n.outputs, first.outputs)):
            for old, new in zip(n.outputs, first.outputs):
                rw.replace(old, new)
            continue
        seen.setdefault(key, rw.keep(n))
    if not rw.changed:
        return graph.with_nodes(graph.nodes)
    out = rw.finish()
    live = {v for n in out.nodes for v in n.inputs} | set(out.outputs)
    out.constants = {v: a for v, a in out.constants.items() if v in live or v not in rw.subst}
    return out
