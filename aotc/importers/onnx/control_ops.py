"""ONNX control flow that static shapes allow: If, Loop and Scan, resolved at import time.

aotc engines have no data-dependent control flow, so subgraphs are inlined:
- If: a condition known at import time (a constant, or computed from
  constants as in exported models that branch on a static shape) selects the
  branch whose nodes are converted inline.
- Scan: the sequence length is a static dimension, so the body is converted
  once per step with that step's slices bound, the state carried from step to
  step, and the per-step outputs stacked.
- Loop: unrolled when the trip count is known at import time and the
  condition is absent or computable at import time after every iteration;
  data-dependent termination raises an error naming the node.
Bodies read outer-scope values by name; each inlined copy gets a fresh scope,
so the same body names bind new Values per iteration. Unrolling stops at
MAX_UNROLL iterations to keep graphs (and compile times) sane.
"""
from __future__ import annotations

import numpy as np
from onnx import GraphProto, numpy_helper

from aotc.importers.onnx.ops import CHECKS, CONVERTERS, norm_axis, register, reshape
from aotc.ir.graph import Value

MAX_UNROLL = 1024
_DEFAULT_DOMAINS = ("", "ai.onnx")


def _graph_problems(graph, opset: int, outer_dtype_of) -> list[str]:
    """Why nodes of `graph` (and of its nested subgraphs) cannot convert: no converter, or their check."""
    from aotc.importers.onnx.importer import ONNX_DTYPES, _attr_value
    elem = {t.name: t.data_type for t in graph.initializer}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type"):
            elem[vi.name] = vi.type.tensor_type.elem_type

    def dtype_of(name):
        return ONNX_DTYPES.get(elem[name]) if name in elem else outer_dtype_of(name)

    problems = []
    for node in graph.node:
        if node.domain not in _DEFAULT_DOMAINS or node.op_type not in CONVERTERS:
            problems.append(f"{node.op_type} (no converter)")
            continue
        at = {a.name: _attr_value(a) for a in node.attribute}
        reason = CHECKS[node.op_type](at, node, opset, dtype_of) if node.op_type in CHECKS else None
        if reason:
            problems.append(f"{node.op_type} ({reason})")
    return problems


def _check_bodies(at, node, opset, dtype_of):
    """Pre-scan: report subgraph nodes that cannot convert before converting anything."""
    problems = []
    for v in at.values():
        for g in (v if isinstance(v, list) else [v]):
            if isinstance(g, GraphProto):
                problems += [p for p in _graph_problems(g, opset, dtype_of) if p not in problems]
    if problems:
        return f"its subgraph has nodes aotc cannot convert: {'; '.join(problems)}"
    return None


def _inliner(ctx, graph):
    """A function converting `graph` inline on argument Values, returning its output Values."""
    from aotc.importers.onnx.importer import ONNX_DTYPES, convert_nodes
    outer = ctx.env
    inits = {t.name: ctx.b.constant(numpy_helper.to_array(t), name=t.name, dtype=ONNX_DTYPES[t.data_type])
             for t in graph.initializer}

    def run(args: list[Value]) -> list[Value]:
        if len(args) != len(graph.input):
            raise ctx.model_error(f"subgraph '{graph.name}' has {len(graph.input)} inputs, "
                                  f"but {len(args)} values are bound to them")
        env = {**outer, **inits}
        for vi, v in zip(graph.input, args):
            _check_bound(ctx, vi, v)
            env[vi.name] = v
        convert_nodes(ctx, graph.node, env, {})
        missing = [o.name for o in graph.output if o.name not in env]
        if missing:
            raise ctx.model_error(f"subgraph '{graph.name}' outputs {missing} are never defined")
        return [env[o.name] for o in graph.output]
    return run


def _check_bound(ctx, vi, v: Value) -> None:
    """A Value bound to a subgraph input must fit the type the subgraph declares (where it does)."""
    from aotc.importers.onnx.importer import ONNX_DTYPES, dtype_name
    if not vi.type.HasField("tensor_type"):
        return
    tt = vi.type.tensor_type
    want = ONNX_DTYPES.get(tt.elem_type)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    bad_dtype = want is not None and want != v.dtype
    bad_shape = tt.HasField("shape") and (len(dims) != v.type.rank or
                                           any(d is not None and d != s for d, s in zip(dims, v.shape)))
    if bad_dtype or bad_shape:
        raise ctx.model_error(f"subgraph input '{vi.name}' is declared {dtype_name(tt.elem_type)}{dims} "
                              f"but receives {v.type}")


def _take(ctx, v: Value, axis: int, k: int) -> Value:
    """v[k] along `axis` (the axis dropped)."""
    start = tuple(k if a == axis else 0 for a in range(v.type.rank))
    limit = tuple(k + 1 if a == axis else d for a, d in enumerate(v.shape))
    s = ctx.add("slice", v, start=start, limit=limit, stride=(1,) * v.type.rank)
    return reshape(ctx, s, v.shape[:axis] + v.shape[axis + 1:])


def _stack(ctx, vs: list[Value], axis: int, what: str) -> Value:
    """Stack per-iteration values along a new axis; they must agree in type."""
    if len({v.type for v in vs}) != 1:
        raise ctx.fail(f"{what} changes type across iterations ({', '.join(sorted({str(v.type) for v in vs}))})")
    parts = [reshape(ctx, v, v.shape[:axis] + (1,) + v.shape[axis:]) for v in vs]
    return parts[0] if len(parts) == 1 else ctx.add("concatenate", *parts, dimension=axis)


def _static_bool(ctx, v: Value, what: str) -> bool:
    """A condition's value at import time; the error names the model input it depends on otherwise."""
    return bool(np.asarray(ctx.static(v, what)).reshape(-1)[0])


# ------------------------------------------------------------------ If

@register("If", check=_check_bodies)
def _if(ctx, ins, at):
    taken = _static_bool(ctx, ins[0], "the condition (aotc folds If only when the condition is a constant)")
    branch = at["then_branch"] if taken else at["else_branch"]
    return _inliner(ctx, branch)([])


# ------------------------------------------------------------------ Scan

def _per_input(at: dict, name: str, count: int) -> list[int]:
    values = list(at.get(name) or [])
    return values + [0] * (count - len(values))


def _scan_unrolled(ctx, run, states, xs, axes, reverse, out_axes, out_reverse):
    """Unroll one scan over xs (sliced on `axes`); returns final states + stacked scan outputs."""
    steps = {x.shape[a] for x, a in zip(xs, axes)}
    if len(steps) != 1:
        raise ctx.model_error(f"scan inputs have different sequence lengths {sorted(steps)}")
    n, length = len(states), steps.pop()
    if length > MAX_UNROLL:
        raise ctx.fail(f"sequence length {length} exceeds the unrolling cap of {MAX_UNROLL} steps "
                       "(aotc unrolls Scan at import time)")
    if length == 0 and out_axes:
        raise ctx.fail("a zero-length scan with scan outputs is not supported")
    per_step = []
    for t in range(length):
        res = run(list(states) + [_take(ctx, x, a, length - 1 - t if r else t) for x, a, r in zip(xs, axes, reverse)])
        if len(res) != n + len(out_axes):
            raise ctx.model_error(f"the body has {len(res)} outputs, expected {n + len(out_axes)}")
        states, ys = res[:n], res[n:]
        per_step.append(ys)
    outs = []
    for j, (axis, rev) in enumerate(zip(out_axes, out_reverse)):
        ys = [step[j] for step in (per_step[::-1] if rev else per_step)]
        outs.append(_stack(ctx, ys, norm_axis(ctx, axis, ys[0].type.rank + 1), f"scan output {j}"))
    return list(states) + outs


@register("Scan", check=_check_bodies)
def _scan(ctx, ins, at):
    body, m = at["body"], at["num_scan_inputs"]
    if ctx.opset < 9:
        return _scan8(ctx, ins, at)
    n = len(ins) - m
    k = len(body.output) - n
    states, xs = ins[:n], ins[n:]
    axes = [norm_axis(ctx, a, x.type.rank) for a, x in zip(_per_input(at, "scan_input_axes", m), xs)]
    return _scan_unrolled(ctx, _inliner(ctx, body), states, xs, axes,
                          _per_input(at, "scan_input_directions", m),
                          _per_input(at, "scan_output_axes", k), _per_input(at, "scan_output_directions", k))


def _scan8(ctx, ins, at):
    """Opset 8: batch axis 0, scan axis 1, optional sequence_lens; unrolled per batch entry."""
    body, m = at["body"], at["num_scan_inputs"]
    lens, values = ins[0], ins[1:]
    n = len(values) - m
    k = len(body.output) - n
    states, xs = values[:n], values[n:]
    batch, steps = xs[0].shape[0], xs[0].shape[1]
    if lens is not None:
        known = ctx.static_ints(lens, "sequence_lens")
        if any(x != steps for x in known):
            raise ctx.fail(f"sequence_lens {known} shorter than the sequence length {steps} are not supported")
    if batch * steps > MAX_UNROLL:
        raise ctx.fail(f"batch x sequence length {batch * steps} exceeds the unrolling cap of {MAX_UNROLL} "
                       "steps (aotc unrolls Scan at import time)")
    run = _inliner(ctx, body)
    rows = [_scan_unrolled(ctx, run, [_take(ctx, s, 0, b) for s in states], [_take(ctx, x, 0, b) for x in xs],
                           [0] * m, _per_input(at, "directions", m), [0] * k, [0] * k) for b in range(batch)]
    return [_stack(ctx, [r[i] for r in rows], 0, f"output {i}") for i in range(n + k)]


# ------------------------------------------------------------------ Loop

_COND = "the condition (Loop is unrolled at import time; data-dependent termination is not supported)"


@register("Loop", check=_check_bodies)
def _loop(ctx, ins, at):
    body = at["body"]
    trip, cond, carried = ins[0], (ins[1] if len(ins) > 1 else None), list(ins[2:])
    n = len(carried)
    k = len(body.output) - 1 - n
    trips = None if trip is None else int(np.asarray(ctx.static(trip, "trip count M")).reshape(-1)[0])
    if cond is None and (trips is None or trips > MAX_UNROLL):
        raise ctx.fail(f"trip count {'absent' if trips is None else trips} without a condition: more "
                       f"iterations than the unrolling cap of {MAX_UNROLL} (aotc unrolls Loop at import time)")
    go = True if cond is None else _static_bool(ctx, cond, _COND)
    cond_in = ctx.const(np.array(True)) if cond is None else cond
    run = _inliner(ctx, body)
    per_iter, i = [], 0
    while go and (trips is None or i < trips):
        if i == MAX_UNROLL:
            raise ctx.fail(f"the loop runs past the unrolling cap of {MAX_UNROLL} iterations "
                           "(aotc unrolls Loop at import time)")
        res = run([ctx.const(np.array(i, np.int64)), cond_in] + carried)
        cond_in, carried = res[0], res[1:1 + n]
        per_iter.append(res[1 + n:])
        if cond is not None:
            go = _static_bool(ctx, cond_in, _COND)
        i += 1
    if k and not per_iter:
        raise ctx.fail("a loop of zero iterations with scan outputs is not supported "
                       "(their shape comes from a body that never runs)")
    return carried + [_stack(ctx, [step[j] for step in per_iter], 0, f"scan output {j}") for j in range(k)]
