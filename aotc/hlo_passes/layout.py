"""layout-nhwc: run convolutions, pooling and their elementwise neighbours channels-last.

Tensor cores want NHWC: the channel dim contiguous, so a conv's reduction
over input channels reads consecutive addresses. ONNX models are NCHW. This
pass picks, for each connected group of layout-flexible nodes around the
convolutions, a channels-last layout, and converts only at the group's
boundary.

How: grow components from every NCHW `convolution` through
- elementwise ops, `broadcast_in_dim` (re-aimed: a per-channel bias (C,) on
  dim 1 becomes one on the last dim), `concatenate`, `slice`, `pad`,
  `reduce_window` and other convolutions of the same rank, in both directions
  (producers join only when at most one of their operands comes from
  outside, so growing never adds boundary conversions);
- `reduce` over the spatial dims as a sink: it reads the NHWC tensor with its
  axes renamed and produces the same result (N, C) as before.
Each component is rewritten with permuted attributes (`layout="NHWC"` on
convolutions, OIHW weights permuted to OHWI). Constants crossing the boundary
are permuted at compile time; a non-constant value entering the component
gets one transpose (shared by all its readers); a component value read
outside it, or a graph output, gets one transpose back, whose result is the
original Value, so outside users and outputs see no change. The number of
transposes added is `report['transposes']` of the last run (tests count them).

Guarantees: every result equals the NCHW graph's exactly (the same sums in the
same order per output element; only where they are stored changes).

Leaves alone: graphs without convolutions, convolutions already NHWC, rank
changes (a reshape or a dot is always outside a component, so Flatten -> Gemm
reads NCHW through one transpose), and reductions whose kept dims the
permutation would reorder.
"""
from __future__ import annotations

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value

_FLEXIBLE = ("broadcast_in_dim", "concatenate", "slice", "pad", "reduce_window", "convolution")
last_stats: dict[str, int] = {}


def _perms(rank: int):
    to_last, back = ops.conv_layout_perms(rank)
    return to_last, back       # to_last == P (nhwc[j] = nchw[P[j]]), back == Q (nchw dim d sits at Q[d])


class _Components:
    """Finds the member nodes (by component) and the reduce sinks."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.users = graph.users()
        self.producer = graph.producers()
        self.member: dict[Node, int] = {}     # node -> rank of its component
        self.sinks: set[Node] = set()

    def flexible(self, n: Node, rank: int) -> bool:
        if len(n.outputs) != 1 or n.outputs[0].type.rank != rank:
            return False
        if n.op == "convolution":
            return n.attrs.get("layout", "NCHW") == "NCHW"
        if ops.category(n.op) == ops.ELEMENTWISE:
            return bool(n.inputs)
        if n.op == "broadcast_in_dim":
            _, back = _perms(rank)
            dims = [back[d] for d in n.attrs["broadcast_dimensions"]]
            return dims == sorted(dims) or n.inputs[0] in self.graph.constants
        return n.op in _FLEXIBLE

    def sink(self, n: Node, rank: int) -> bool:
        if n.op != "reduce" or n.inputs[0].type.rank != rank:
            return False
        _, back = _perms(rank)
        kept = [back[d] for d in range(rank) if d not in n.attrs["axes"]]
        return kept == sorted(kept)

    def outside_operands(self, n: Node) -> int:
        return sum(1 for v in n.inputs if v not in self.graph.constants and
                   (self.producer.get(v) is None or self.producer[v] not in self.member))

    def grow(self):
        for seed in self.graph.nodes:
            if seed.op != "convolution" or seed in self.member or not self.flexible(seed, seed.inputs[0].type.rank):
                continue
            rank = seed.inputs[0].type.rank
            self.member[seed] = rank
            work = [seed]
            while work:
                n = work.pop()
                for v in n.outputs:
                    for u in self.users.get(v, []):
                        if u in self.member or u in self.sinks or u.op == "broadcast_in_dim":
                            continue   # a broadcast reads its operand as it is: it joins as a producer only
                        if self.flexible(u, rank):
                            self.member[u] = rank
                            work.append(u)
                        elif self.sink(u, rank):
                            self.sinks.add(u)
                if n.op == "broadcast_in_dim":
                    continue           # its operand is re-aimed, not converted
                for v in n.inputs:
                    p = self.producer.get(v)
                    if p is None or p in self.member or not self.flexible(p, rank):
                        continue
                    if p.op == "broadcast_in_dim" or self.outside_operands(p) <= 1:
                        self.member[p] = rank
                        work.append(p)
        # a sink whose input is not a member reads NCHW as before
        self.sinks = {s for s in self.sinks if self.producer.get(s.inputs[0]) in self.member}


def run(graph: Graph) -> Graph:
    """A new Graph with conv components channels-last and transposes only at their boundary."""
    comps = _Components(graph)
    comps.grow()
    last_stats.clear()
    last_stats["transposes"] = 0
    if not comps.member:
        return graph.with_nodes(graph.nodes)
    rw = Rewriter(graph)
    nhwc: dict[Value, Value] = {}            # NCHW value -> its channels-last twin
    entries: dict[Value, Value] = {}
    outputs = set(graph.outputs)

    def operand(v: Value, rank: int) -> Value:
        if v.type.rank != rank:         # the scalar padding value of a pad
            return v
        if v in nhwc:
            return nhwc[v]
        if v in entries:
            return entries[v]
        to_last, _ = _perms(rank)
        if v in graph.constants:
            entries[v] = rw.constant(np.transpose(graph.constants[v], to_last), f"{v.name}.nhwc", v.dtype)
        else:
            entries[v] = rw.add("transpose", v, hint=f"{v.name}.nhwc", permutation=to_last)
            last_stats["transposes"] += 1
        return entries[v]

    for n in graph.nodes:
        if n in comps.sinks:
            rank = n.inputs[0].type.rank
            _, back = _perms(rank)
            axes = tuple(sorted(back[a] for a in n.attrs["axes"]))
            rw.add("reduce", operand(n.inputs[0], rank), name=n.name, out=n.outputs[0], **dict(n.attrs, axes=axes))
            continue
        rank = comps.member.get(n)
        if rank is None:
            rw.keep(n)
            continue
        to_last, back = _perms(rank)
        attrs, ins = dict(n.attrs), list(n.inputs)
        if n.op == "broadcast_in_dim":
            dims = [back[d] for d in attrs["broadcast_dimensions"]]
            src = ins[0]
            if dims != sorted(dims):       # a constant operand: permute it to match
                order = sorted(range(len(dims)), key=dims.__getitem__)
                src = rw.constant(np.transpose(graph.constants[src], order), f"{src.name}.nhwc", src.dtype)
            new_ins = [src]
            attrs.update(shape=tuple(n.outputs[0].shape[i] for i in to_last), broadcast_dimensions=tuple(sorted(dims)))
        else:
            new_ins = [operand(v, rank) for v in ins]
            if n.op == "convolution":
                attrs["layout"] = "NHWC"
            elif n.op == "reduce_window":
                for k in ("window", "strides", "padding", "dilations"):
                    attrs[k] = tuple(attrs[k][i] for i in to_last)
            elif n.op == "concatenate":
                attrs["dimension"] = back[attrs["dimension"]]
            elif n.op == "slice":
                for k in ("start", "limit", "stride"):
                    attrs[k] = tuple(attrs[k][i] for i in to_last)
            elif n.op == "pad":
                for k in ("low", "high"):
                    attrs[k] = tuple(attrs[k][i] for i in to_last)
        v = n.outputs[0]
        nhwc[v] = rw.add(n.op, *new_ins, name=n.name, hint=f"{v.name}.nhwc", **attrs)
        outside = v in outputs or any((u not in comps.member and u not in comps.sinks) or u.op == "broadcast_in_dim"
                                      for u in comps.users.get(v, []))
        if outside:
            rw.add("transpose", nhwc[v], name=n.name, out=v, permutation=back)
            last_stats["transposes"] += 1
    return rw.finish()
