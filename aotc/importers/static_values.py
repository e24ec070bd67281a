"""Import-time evaluation of values computed only from constants.

aotc's shapes are static, while frameworks pass shapes, axes and indices as
tensors (ONNX Reshape's shape, StableHLO dynamic_slice's start indices). An
importer asks `StaticValues.evaluate(v)`: it runs the nodes producing `v`
through the reference interpreter when every leaf is a constant, memoizing
results, and otherwise names the graph input the value depends on. The nodes
stay in the graph; constant folding and DCE clean them up. In a dynamic graph a
shape computed from an input's dynamic dims (ONNX Shape -> Gather -> Concat ->
Reshape) evaluates too: its elements are DimExprs, in numpy object arrays, and
size_values.py computes the elementwise ops on them.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.size_values import evaluate_on_sizes, require_decided
from aotc.ir.graph import GraphBuilder, Node, Value
from aotc.ir.interpreter import evaluate_node


class StaticValues:
    def __init__(self, builder: GraphBuilder):
        self.b = builder
        self._values: dict[Value, np.ndarray] = {}
        self._producer: dict[Value, Node] = {}
        self._indexed = 0

    def evaluate(self, v: Value) -> tuple[np.ndarray | None, Value | None]:
        """(value, None) when `v` is computable now, else (None, the input it depends on).

        DynamicDecisionError when the value is a decision on dynamic dims that their ranges leave open.
        """
        value, leaf = self._evaluate(v)
        if value is not None:
            require_decided(value)
        return value, leaf

    def _evaluate(self, v: Value) -> tuple[np.ndarray | None, Value | None]:
        if v in self.b.constants:
            return self.b.constants[v], None
        if v in self._values:
            return self._values[v], None
        for n in self.b.nodes[self._indexed:]:
            for o in n.outputs:
                self._producer[o] = n
        self._indexed = len(self.b.nodes)
        n = self._producer.get(v)
        if n is None:
            return None, v
        args = []
        for x in n.inputs:
            a, leaf = self._evaluate(x)
            if a is None:
                return None, leaf
            args.append(a)
        results = None
        if any(a.dtype == object for a in args):   # sizes with dynamic dims among them
            results = evaluate_on_sizes(n.op, n.attrs, args, n.outputs[0].dtype)
        for o, r in zip(n.outputs, results or evaluate_node(n.op, n.attrs, args)):
            # sizes of a dynamic graph stay DimExprs in object arrays (aotc/ir/dims.py)
            self._values[o] = r if r.dtype == object else r.astype(o.dtype.np, copy=False)
        return self._values[v], None

