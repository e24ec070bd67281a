"""Gated epilogues: a GEMM read only as k equal column blocks, with the unit over them fused.

SwiGLU over LLaMA's merged gate and up projections (k = 2), an LSTM cell over the
recurrent GEMM's four gates (k = 4), a GRU's reset gate over its first GEMM's two
blocks: the unit runs in the GEMM kernel's epilogue (kernels/codegen_gated.py), so
neither the GEMM result nor the blocks go through memory. Values the unit hands to
later ops (the LSTM's c_t, the GRU's update block) are written as extra roots.
"""
from __future__ import annotations

from aotc.fusion.region import GatedPayload, Region, dependents, region_inputs
from aotc.fusion.rules import plain_anchor
from aotc.fusion.rules.gated import GATE_BLOCKS
from aotc.ir import ops
from aotc.ir.graph import Node, Value
from aotc.ir.walk import producers_of, users_of, walk


def merge_sliced_loops(regions: list[Region], users, producer, outputs, position) -> list[Region]:
    """Run a loop over a GEMM's column blocks in the GEMM's epilogue, when the loop comes right after it.

    A GRU step's first GEMM gives the update and reset gates as two column blocks; a
    loop computes r * h from the reset block while the next GEMM's epilogue reads the
    update block. Growing regions from the roots down cannot see that (the later GEMM
    claims its block first), so this pass joins the two after the fact: the loop
    becomes a gated epilogue (kernels/codegen_gated.py) and the blocks other regions
    read are written as extra roots, which those regions then read instead of the GEMM.
    """
    out: list[Region] = []
    i = 0
    while i < len(regions):
        merged = _merge_sliced_loop(regions[i], regions[i + 1], regions[i + 2:], users, producer, outputs,
                                    position) if i + 1 < len(regions) else None
        out.append(merged or regions[i])
        i += 2 if merged else 1
    return out


def _merge_sliced_loop(a: Region, b: Region, later, users, producer, outputs, position):
    if a.kind != "dot" or a.payload is not None or a.epilogue or a.extra_roots or a.root is not a.anchor.outputs[0] \
            or b.kind != "loop" or a.root not in b.inputs or not b.root.shape:
        return None
    found = _gated_gemm(a.root, b.root.shape, users, producer, outputs)
    if found is None or found[1]:
        return None
    slices = found[2]
    if any(a.root in n.inputs and n not in slices for n in b.nodes) \
            or any(v.shape != b.root.shape for v in b.extra_roots) or any(sl.outputs[0] in outputs for sl in slices):
        return None
    readers = [r for r in later if any(sl in r.nodes for sl in slices)]
    need = [sl.outputs[0] for sl in slices if any(sl in r.nodes for r in readers)]
    nodes = sorted(set(a.nodes) | set(b.nodes) | set(slices), key=position.__getitem__)
    epilogue = sorted(set(slices) | set(dependents(nodes, set(slices), producer)), key=position.__getitem__)
    merged = Region("dot", b.root, nodes, a.anchor, epilogue,
                    reasons=a.reasons + b.reasons + ["the loop over its column blocks runs in its epilogue"],
                    extra_roots=b.extra_roots + need, payload=GatedPayload(b.root.shape[-1], len(slices)))
    merged.inputs = region_inputs(merged)
    for r in readers:          # they read the written blocks now, not the GEMM's result
        r.nodes = [n for n in r.nodes if n not in slices]
        r.epilogue = [n for n in r.epilogue if n not in slices]
        r.inputs = region_inputs(r)
    return merged


def gated_anchor(root: Node, users, producer, outputs, position=None):
    """(dot, epilogue nodes, F, k, extra roots) for a gated unit over k column blocks of one GEMM,
    else (None, [], 0, 0, []).

    The epilogue reads D = x @ W in k blocks of F columns, D[..., g*F:(g+1)*F]:
    SwiGLU over LLaMA's gate and up projections (merge-dots makes them one GEMM,
    k = 2: act(D[..., :F]) * D[..., F:]) or an LSTM cell over the recurrent GEMM's
    four gates (k = 4). The GEMM kernel computes a tile's k gate columns in the same
    thread (its B loads interleave them, see kernels/codegen_gated.py), so the unit
    is its epilogue and neither D nor the blocks go through memory. Values between
    the blocks and the root that are used outside (the LSTM's cell state c_t, which
    the next step reads) are written as extra roots of the same kernel.
    """
    none = (None, [], 0, 0, [])
    shape = root.outputs[0].shape
    if ops.category(root.op) != ops.ELEMENTWISE or not shape or position is None:
        return none
    seen, candidates = set(), []

    def down(node):                       # elementwise ops at the root's shape, down to slices of a D
        if ops.category(node.op) != ops.ELEMENTWISE:
            return
        for v in node.inputs:
            p = producer.get(v)
            if p is None or p in seen or v in outputs or v.shape != shape:
                continue
            if p.op == "slice" and p.inputs[0] not in candidates and producer.get(p.inputs[0]) is not None:
                candidates.append(p.inputs[0])
            yield p

    walk([root], down, seen)
    for d in sorted(candidates, key=lambda v: -position[producer[v]]):      # the latest GEMM first
        found = _gated_gemm(d, shape, users, producer, outputs)
        if found is not None:
            break
    else:
        return none
    node, pre, slices = found
    f = shape[-1]
    k = len(slices)
    # the unit: elementwise ops at the root's shape that depend on the blocks and lead to the root
    # (forward from the slices, no further than the root in graph order, then back from the root)
    ahead = set(walk(slices, lambda n: (u for u in users_of(users, n.outputs) if position[u] <= position[root]
                                        and ops.category(u.op) == ops.ELEMENTWISE and u.outputs[0].shape == shape)))
    if root not in ahead:
        return none
    unit = set(walk([root], lambda n: (p for p in producers_of(producer, n.inputs) if p in ahead)))
    if not set(slices) <= unit or not _acyclic(unit | {node, *pre}, users, producer, position, position[root]):
        return none
    extra = [n.outputs[0] for n in sorted(unit - set(slices) - {root}, key=position.__getitem__)
             if any(u not in unit for u in users.get(n.outputs[0], []))]
    if any(v in outputs for v in extra):
        return none
    epilogue = list(pre) + sorted(unit, key=position.__getitem__)
    return node, epilogue, f, k, extra


def _acyclic(unit: set, users, producer, position, last: int) -> bool:
    """No value the unit reads from outside depends on the unit itself (graph positions up to `last`).

    Reaching back from the root through elementwise ops can take in a path through a
    later step (an LSTM's c_t feeds step t+1's cell, whose result the root may also
    read); one kernel could not compute that unit, as it would read what it writes.
    """
    after = set(walk(unit, lambda n: (u for u in users_of(users, n.outputs) if position[u] <= last))) - unit
    return not any(producer.get(v) in after for n in unit for v in n.inputs)


def _gated_gemm(d: Value, shape, users, producer, outputs):
    """(dot, elementwise nodes between it and d, the slices) when `d` is a GEMM result read only
    as k in GATE_BLOCKS column blocks of `shape` (slices at 0, F, ..., (k-1)F), else None."""
    f = shape[-1]
    if d in outputs or d.shape[:-1] != tuple(shape[:-1]) or d.shape[-1] % f or d.shape[-1] // f not in GATE_BLOCKS:
        return None
    k = d.shape[-1] // f
    slices = users.get(d, [])
    zero = (0,) * (len(shape) - 1)
    if len(slices) != k or any(sl.op != "slice" or set(sl.attrs["stride"]) != {1} or sl.outputs[0].shape != shape
                               for sl in slices) \
            or sorted(tuple(sl.attrs["start"]) for sl in slices) != [zero + (g * f,) for g in range(k)]:
        return None
    pre, node = [], producer.get(d)         # elementwise at D's shape (a merged bias) back to the GEMM
    while node is not None and ops.category(node.op) == ops.ELEMENTWISE:
        inner = [v for v in node.inputs if v.shape == d.shape and producer.get(v) is not None
                 and ops.category(producer[v].op) in (ops.ELEMENTWISE, ops.DOT)]
        if len(inner) != 1 or len(users.get(node.outputs[0], [])) != (k if not pre else 1):
            return None
        pre.append(node)
        node = producer[inner[0]]
    if node is None or node.op != "dot_general" or len(users.get(node.outputs[0], [])) != (1 if pre else k) \
            or plain_anchor(node):          # the int8/fp8 and f64 GEMMs have no gated epilogue
        return None
    _, rf = ops.dot_free_dims(node.attrs, node.inputs[0].type.rank, node.inputs[1].type.rank)
    if len(rf) != 1 or node.outputs[0] in outputs or any(v in outputs for n in pre for v in n.outputs):
        return None
    return node, pre, slices
