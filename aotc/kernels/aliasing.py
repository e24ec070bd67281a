"""Which inputs of a loop kernel its output may overwrite in place.

The memory planner (aotc/package/launch_plan.py) lets a loop kernel write its
result over an input whose last read is that launch. That is safe only when
every thread reads element i of the input and then writes element i of the
output, which holds when the region is a loop with one output and every node
downstream of the input is elementwise at the output's shape (an injective
op on it would turn its index into something else).

The code generator asks the same question first: a parameter that may alias
`out` must not be declared `__restrict__` (two restrict pointers to one
buffer are undefined behaviour, and a `const __restrict__` input may be read
through the non-coherent load path, which does not see the kernel's own
stores). Kernels are shared between launches by their source, so the answer
here is structural: the launch plan may pick any of these, or none.
"""
from __future__ import annotations

from aotc.fusion.region import Region
from aotc.ir import ops
from aotc.ir.walk import users_of, walk


def may_alias_output(region: Region, params) -> list:
    """The params (region inputs) the output may be written over, in `params` order."""
    if region.kind != "loop" or not region.nodes or region.extra_roots:
        return []
    root_t = region.root.type
    readers: dict = {}
    for n in region.nodes:
        for u in n.inputs:
            readers.setdefault(u, []).append(n)
    out = []
    for v in params:
        if v.type.shape != root_t.shape or v.type.nbytes != root_t.nbytes:
            continue
        reached = walk(readers.get(v, []), lambda n: users_of(readers, n.outputs))
        if all(ops.category(n.op) == ops.ELEMENTWISE and all(o.type.shape == root_t.shape for o in n.outputs)
               for n in reached) and any(region.root in n.outputs for n in reached):
            out.append(v)
    return out


__all__ = ["may_alias_output"]
