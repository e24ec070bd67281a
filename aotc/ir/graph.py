"""Graph IR: immutable Values and Nodes, a Graph that lists them in order.

Passes never mutate: a pass builds a new Graph, reusing the Values and Nodes
it keeps. Values are compared by identity, so one Value object is one SSA
value across every Graph that mentions it. `TensorType` carries a full shape
and a dtype; a dim is an int or, in a graph that serves a range of shapes, a
symbolic `DimExpr` (aotc/ir/dims.py) whose ranges are `Graph.dims`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.dtypes import DType


@dataclass(frozen=True)
class TensorType:
    shape: tuple                       # ints and DimExprs
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(D.is_static(d) for d in self.shape)

    @property
    def size(self):
        """Elements: an int, or a DimExpr for a dynamic shape."""
        return D.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def max_nbytes(self) -> int:
        """Bytes at the top of the dims' ranges (what a buffer for any run needs)."""
        return D.upper(self.nbytes)

    def __str__(self) -> str:
        return f"{self.dtype.name}[{','.join(map(repr, self.shape))}]"


class Value:
    """One SSA value. Identity is the value: never copy a Value to rename it."""
    __slots__ = ("name", "type")

    def __init__(self, name: str, type: TensorType):
        self.name = name
        self.type = type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"%{self.name}:{self.type}"


@dataclass(frozen=True, eq=False)
class Node:
    """One primitive op application. `attrs` must not be mutated after creation."""
    op: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def output(self) -> Value:
        assert len(self.outputs) == 1, f"{self.op} has {len(self.outputs)} outputs"
        return self.outputs[0]

    def attr_key(self) -> tuple:
        """A hashable form of the attributes (for CSE and caching); computed once per node."""
        key = self.__dict__.get("_attr_key")
        if key is None:
            key = tuple(sorted((k, _freeze(v)) for k, v in self.attrs.items()))
            object.__setattr__(self, "_attr_key", key)
        return key

    def structure_key(self) -> tuple:
        """(op, inputs, outputs, attributes' repr): what 'this node changed' means to the pass manager."""
        key = self.__dict__.get("_structure_key")
        if key is None:
            key = (self.op, self.inputs, self.outputs, repr(self.attr_key()))
            object.__setattr__(self, "_structure_key", key)
        return key

    def __repr__(self) -> str:
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        outs = ", ".join(repr(v) for v in self.outputs)
        attrs = "".join(f" {k}={v}" for k, v in sorted(self.attrs.items()))
        return f"{outs} = {self.op}({ins}){attrs}"


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, DType):
        return v.name
    return v


@dataclass
class Graph:
    """A whole program: inputs, outputs, nodes in topological order, constants.

    `constants` maps a Value to its numpy array; constants are not produced by
    any node. Graph outputs may be inputs, constants or node outputs, and may
    repeat.
    """
    inputs: list[Value]
    outputs: list[Value]
    nodes: list[Node]
    constants: dict[Value, np.ndarray] = field(default_factory=dict)
    name: str = "main"
    output_names: list[str] | None = None   # user-facing names, default: value names
    dims: dict = field(default_factory=dict)   # dynamic dim name -> DimRange

    def with_nodes(self, nodes: Iterable[Node], constants: dict | None = None,
                   outputs: list[Value] | None = None) -> "Graph":
        """A new Graph sharing this one's signature with other nodes/constants."""
        return Graph(list(self.inputs), list(outputs if outputs is not None else self.outputs),
                     list(nodes), dict(self.constants if constants is None else constants),
                     self.name, self.signature_output_names(), dict(self.dims))

    @property
    def is_dynamic(self) -> bool:
        return bool(self.dims) or not all(v.type.is_static for v in self.inputs)

    def signature_output_names(self) -> list[str]:
        return list(self.output_names) if self.output_names else [v.name for v in self.outputs]

    def users(self) -> dict[Value, list[Node]]:
        """For each value, the nodes that read it (a node reading twice appears twice)."""
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def producers(self) -> dict[Value, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    def count(self, op: str | None = None) -> int:
        return len(self.nodes) if op is None else sum(1 for n in self.nodes if n.op == op)

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(repr(v) for v in self.inputs)}) {{"]
        for v, a in self.constants.items():
            lines.append(f"  {v!r} = constant shape={a.shape}")
        lines += [f"  {n!r}" for n in self.nodes]
        lines.append(f"  return {', '.join('%' + v.name for v in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


class GraphBuilder:
    """Builds a Graph op by op, inferring output types from the op table.

    Used by importers and tests: `b.add("add", x, y)` returns the new Value.
    """

    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.constants: dict[Value, np.ndarray] = {}
        self._names: set[str] = set()
        self._counter = itertools.count()
        self.dims: dict = {}                 # dynamic dim name -> DimRange

    def fresh(self, hint: str = "t") -> str:
        hint = hint or "t"
        name = hint
        while name in self._names:
            name = f"{hint}.{next(self._counter)}"
        self._names.add(name)
        return name

    def input(self, name: str, shape, dtype: DType | str = dtypes.f32) -> Value:
        dt = dtypes.from_name(dtype) if isinstance(dtype, str) else dtype
        v = Value(self.fresh(name), TensorType(tuple(D.as_dim(d) for d in shape), dt))
        self.inputs.append(v)
        return v

    def constant(self, array, name: str = "c", dtype: DType | None = None) -> Value:
        a = np.asarray(array)
        dt = dtype or dtypes.from_numpy(a.dtype)
        a = np.require(a.astype(dt.np, copy=False), requirements="C")   # keeps 0-d arrays 0-d
        v = Value(self.fresh(name), TensorType(tuple(a.shape), dt))
        self.constants[v] = a
        return v

    def add_multi(self, op: str, *inputs: Value, name: str = "", **attrs) -> tuple[Value, ...]:
        from aotc.ir.ops import infer_types
        types = infer_types(op, attrs, [v.type for v in inputs], node_name=name)
        base = name or op
        outs = tuple(Value(self.fresh(base if len(types) == 1 else f"{base}.{i}"), t)
                     for i, t in enumerate(types))
        self.nodes.append(Node(op, tuple(inputs), outs, dict(attrs), name or outs[0].name))
        return outs

    def add(self, op: str, *inputs: Value, name: str = "", **attrs) -> Value:
        (out,) = self.add_multi(op, *inputs, name=name, **attrs)
        return out

    def build(self, outputs: list[Value], output_names: list[str] | None = None) -> Graph:
        return Graph(list(self.inputs), list(outputs), list(self.nodes), dict(self.constants),
                     self.name, output_names, dict(self.dims))
