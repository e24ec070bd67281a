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
- spreading: a broadcast that grows a constant whose result reaches a node
  with a run-time input (directly or through other constant elementwise or
  index-math nodes). A per-channel scale broadcast over an activation stays a
  vector the kernel indexes; folded, every kernel reading it would load a
  full activation-sized tensor (a quantized conv's epilogue read ten of them);
- a node the reference fails on (e.g. an out-of-range gather index): the
  error belongs to run time, not to the compiler.

Constants that only fed folded nodes become dead; `dce` removes them.
"""
from __future__ import annotations

import numpy as np

from aotc.ir import ops
from aotc.ir.dims import contains_dims
from aotc.ir.graph import Graph, Node, TensorType, Value
from aotc.ir.interpreter import evaluate_node

MIN_FOLD_LIMIT = 1024   # elements; results up to this size always fold


def _fold(node, env, live_after, spread_to_runtime) -> list[np.ndarray] | None:
    """The node's folded outputs, or None where it must stay an op."""
    if not all(v in env for v in node.inputs):
        return None
    if not all(v.type.is_static for v in node.outputs) or contains_dims(node.attrs):
        return None       # a size known only at run time
    if node.op == "broadcast_in_dim" and node.outputs[0] in spread_to_runtime \
            and node.outputs[0].type.size > node.inputs[0].type.size:
        return None
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


def _constant_valued(graph: Graph) -> set:
    """Values computed from constants only (what folding could evaluate, size limits aside)."""
    const = set(graph.constants)
    for n in graph.nodes:
        if all(v in const for v in n.inputs):
            const.update(n.outputs)
    return const


def _read_at_run_time(graph: Graph, const: set) -> set:
    """Constant-valued values read by a node with a run-time input."""
    return {v for n in graph.nodes if not all(u in const for u in n.inputs) for v in n.inputs if v in const}


def _kept_alive(graph: Graph) -> set:
    """Constant-valued values that stay in the graph after folding: a graph output, or read by a
    node with a run-time input (a gather's table, say). Copying one of them (a transpose of
    it) would store its bytes twice; the slices of a table only constant nodes read do not."""
    const = _constant_valued(graph)
    return {v for v in graph.outputs if v in const} | _read_at_run_time(graph, const)


def _spread_to_runtime(graph: Graph) -> set:
    """Constant-valued values that reach a node with a run-time input, directly or through constant-only
    elementwise or index-math nodes (the ones a kernel would compute from their inputs in its loads)."""
    reach = _read_at_run_time(graph, _constant_valued(graph))
    for n in reversed(graph.nodes):
        if any(v in reach for v in n.outputs) and ops.category(n.op) in (ops.ELEMENTWISE, ops.INJECTIVE):
            reach.update(n.inputs)
    return reach


def _small_operand(v, env, spread_from, rank):
    """(array at the output's rank, size-1 on the axes it is broadcast along) for an operand that is a
    kept broadcast of a constant, or a constant (0-d or of the output's rank); None otherwise."""
    b = spread_from.get(v)
    if b is not None:
        src = env[b.inputs[0]]
        shape = [1] * rank
        for i, d in enumerate(b.attrs["broadcast_dimensions"]):
            shape[d] = src.shape[i]
        return src.reshape(shape)
    if v in env and env[v].ndim in (0, rank):
        return env[v]
    return None


def _elementwise_of_spread(n: Node, env, spread_from) -> Node | np.ndarray | None:
    """An elementwise node of kept broadcasts (and constants), computed on the small operands and
    broadcast once: the splat `convert(broadcast(zero_point))` becomes `broadcast(convert(zero_point))`.
    Where another operand is a constant of the full shape, the node simply folds (the array)."""
    if ops.category(n.op) != ops.ELEMENTWISE or len(n.outputs) != 1 or not n.inputs:
        return None
    out = n.outputs[0]
    if not out.type.is_static or not any(v in spread_from for v in n.inputs):
        return None
    rank = out.type.rank
    small = [_small_operand(v, env, spread_from, rank) for v in n.inputs]
    if any(a is None for a in small):
        return None
    small = [np.reshape(a, (1,) * rank) if a.ndim == 0 else a for a in small]
    full = np.broadcast_shapes(*(a.shape for a in small))
    try:
        with np.errstate(all="ignore"):
            (r,) = evaluate_node(n.op, n.attrs, [np.broadcast_to(a, full) for a in small])
    except (ArithmeticError, IndexError, ValueError):
        return None
    if tuple(full) == tuple(out.shape):       # folds, within the bloat limit
        if r.size > max(MIN_FOLD_LIMIT, max(a.size for a in small)):
            return None
        return np.array(r, dtype=out.dtype.np, order="C")
    keep = tuple(d for d in range(rank) if full[d] != 1)
    r = np.array(r.reshape([full[d] for d in keep]), dtype=out.dtype.np, order="C")
    src = Value(f"{out.name}_small", TensorType(tuple(r.shape), out.dtype))
    env[src] = r
    return Node("broadcast_in_dim", (src,), (out,), {"shape": tuple(out.shape), "broadcast_dimensions": keep},
                name=n.name)


def run(graph: Graph) -> Graph:
    """A new Graph with every foldable node replaced by constants."""
    env = dict(graph.constants)
    nodes = []
    live_after = _kept_alive(graph)
    spread = _spread_to_runtime(graph)
    spread_from = {}       # value -> the kept broadcast of a constant that computes it
    for n in graph.nodes:
        folded = _fold(n, env, live_after, spread)
        if folded is not None:
            env.update(zip(n.outputs, folded))
            continue
        if n.op == "broadcast_in_dim" and n.inputs[0] in env and n.outputs[0] in spread:
            spread_from[n.outputs[0]] = n
        else:
            moved = _elementwise_of_spread(n, env, spread_from) if n.outputs[0] in spread else None
            if isinstance(moved, np.ndarray):
                env[n.outputs[0]] = moved
                continue
            if moved is not None:
                n = moved
                spread_from[n.outputs[0]] = n
        nodes.append(n)
    return graph.with_nodes(nodes, constants=env)
