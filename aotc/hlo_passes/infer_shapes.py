"""infer-shapes: re-derive every node's output types from the op table.

Guarantees: walking the nodes in order, each node's output types become what
its op's infer rule gives for its (possibly re-typed) inputs. A Value whose
type changes is replaced by a new Value of the same name and every use is
remapped, including graph outputs; a Value whose type is already right is
kept as is, and a node none of whose inputs or outputs changed is kept as the
same Node object. So on a consistent graph the pass changes nothing: the
result has the same Nodes, Values and constants.

Leaves alone: attributes (a reshape's `shape` attribute is not rewritten, so
an input override that contradicts it raises VerifyError naming the node),
inputs, constants. Use `with_input_shapes` to change input shapes and
re-derive the rest in one step.
"""
from __future__ import annotations

from aotc.errors import AotcError
from aotc.ir import dims as D
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, TensorType, Value


def _retype(graph: Graph, remap: dict) -> Graph:
    nodes: list[Node] = []
    for n in graph.nodes:
        inputs = tuple(remap.get(v, v) for v in n.inputs)
        types = ops.infer_types(n.op, n.attrs, [v.type for v in inputs], n.name)
        if len(types) != len(n.outputs):
            raise AotcError(f"infer-shapes: node '{n.name}' ({n.op}) stores {len(n.outputs)} "
                            f"outputs, the op defines {len(types)}")
        outputs = []
        for v, t in zip(n.outputs, types):
            if v.type != t:
                remap[v] = Value(v.name, t)
            outputs.append(remap.get(v, v))
        outputs = tuple(outputs)
        if inputs == n.inputs and outputs == n.outputs:
            nodes.append(n)
        else:
            nodes.append(Node(n.op, inputs, outputs, dict(n.attrs), n.name))
    return Graph([remap.get(v, v) for v in graph.inputs], [remap.get(v, v) for v in graph.outputs],
                 nodes, dict(graph.constants), graph.name, graph.signature_output_names(), dict(graph.dims))


def run(graph: Graph) -> Graph:
    """A new Graph whose stored types all equal the op table's inference."""
    return _retype(graph, {})


def with_input_shapes(graph: Graph, shapes: dict[str, tuple[int, ...]]) -> Graph:
    """Override input shapes by input name, then re-derive every type downstream."""
    known = {v.name: v for v in graph.inputs}
    unknown = sorted(set(shapes) - set(known))
    if unknown:
        raise AotcError(f"no graph input named {unknown}; inputs are {sorted(known)}")
    remap = {}
    for name, shape in shapes.items():
        v = known[name]
        shape = tuple(D.as_dim(d) for d in shape)
        if shape != v.shape:
            remap[v] = Value(v.name, TensorType(shape, v.dtype))
    return _retype(graph, remap)
