"""precision: run an f32 graph in f16 or bf16, keeping the numerically fragile parts in f32.

`make(dtype, keep_fp32)` returns the pass for `--precision fp16|bf16` and
`--keep-fp32 NAME,...`. The graph's signature does not change: f32 inputs are
converted on entry and f32 outputs converted back on exit, so a caller feeds
and reads the same arrays as with the f32 engine.

Guarantees:
- every f32 constant read by a low-precision node is stored in the low dtype
  (halving weight bytes), every f32 activation is computed and stored in it;
- dot_general and convolution read low-precision operands and accumulate in
  f32 (the op table's reference and the kernels accumulate in float), so
  only their inputs and results are rounded;
- the reductions that norms and softmax are made of stay f32 (the TensorRT
  LayerNorm overflow): a float `reduce` of kind sum or prod, the
  elementwise ops that feed it exclusively (x*x of a variance: a d of 300
  squares to 90000, past f16's 65504), and the elementwise / reshape ops that
  only read such f32 results (var / n + eps -> rsqrt) run in f32. The f32
  result is converted back where it meets a low-precision tensor, which is
  on the small (reduced) tensor, before its broadcast;
- nodes whose `name` (the ONNX node name) is in keep_fp32 run in f32; a name
  that matches no node is an error naming the known names' count;
- integer and bool values, and values already f16/bf16, keep their dtype.

Leaves alone: the graph signature; max/min reductions (exact in any float
type); graphs already in the target precision (the pass is idempotent: a
second run converts nothing). `make("f32")` is the identity.

`make("tf32")` changes no dtype: it marks f32 GEMMs and dense convolutions
precision='tf32' so their kernels run on tensor cores (see _mark_tf32).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from aotc.errors import AotcError
from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph, Node, Value
from aotc.patterns.attention import find_attention

PRECISIONS = {"fp32": dtypes.f32, "f32": dtypes.f32, "fp16": dtypes.f16, "f16": dtypes.f16,
              "bf16": dtypes.bf16}
_SHAPE_ONLY = ("reshape", "transpose", "slice")


def _f32_nodes(graph: Graph, keep: set[str]) -> set[Node]:
    """The nodes that must compute in f32: named ones, and the reduction islands."""
    users, producer = graph.users(), graph.producers()
    island: set[Node] = set()
    for n in graph.nodes:
        if n.op == "reduce" and n.attrs["kind"] in ("sum", "prod") and n.inputs[0].dtype == dtypes.f32:
            island.add(n)
            work = [n]
            while work:      # elementwise producers read only by the island, at the reduce's input shape
                m = work.pop()
                for v in m.inputs:
                    p = producer.get(v)
                    if p is None or p in island or ops.category(p.op) != ops.ELEMENTWISE:
                        continue
                    if v.shape == n.inputs[0].shape and v not in graph.outputs and \
                            all(u in island for u in users.get(v, [])):
                        island.add(p)
                        work.append(p)
    for n in graph.nodes:    # elementwise/reshape ops reading only island results (var / n + eps, rsqrt)
        if n in island or not (ops.category(n.op) == ops.ELEMENTWISE or n.op in _SHAPE_ONLY):
            continue
        floats = [v for v in n.inputs if v.dtype == dtypes.f32 and v not in graph.constants]
        if floats and all(producer.get(v) in island for v in floats):
            island.add(n)
    # explicit upcasts (an ONNX Cast, or this pass's own on a second run) stay what they are
    # and so do casts out of f32 (they read the f32 value they convert)
    upcasts = {n for n in graph.nodes if n.op == "convert" and (n.attrs["dtype"] == "f32") !=
               (n.inputs[0].dtype == dtypes.f32)}
    # a bitcast reinterprets the bits of exactly its input's type: an f32 one reads f32
    bitcasts = {n for n in graph.nodes if n.op == "bitcast_convert"}
    return island | upcasts | bitcasts | {n for n in graph.nodes if n.name in keep}


def _emit(rw: Rewriter, n: Node, ins: list[Value], attrs: dict) -> tuple[Value, ...]:
    """Re-emit `n` on new inputs; outputs keep their Value when their type is unchanged."""
    if tuple(ins) == n.inputs and attrs == n.attrs:
        return rw.keep(n).outputs
    types = ops.infer_types(n.op, attrs, [v.type for v in ins], n.name)
    outs = tuple(o if o.type == t else Value(rw.fresh(f"{o.name}.{t.dtype.name}"), t)
                 for o, t in zip(n.outputs, types))
    node = Node(n.op, tuple(ins), outs, attrs, n.name)
    rw.nodes.append(node)
    rw.made.update((o, node) for o in outs)
    rw._node_outputs.update(outs)
    return outs


def _saturate(a: np.ndarray, dt) -> np.ndarray:
    """A constant in `dt`, finite values beyond its range clamped to its largest finite value.

    Exporters write masks as float32's lowest value (transformers' finfo(float32).min);
    rounding that to f16 or bf16 gives -inf, and a fully masked row then softmaxes to NaN
    where the model gives a uniform row. TensorRT clamps out-of-range weights the same way.
    """
    big = float(ml_dtypes.finfo(dt.np).max)
    a = np.asarray(a)
    if np.issubdtype(a.dtype, np.floating):
        a = np.where(np.isfinite(a), np.clip(a, -big, big), a)
    return a.astype(dt.np)


def _convert_graph(graph: Graph, low, keep: set[str]) -> Graph:
    forced = _f32_nodes(graph, keep)
    rw = Rewriter(graph)
    f32 = dtypes.f32
    versions: dict[Value, dict] = {v: {f32: v} for v in graph.inputs if v.dtype == f32}

    def get(v: Value, dt) -> Value:
        """`v` (an original f32 Value) in dtype `dt`, converting once and reusing."""
        if v.dtype != f32:
            return v
        have = versions.setdefault(v, {})
        if dt not in have:
            if v in graph.constants:
                have[dt] = v if dt == f32 else rw.constant(_saturate(graph.constants[v], dt), f"{v.name}.{dt.name}", dt)
            else:
                have[dt] = rw.add("convert", next(iter(have.values())), hint=f"{v.name}.{dt.name}", dtype=dt.name)
        return have[dt]

    for n in graph.nodes:
        dt = f32 if n in forced else low
        attrs = dict(n.attrs)
        if n.op in ("convert", "iota") and attrs["dtype"] == "f32":
            attrs["dtype"] = dt.name
        outs = _emit(rw, n, [get(v, dt) for v in n.inputs], attrs)
        for o, new in zip(n.outputs, outs):
            if o.dtype == f32:
                versions[o] = {new.dtype: new}
    for v in graph.outputs:    # the signature stays f32: convert back
        if v.dtype == f32 and v in versions and f32 not in versions[v]:
            low_v = next(iter(versions[v].values()))
            rw.add("convert", low_v, name=rw.made[low_v].name, out=v, dtype="f32")
            versions[v][f32] = v
    out = rw.finish()
    out.constants = {v: a for v, a in out.constants.items()
                     if v not in graph.constants or f32 in versions.get(v, {f32: v}) or v in graph.outputs}
    return out


def _mark_tf32(graph: Graph, keep: set[str]) -> Graph:
    """f32 GEMMs and dense convolutions take precision='tf32': tensor cores, f32 everywhere else.

    Grouped and depthwise convolutions keep full f32: they are memory-bound, so
    tf32 would cost accuracy for no speed. So do the two GEMMs of an attention
    pattern: the flash-attention kernel multiplies unnormalized, rescaled
    probabilities, which no rounding of the op's operands describes; every
    attention pattern keeps them, whichever kernel runs it, so the numerics do
    not hang on a kernel's head-size limit. The op
    table defines what tf32 means (operands rounded to tf32, f32
    accumulation), so the interpreter and every kernel agree on the result.
    """
    attention = {n for m in find_attention(graph).values() for n in (m.qk, m.pv)}
    nodes = []
    for n in graph.nodes:
        dense = n.op == "dot_general" or (n.op == "convolution" and n.attrs["groups"] == 1)
        if dense and n.inputs[0].dtype == dtypes.f32 and n.name not in keep and n not in attention:
            n = Node(n.op, n.inputs, n.outputs, dict(n.attrs, precision="tf32"), n.name)
        nodes.append(n)
    return graph.with_nodes(nodes)


def make(precision: str = "fp32", keep_fp32=()):
    """The precision pass for `precision` ('fp32', 'tf32', 'fp16', 'bf16'), keeping `keep_fp32` names in f32."""
    if precision not in PRECISIONS and precision != "tf32":
        raise AotcError(f"unknown precision '{precision}'; supported: fp32, tf32, fp16, bf16")
    low = PRECISIONS.get(precision, dtypes.f32)
    keep = {k.strip() for k in keep_fp32 if k.strip()}

    def run(graph: Graph) -> Graph:
        if low == dtypes.f32 and precision != "tf32":
            return graph.with_nodes(graph.nodes)
        names = {n.name for n in graph.nodes}
        unknown = sorted(keep - names)
        if unknown:
            raise AotcError(f"--keep-fp32 names {', '.join(unknown)}, which match no node "
                            f"(the graph has {len(names)} node names; see --dump-passes)")
        if precision == "tf32":
            return _mark_tf32(graph, keep)
        return _convert_graph(graph, low, keep)
    return run


def run(graph: Graph) -> Graph:
    """The registered default: fp32, the identity (the pipeline builds the configured pass)."""
    return make("fp32")(graph)
