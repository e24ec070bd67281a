"""Shared plumbing for rewriting passes: a graph copier with value substitution.

Passes never mutate their input. A `Rewriter` walks the old graph's nodes in
order; the pass keeps a node (`keep`, which re-points its inputs through the
substitutions made so far), drops it after recording what replaces its
outputs (`replace`), or emits new nodes (`add`) and constants (`constant`).
`finish()` builds the new Graph; graph outputs are re-pointed too, while the
user-facing output names stay those of the input graph.

Also here: `splat`, the scalar value of a constant-valued tensor (a constant
whose elements are all equal, or a broadcast/convert/reshape of one), which
the algebraic passes use to recognise `x * 1` and friends.
"""
from __future__ import annotations

import itertools

import numpy as np

from aotc.ir import ops
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Node, TensorType, Value


class Rewriter:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[Node] = []
        self.constants = dict(graph.constants)
        self.subst: dict[Value, Value] = {}
        self.producer = graph.producers()
        self.users = graph.users()
        self.outputs = set(graph.outputs)
        self._names = {v.name for v in itertools.chain(graph.inputs, graph.constants, self.producer)}
        self._counter = itertools.count()
        self._node_outputs: set[Value] = set()
        self.made: dict[Value, Node] = {}      # producers in the new graph
        self.changed = False

    def fresh(self, hint: str) -> str:
        name = hint
        while name in self._names:
            name = f"{hint}.{next(self._counter)}"
        self._names.add(name)
        return name

    def get(self, v: Value) -> Value:
        while v in self.subst:
            v = self.subst[v]
        return v

    def keep(self, node: Node) -> Node:
        inputs = tuple(self.get(v) for v in node.inputs)
        if inputs != node.inputs:
            node = Node(node.op, inputs, node.outputs, dict(node.attrs), node.name)
        self.nodes.append(node)
        self._node_outputs.update(node.outputs)
        self.made.update((v, node) for v in node.outputs)
        return node

    def can_replace(self, old: Value, new: Value) -> bool:
        """Graph outputs keep being produced by a node: never alias one to an input or constant."""
        if old not in self.outputs:
            return True
        new = self.get(new)
        return new in self._node_outputs and new not in self.outputs

    def replace(self, old: Value, new: Value):
        assert old.type == new.type, f"replacing %{old.name}:{old.type} by %{new.name}:{new.type}"
        self.subst[old] = new
        self.changed = True

    def add(self, op: str, *inputs: Value, name: str = "", hint: str = "", out: Value | None = None,
            **attrs) -> Value:
        """Append a node; `out` reuses an existing Value (of the right type) as its result."""
        inputs = tuple(self.get(v) for v in inputs)
        (t,) = ops.infer_types(op, attrs, [v.type for v in inputs], name)
        if out is None:
            out = Value(self.fresh(hint or name or op), t)
        assert out.type == t, f"{op}: result {t} does not fit %{out.name}:{out.type}"
        self.nodes.append(Node(op, inputs, (out,), dict(attrs), name or out.name))
        self._node_outputs.add(out)
        self.made[out] = self.nodes[-1]
        self.changed = True
        return out

    def constant(self, array: np.ndarray, hint: str, dtype: DType) -> Value:
        a = np.asarray(array, dtype=dtype.np, order="C")     # constants are never mutated: no copy needed
        v = Value(self.fresh(hint), TensorType(tuple(a.shape), dtype))
        self.constants[v] = a
        self.changed = True
        return v

    def splat(self, v: Value):
        """The scalar filling `v` in the graph built so far, or None (see `splat`)."""
        return splat(self.constants, self.made, self.get(v))

    def value_of(self, v: Value) -> np.ndarray | None:
        """The array of a constant (after substitution), else None."""
        return self.constants.get(self.get(v))

    def finish(self) -> Graph:
        out = self.graph.with_nodes(self.nodes, constants=self.constants,
                                    outputs=[self.get(v) for v in self.graph.outputs])
        return out


def splat(graph_constants: dict, producer: dict, v: Value):
    """The scalar that fills `v` when it is constant-valued, else None.

    Looks through broadcast_in_dim, reshape and convert of a constant whose
    elements are all equal (the shapes importers give scalars).
    """
    seen = 0
    while v not in graph_constants:
        n = producer.get(v)
        if n is None or n.op not in ("broadcast_in_dim", "reshape", "convert") or seen > 8:
            return None
        if n.op == "convert":
            inner = splat(graph_constants, producer, n.inputs[0])
            if inner is None:
                return None
            return np.array(inner).astype(v.dtype.np)[()]
        v = n.inputs[0]
        seen += 1
    a = graph_constants[v]
    if a.size == 0:
        return None
    first = a.reshape(-1)[0]
    if a.size > 1 and not np.all(a == first):
        return None
    if v.dtype.is_float and not np.isfinite(np.float64(first)):
        return None
    return first
