"""The IR invariant checker: `verify(graph)` raises VerifyError or returns None.

The pipeline runs it after every pass, so a pass that breaks the IR is caught
at the pass that broke it, not three stages later in codegen. Each message
names the node, its op, its input types and the rule that failed.

Rules checked, in order:
- input names are unique, no Value is listed twice as an input, and no Value
  is both an input and a constant;
- every constant is a numpy array whose shape and dtype match its Value;
- nodes are in topological order: every input of a node is a graph input, a
  constant, or an output of an earlier node;
- every Value is defined exactly once (input, constant or one node output);
- every node's op is in the op table, and its stored output types equal what
  the op's infer rule derives from its input types;
- every graph output is defined, and `output_names` (if set) has one name per
  output.

To add a rule: add a check here and a test that breaks exactly that rule.
"""
from __future__ import annotations

import weakref

import numpy as np

from aotc.errors import VerifyError
from aotc.ir import ops
from aotc.ir.graph import Graph, Node


def _describe(node: Node) -> str:
    ins = ", ".join(f"%{v.name}:{v.type}" for v in node.inputs)
    return f"node '{node.name}' ({node.op}) with inputs ({ins})"


def _fail(node: Node, rule: str):
    raise VerifyError(f"verify: {_describe(node)}: {rule}")


def _check_signature(graph: Graph) -> set:
    """Checks inputs and constants; returns the set of Values they define."""
    defined: set = set()
    names: set[str] = set()
    for v in graph.inputs:
        if v.name in names:
            raise VerifyError(f"verify: graph input name '{v.name}' is used twice")
        if v in defined:
            raise VerifyError(f"verify: graph input %{v.name} is listed twice")
        names.add(v.name)
        defined.add(v)
    for v, a in graph.constants.items():
        if v in defined:
            raise VerifyError(f"verify: %{v.name} is both a graph input and a constant")
        if not isinstance(a, np.ndarray):
            raise VerifyError(f"verify: constant %{v.name} holds {type(a).__name__}, not a numpy array")
        if tuple(a.shape) != v.shape or a.dtype != v.dtype.np:
            raise VerifyError(f"verify: constant %{v.name}: array is {a.dtype}{list(a.shape)} "
                              f"but the Value's type is {v.type} (numpy {v.dtype.np})")
        defined.add(v)
    return defined


# Nodes whose types were already checked. A Node and its Values are immutable, so
# the type rule's verdict never changes; the pipeline verifies after every pass
# and most nodes survive a pass untouched, so each is type-checked once.
_TYPES_CHECKED: "weakref.WeakSet[Node]" = weakref.WeakSet()


def _check_node(node: Node, defined: set, produced_anywhere: set):
    for v in node.inputs:
        if v not in defined:
            rule = ("input %%%s is defined by a later node (nodes are not in topological order)"
                    if v in produced_anywhere else "input %%%s is not defined (not an input, constant or node output)")
            _fail(node, rule % v.name)
    if node not in _TYPES_CHECKED:
        _check_types(node)
        _TYPES_CHECKED.add(node)
    for v in node.outputs:
        if v in defined:
            _fail(node, f"output %{v.name} is already defined (each Value is defined once)")
        defined.add(v)


def _check_types(node: Node):
    if node.op not in ops.OPS:
        _fail(node, f"unknown primitive op '{node.op}'")
    try:
        expected = ops.infer_types(node.op, node.attrs, [v.type for v in node.inputs], node.name)
    except VerifyError as e:
        raise VerifyError(f"verify: {e}") from None
    except (KeyError, TypeError, ValueError, IndexError) as e:
        # A missing or malformed attribute makes the infer rule itself fail.
        _fail(node, f"infer rule failed on attributes {node.attrs}: {type(e).__name__}: {e}")
    got = [v.type for v in node.outputs]
    if len(got) != len(expected):
        _fail(node, f"has {len(got)} outputs, the op defines {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            _fail(node, f"stored output {i} %{node.outputs[i].name} has type {g}, "
                        f"but the infer rule gives {e}")


def verify(graph: Graph) -> None:
    """Raise VerifyError naming the node, op, input types and rule if `graph` breaks an invariant."""
    defined = _check_signature(graph)
    # Every node output, to tell "out of order" from "undefined" for a missing input.
    produced_anywhere = {v for n in graph.nodes for v in n.outputs}
    for n in graph.nodes:
        _check_node(n, defined, produced_anywhere)
    for v in graph.outputs:
        if v not in defined:
            raise VerifyError(f"verify: graph output %{v.name} is not defined")
    if graph.output_names is not None and len(graph.output_names) != len(graph.outputs):
        raise VerifyError(f"verify: {len(graph.output_names)} output names for "
                          f"{len(graph.outputs)} outputs")
