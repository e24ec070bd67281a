"""constant-folding: evaluate at compile time every node whose inputs are constants.

Guarantees: walking the nodes in order, a node whose inputs are all constants
(or that has no inputs, like `iota`) is evaluated with the reference
interpreter and its outputs become constants. The output Values keep their
identity, so every use and every graph output still refers to them; a folded
graph output stays an output, now a constant. Folding in order makes chains
fold in one run (a Shape-like constant -> gather -> concatenate -> convert).

Leaves alone:
- anything that depends on a graph input;
- bloat: a node whose result has more elements than max(1024, its largest
  constant input). Broadcasting a scalar to an activation-sized tensor stays
  an op: the kernel does it for free, the engine file would not;
- duplication: an index-math op (transpose, reshape, slice...) of a large
  constant that stays in the graph anyway (a graph output, or read by a node
  with a run-time input). Folding it would store the weight twice (GPT-2's
  tied embedding: a gather reads the table, the LM head its transpose, +147
  MiB); as an op it is index math in the consumer's loads;
- a node the reference fails on (e.g. an out-of-range gather index): the
  error belongs to run time, not to the compiler.

Constants that only fed folded nodes become dead; `dce` removes them.
"""
from __future__ import annotations

import numpy as np

from aotc.ir import ops
from aotc.ir.dims import contains_dims
from aotc.ir.graph import Graph
from aotc.ir.interpreter import evaluate_node

MIN_FOLD_LIMIT = 1024   # elements; results up to this size always fold


def _fold(node, env, live_after) -> list[np.ndarray] | None:
    """The node's folded outputs, or None where it must stay an op."""
    if not all(v in env for v in node.inputs):
        return None
    if not all(v.type.is_static for v in node.outputs) or contains_dims(node.attrs):
        return None       # a size known only at run time
    largest_input = max((env[v].size for v in node.inputs), default=0)
    if any(v.type.size > max(MIN_FOLD_LIMIT, largest_input) for v in node.outputs):
        return None
    if ops.category(node.op) == ops.INJECTIVE and any(
            v.type.size > MIN_FOLD_LIMIT and v in live_after for v in node.inputs):
        return None
    try:
        with np.errstate(all="ignore"):
            results = evaluate_node(node.op, node.attrs, [env[v] for v in node.inputs])
    except (ArithmeticError, IndexError, ValueError):
        # The reference rejects these values; keep the op so the error stays a run-time one.
        return None
    out = []
    for v, r in zip(node.outputs, results):
        if r.shape != v.shape:
            return None   # stale types: infer-shapes must run first, not our call to fix
        # np.ascontiguousarray would turn a 0-d result into shape (1,)
        out.append(np.array(r, dtype=v.dtype.np, order="C"))
    return out


def _kept_alive(graph: Graph) -> set:
    """Constant-valued values that stay in the graph after folding: a graph output, or read by a
    node with a run-time input (a gather's table, say). Copying one of them (a transpose of
    it) would store its bytes twice; the slices of a table only constant nodes read do not."""
    const = set(graph.constants)
    for n in graph.nodes:
        if all(v in const for v in n.inputs):
            const.update(n.outputs)
    alive = {v for v in graph.outputs if v in const}
    for n in graph.nodes:
        if not all(v in const for v in n.inputs):
            alive.update(v for v in n.inputs if v in const)
    return alive


def run(graph: Graph) -> Graph:
    """A new Graph with every foldable node replaced by constants."""
    env = dict(graph.constants)
    nodes = []
    live_after = _kept_alive(graph)
    for n in graph.nodes:
        folded = _fold(n, env, live_after)
        if folded is None:
            nodes.append(n)
            continue
        env.update(zip(n.outputs, folded))
    return graph.with_nodes(nodes, constants=env)
