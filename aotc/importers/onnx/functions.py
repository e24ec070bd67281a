"""Expand ONNX ops that have no converter but a function body in their schema.

Many newer ONNX ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss,
Attention, RotaryEmbedding, MeanVarianceNormalization, ...) are specified as
ONNX functions: a body of simpler ops. Before conversion, each default-domain
node without a converter is replaced by its schema's body for the model's
opset (the newest function version not newer than it; context-dependent
bodies are instantiated with the node's inferred input types), with formal
inputs/outputs renamed to the node's edges, internal names prefixed, and
`ref_attr_name` attributes bound to the node's attributes or the schema's
defaults. The importer repeats expansion (with shape inference between
rounds, since context-dependent bodies need their input types) for function
ops nested in bodies. A node is expanded only when every op of its body has a
converter or a function body of its own.
"""
from __future__ import annotations

import itertools

import onnx
from onnx import FunctionProto, NodeProto

_DEFAULT = ("", "ai.onnx")
MAX_ROUNDS = 4         # nesting depth of function ops inside function bodies


def _function_body(node: NodeProto, opset: int, input_types: list) -> FunctionProto | None:
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # noqa: BLE001 - unknown op
        return None
    versions = [v for v in schema.function_opset_versions if v <= opset]
    if versions:
        fp = FunctionProto()
        fp.ParseFromString(schema.get_function_with_opset_version(max(versions)))
        return fp
    versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if versions and all(t is not None for t in input_types):
        fp = FunctionProto()
        try:
            fp.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                max(versions), node.SerializeToString(), [t.SerializeToString() for t in input_types]))
        except Exception:  # noqa: BLE001 - the schema could not build a body for this node
            return None
        return fp
    return None


def _has_function(node: NodeProto, opset: int) -> bool:
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # noqa: BLE001 - unknown op
        return False
    return bool(schema.function_opset_versions or schema.context_dependent_function_opset_versions)


def _bound_attributes(node: NodeProto, schema_defaults: dict) -> dict:
    attrs = {a.name: a for a in node.attribute}
    for name, default in schema_defaults.items():
        attrs.setdefault(name, default)
    return attrs


def _instantiate(node: NodeProto, body: FunctionProto, prefix: str) -> list[NodeProto]:
    schema = onnx.defs.get_schema(node.op_type, domain=node.domain or "")
    defaults = {n: a.default_value for n, a in schema.attributes.items()
                if a.default_value is not None and a.default_value.name}
    attrs = _bound_attributes(node, defaults)
    rename = {name: (node.input[i] if i < len(node.input) else "") for i, name in enumerate(body.input)}
    rename.update({name: (node.output[i] if i < len(node.output) else prefix + name)
                   for i, name in enumerate(body.output)})

    def edge(name: str) -> str:
        if not name:
            return ""
        return rename.setdefault(name, prefix + name)

    out = []
    for k, inner in enumerate(body.node):
        n = NodeProto()
        n.CopyFrom(inner)
        n.name = f"{node.name or node.op_type}/{inner.name or inner.op_type}_{k}"
        n.input[:] = [edge(x) for x in inner.input]
        n.output[:] = [edge(x) for x in inner.output]
        del n.attribute[:]
        for a in inner.attribute:
            if a.HasField("ref_attr_name"):
                bound = attrs.get(a.ref_attr_name)
                if bound is None:
                    continue            # optional attribute the caller did not set
                b = onnx.AttributeProto()
                b.CopyFrom(bound)
                b.name = a.name
                n.attribute.append(b)
            else:
                n.attribute.append(_renamed_subgraphs(a, edge))
        out.append(n)
    return out


def _renamed_subgraphs(a: onnx.AttributeProto, edge) -> onnx.AttributeProto:
    """A copy of attribute `a` whose subgraphs (If/Loop bodies) use the instantiated edge names."""
    if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return a
    b = onnx.AttributeProto()
    b.CopyFrom(a)
    for g in ([b.g] if a.type == onnx.AttributeProto.GRAPH else list(b.graphs)):
        _rename_graph(g, edge)
    return b


def _rename_graph(g: onnx.GraphProto, edge) -> None:
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = edge(vi.name)
    for t in g.initializer:
        t.name = edge(t.name)
    for n in g.node:
        n.input[:] = [edge(x) for x in n.input]
        n.output[:] = [edge(x) for x in n.output]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_graph(a.g, edge)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _rename_graph(sub, edge)


def expand_functions(model: onnx.ModelProto, opset: int, supported) -> tuple[onnx.ModelProto, list[str]]:
    """The model with function-bodied unsupported nodes expanded; and the op types expanded."""
    types = {vi.name: vi.type for vi in list(model.graph.input) + list(model.graph.value_info)
             + list(model.graph.output)}
    for t in model.graph.initializer:
        types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    counter = itertools.count()
    expanded_ops: list[str] = []

    def expand(node: NodeProto) -> list[NodeProto] | None:
        # a skipped optional input ("") has an empty type: the schema's body builder reads that as absent
        body = _function_body(node, opset, [types.get(x) if x else onnx.TypeProto() for x in node.input])
        if body is None:
            return None
        # nested function ops are expanded in the next round, once their input types are inferred
        if any(n.domain in _DEFAULT and n.op_type not in supported and not _has_function(n, opset)
               for n in body.node):
            return None
        expanded_ops.append(node.op_type)
        return _instantiate(node, body, f"{node.name or node.op_type}__f{next(counter)}__")

    new_nodes, changed = [], False
    for node in model.graph.node:
        if node.domain in _DEFAULT and node.op_type not in supported:
            sub = expand(node)
            if sub is not None:
                new_nodes += sub
                changed = True
                continue
        new_nodes.append(node)
    if not changed:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    del out.graph.value_info[:]
    return out, sorted(set(expanded_ops))
