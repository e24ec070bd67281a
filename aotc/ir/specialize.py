"""A dynamic graph at one concrete shape: every dim replaced by its value.

The interpreter runs a dynamic graph by specializing it to the shapes of the
inputs it is given, and a static engine "compiled at exactly this shape"
(bench/dynamic_report.py) starts from the same specialization, so both mean
the same thing by a shape.
"""
from __future__ import annotations

from aotc.errors import InputError
from aotc.ir import dims as D
from aotc.ir.graph import Graph, Node, TensorType, Value


def bind_dims(graph: Graph, shapes: dict[str, tuple]) -> dict[str, int]:
    """Dim values from input shapes (input name -> shape); InputError names any inconsistency.

    Every dynamic dim of an input must be a bare dim name; a dim named twice must get one
    value; values outside the graph's ranges are refused.
    """
    env: dict[str, int] = {}
    source: dict[str, str] = {}
    for v in graph.inputs:
        if v.name not in shapes:
            continue
        got = tuple(shapes[v.name])
        if len(got) != v.type.rank:
            raise InputError(f"input '{v.name}': expected rank {v.type.rank} {v.type}, got shape {list(got)}")
        for i, (want, n) in enumerate(zip(v.shape, got)):
            if D.is_static(want):
                if want != n:
                    raise InputError(f"input '{v.name}' dim {i} is {n}, expected {want}")
                continue
            names = D.symbols(want)
            if len(names) != 1 or want != D.sym(next(iter(names))):
                raise InputError(f"input '{v.name}' dim {i} is the expression {want!r}; "
                                 "input dims must be a number or a dim name")
            name = next(iter(names))
            r = graph.dims.get(name)
            if r is not None and not (r.min <= n <= r.max and n % r.divisor == 0):
                raise InputError(f"input '{v.name}' dim {i} ({name}) is {n}, outside {r}")
            if name in env and env[name] != n:
                raise InputError(f"input '{v.name}' dim {i} ({name}) is {n} but input '{source[name]}' "
                                 f"gives {name} = {env[name]}")
            env.setdefault(name, n)
            source.setdefault(name, v.name)
    return env


def specialize(graph: Graph, env: dict[str, int]) -> Graph:
    """`graph` with every dim named in `env` replaced by its value (types and attributes)."""
    if not env:
        return graph
    remap: dict[Value, Value] = {}

    def value(v: Value) -> Value:
        if v not in remap:
            shape = tuple(D.substitute(d, env) for d in v.shape)
            remap[v] = v if shape == v.shape else Value(v.name, TensorType(shape, v.dtype))
        return remap[v]

    inputs = [value(v) for v in graph.inputs]
    constants = {value(v): a for v, a in graph.constants.items()}
    nodes = []
    for n in graph.nodes:
        attrs = D.specialize_value(n.attrs, env) if D.contains_dims(n.attrs) else n.attrs
        nodes.append(Node(n.op, tuple(value(v) for v in n.inputs), tuple(value(v) for v in n.outputs),
                          dict(attrs), n.name))
    dims = {k: r for k, r in graph.dims.items() if k not in env}
    return Graph(inputs, [value(v) for v in graph.outputs], nodes, constants, graph.name,
                 graph.signature_output_names(), dims)


__all__ = ["bind_dims", "specialize"]
