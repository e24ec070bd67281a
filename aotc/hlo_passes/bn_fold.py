"""bn-fold: fold per-channel scales and shifts into the weights of a conv or matmul.

The ONNX importer turns BatchNormalization (constant statistics) into
`y * s + t` with per-channel constants; Gemm's alpha is `y * alpha`; a conv
bias is `y + b`. After a convolution or a matmul with constant weights, such a
chain of per-output-channel multiplies, adds and subtracts is one affine map
`y * S + T`, and `conv(x, W) * S == conv(x, W * S)` (S scales output channel o,
so it scales weight row o). So:

    conv(x, W) -> add(b) -> mul(s) -> add(t)   ==>   conv(x, W * s) -> add(b * s + t)

Guarantees: for each convolution (NCHW or NHWC) and each dot_general whose
rhs is a constant with exactly one free dim (the last result dim, a Linear
layer), the longest chain of single-use mul/add/sub nodes whose other operand
is constant along every dim but the output-channel dim becomes new weights
(when the chain multiplies) and at most one add of a per-channel constant
(when the shift is not all zeros). The chain's last Value keeps its identity,
so its users and graph outputs are untouched; new nodes take the name of the
node they replace (the ONNX node name, which --keep-fp32 matches).

The result is equal to the unfolded graph up to rounding: W * S rounds once
per weight where the unfolded graph rounded once per output (f32 weights are
scaled in f32 by S rounded to f32: one ulp from the f64 product at most, see
scaled_weights); tests compare with rtol 1e-5. Exact when S is all ones (bias
merging only).

Leaves alone: int8/fp8 anchors (`out_dtype`: their scale epilogue stays an
epilogue), chains through a value with several users or that is a graph
output (the intermediate is observable), non-constant weights, weights shared
by several convs/matmuls (folding would change the other user), per-element
(not per-channel) constants, and a lone bias add (nothing to merge).
"""
from __future__ import annotations

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import ops
from aotc.ir.graph import Graph, Node, Value


def _channel_axes(n: Node) -> tuple[int, int] | None:
    """(output channel axis, weight channel axis) of a foldable anchor, else None."""
    if n.attrs.get("out_dtype"):     # int8/fp8 weights: scaling them would requantize, and lose, the weights
        return None
    if n.op == "convolution":
        last = n.attrs.get("layout", "NCHW") == "NHWC"
        return (n.outputs[0].type.rank - 1 if last else 1), 0
    if n.op == "dot_general":
        lhs, rhs = n.inputs
        _, rf = ops.dot_free_dims(n.attrs, lhs.type.rank, rhs.type.rank)
        if len(rf) == 1 and not n.attrs["rhs_batch"]:
            return n.outputs[0].type.rank - 1, rf[0]
    return None


def _per_channel(v: Value, axis: int, graph: Graph, producer) -> np.ndarray | None:
    """The (C,) vector `v` holds along `axis` when it is constant elsewhere, else None."""
    c_dim = v.shape[axis]
    if v in graph.constants:
        a = np.moveaxis(graph.constants[v], axis, 0).reshape(c_dim, -1)
        return a[:, 0].astype(np.float64) if np.all(a == a[:, :1]) else None
    p = producer.get(v)
    if p is None or p.op != "broadcast_in_dim" or p.inputs[0] not in graph.constants:
        return None
    c = graph.constants[p.inputs[0]]
    dims = p.attrs["broadcast_dimensions"]
    if any(size > 1 and d != axis for size, d in zip(c.shape, dims)):
        return None
    flat = c.reshape(-1).astype(np.float64)
    return np.full(c_dim, flat[0]) if flat.size == 1 else flat


def _chain(anchor: Node, axis: int, graph: Graph, users, producer, outputs):
    """Walk the affine chain below `anchor`: (nodes, S, T)."""
    c_dim = anchor.outputs[0].shape[axis]
    scale, shift = np.ones(c_dim), np.zeros(c_dim)
    nodes = []
    v = anchor.outputs[0]
    while v not in outputs and len(users.get(v, [])) == 1:
        n = users[v][0]
        if n.op not in ("mul", "add", "sub") or len(set(n.inputs)) != 2:
            break
        other = n.inputs[1] if n.inputs[0] is v else n.inputs[0]
        vec = _per_channel(other, axis, graph, producer)
        if vec is None or (n.op == "sub" and n.inputs[0] is not v):
            break
        if n.op == "mul":
            scale, shift = scale * vec, shift * vec
        elif n.op == "add":
            shift = shift + vec
        else:
            shift = shift - vec
        nodes.append(n)
        v = n.outputs[0]
    return nodes, scale, shift


_F32 = np.finfo(np.float32)


def scaled_weights(w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """`w * scale` in w's dtype: one f32 multiply per weight for f32 weights, else through f64.

    The chain's scale S is accumulated in f64, so f32 weights get round(w * round32(S)) where
    f64 would give round(w * S): at most one ulp apart, and ResNet-50's 100 MB of weights
    fold in one pass instead of three (widen, multiply, narrow). Only where every S is a
    normal f32 or zero, so rounding S loses no more than half an ulp; otherwise f64.
    """
    if w.dtype != np.float32:
        return w.astype(np.float64) * scale
    mag = np.abs(scale)
    if not np.all(np.isfinite(scale) & ((mag == 0) | ((mag >= _F32.tiny) & (mag <= _F32.max)))):
        return w.astype(np.float64) * scale
    return w * scale.astype(np.float32)


def run(graph: Graph) -> Graph:
    """A new Graph with affine per-channel chains folded into conv/matmul weights."""
    users, producer, outputs = graph.users(), graph.producers(), set(graph.outputs)
    weight_uses = {}
    for n in graph.nodes:
        for v in n.inputs:
            weight_uses[v] = weight_uses.get(v, 0) + 1
    plans: dict[Node, tuple] = {}
    for n in graph.nodes:
        axes = _channel_axes(n)
        if axes is None or not n.outputs[0].dtype.is_float:
            continue
        w = n.inputs[1]
        if w not in graph.constants or weight_uses[w] != 1:
            continue
        chain, scale, shift = _chain(n, axes[0], graph, users, producer, outputs)
        if not chain or (len(chain) == 1 and chain[0].op != "mul"):
            continue
        plans[n] = (axes, chain, scale, shift)
    if not plans:
        return graph.with_nodes(graph.nodes)
    rw = Rewriter(graph)
    dropped = {c for _, chain, _, _ in plans.values() for c in chain}
    for n in graph.nodes:
        if n in dropped:
            continue
        if n not in plans:
            rw.keep(n)
            continue
        (out_axis, w_axis), chain, scale, shift = plans[n]
        x, w = n.inputs
        wa = graph.constants[w]
        shape = [1] * wa.ndim
        shape[w_axis] = -1
        w2 = rw.constant(scaled_weights(wa, scale.reshape(shape)), f"{w.name}.folded", w.dtype)
        last = chain[-1].outputs[0]
        has_shift = bool(np.any(shift != 0))
        y = rw.add(n.op, x, w2, name=n.name, hint=n.outputs[0].name, out=None if has_shift else last, **n.attrs)
        if has_shift:
            t = rw.constant(shift, f"{chain[-1].name or 'bias'}.shift", last.dtype)
            tb = rw.add("broadcast_in_dim", t, name=chain[-1].name, shape=last.shape,
                        broadcast_dimensions=(out_axis,))
            rw.add("add", y, tb, name=chain[-1].name, out=last)
    return rw.finish()
