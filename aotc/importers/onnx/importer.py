"""ONNX importer: an ONNX model (proto, file path or bytes) to an aotc Graph.

The flow is load -> onnx.checker -> strict shape inference -> static input
shapes (`input_shapes` fixes symbolic dims) -> a pre-scan that reports every
unsupported node, attribute value and dtype in ONE UnsupportedError -> node
by node conversion through the converter table (ops.py, nn_ops.py, ...).

aotc's shapes are static, so the tensors ONNX uses to carry shapes
(Reshape's shape, Slice's starts, Unsqueeze's axes, ...) are evaluated at
import time: a converter calls `ctx.static(value)`, which runs the producing
sub-graph through the reference interpreter when all its leaves are
constants. The shape nodes stay in the graph; constant folding and DCE
remove them.

To support a new op, add a converter to the table (see ops.py).
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from aotc.errors import ModelError, UnsupportedError, VerifyError
from aotc.importers.onnx import (control_ops, image_ops, index_ops, math_ops,  # noqa: F401
                                 nn_more_ops, nn_ops, resize, rnn_ops, shape_ops,
                                 signal_ops, text_ops)  # (imported to register their converters)
from aotc.importers.onnx.checks import check_model, load_model
from aotc.importers.onnx.functions import MAX_ROUNDS, expand_functions
from aotc.importers.onnx.ops import CHECKS, CONVERTERS
from aotc.importers.dynamic import resolve_ranges
from aotc.importers.static_values import StaticValues
from aotc.ir import dims as D
from aotc.ir import dtypes
from aotc.ir.dims import dim_ranges
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, GraphBuilder, Value

ONNX_DTYPES: dict[int, DType] = {
    TensorProto.FLOAT: dtypes.f32, TensorProto.FLOAT16: dtypes.f16, TensorProto.BFLOAT16: dtypes.bf16,
    TensorProto.INT64: dtypes.i64, TensorProto.INT32: dtypes.i32, TensorProto.INT8: dtypes.i8,
    TensorProto.UINT8: dtypes.u8, TensorProto.BOOL: dtypes.boolean,
    TensorProto.DOUBLE: dtypes.f64, TensorProto.INT16: dtypes.i16, TensorProto.UINT16: dtypes.u16,
    TensorProto.UINT32: dtypes.u32, TensorProto.UINT64: dtypes.u64,
    TensorProto.FLOAT8E4M3FN: dtypes.f8e4m3fn, TensorProto.FLOAT8E5M2: dtypes.f8e5m2,
    TensorProto.FLOAT8E4M3FNUZ: dtypes.f8e4m3fnuz, TensorProto.FLOAT8E5M2FNUZ: dtypes.f8e5m2fnuz,
    # numpy_helper.to_array unpacks ONNX's packed int4/int2/float4 into ml_dtypes' one per byte
    TensorProto.INT4: dtypes.i4, TensorProto.UINT4: dtypes.u4, TensorProto.INT2: dtypes.i2,
    TensorProto.UINT2: dtypes.u2, TensorProto.FLOAT4E2M1: dtypes.f4e2m1fn,
    TensorProto.FLOAT8E8M0: dtypes.f8e8m0fnu,
}
_DEFAULT_DOMAINS = ("", "ai.onnx")


def dtype_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


def import_onnx(model: onnx.ModelProto | str | bytes | os.PathLike,
                input_shapes: dict[str, tuple] | None = None, dynamic: dict | None = None) -> Graph:
    """Convert an ONNX model to a Graph; `input_shapes` fixes symbolic input dims by name.

    A dim left symbolic stays a dynamic dim named by its `dim_param` (an unnamed one:
    `<input>_dim<i>`); `dynamic` gives each its range (name -> (min, max[, divisor])).
    """
    model, weights = _split_large_initializers(load_model(model))
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # the checker raises several exception types
        raise ModelError(f"ONNX checker rejected the model: {_one_line(e)}") from None
    model = _inline_local_functions(model)
    model = _fix_input_shapes(model, input_shapes or {})
    ranges = resolve_ranges(_input_dims(model), dynamic or {})
    check_model(model)
    _spell_out_defaults(model)
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:
        # ONNX's inference of a few ops fails on valid models (MeanVarianceNormalization infers its
        # function body without binding the body's attribute references): fall back to the
        # non-strict result; aotc's own type rules check every converted node anyway
        try:
            model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False, data_prop=True)
        except Exception:
            raise ModelError(f"ONNX shape inference failed: {_one_line(e)}") from None
    opsets = {o.domain: o.version for o in model.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx", 1))
    for _ in range(MAX_ROUNDS):
        model, expanded = expand_functions(model, opset, CONVERTERS)
        if not expanded:
            break
        try:
            model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        except Exception as e:
            raise ModelError(f"ONNX shape inference failed after expanding {expanded}: {_one_line(e)}") from None
    _prescan(model, opsets, opset)
    with dim_ranges(ranges):
        graph = _convert(model, opset, weights)
    graph.dims = ranges
    return graph


def _spell_out_defaults(model: onnx.ModelProto) -> None:
    """Write attribute defaults that onnx's shape inference gets wrong into the nodes.

    STFT's `onesided` defaults to 1 in the spec, onnxruntime and the reference,
    but onnx 1.23's shape inference assumes 0 when it is absent and infers a
    full-spectrum output shape, which aotc's cross-check would then reject.
    """
    for node in model.graph.node:
        if node.op_type == "STFT" and node.domain in ("", "ai.onnx") and \
                not any(a.name == "onesided" for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute("onesided", 1))


def _inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Calls to the model's own functions replaced by their bodies.

    PyTorch's dynamo exporter (torch 2.1-2.4) and onnxscript write each module
    as a model-local function in a custom domain (`pkg.torch...`); their nodes
    are plain ONNX ops once inlined. Bodies written for another opset version
    are converted to the model's.
    """
    if not model.functions:
        return model
    import onnx.inliner
    try:
        return onnx.inliner.inline_local_functions(model, convert_version=True)
    except Exception as e:
        raise ModelError(f"cannot inline the model's local functions: {_one_line(e)}") from None


LARGE_INITIALIZER = 1 << 16      # elements


def _split_large_initializers(model: onnx.ModelProto):
    """A copy whose large initializers are graph inputs of the same type, and those initializers.

    The checker and shape inference serialize the whole model (twice, 2 s for
    BERT-base's 440 MB); weights only need their types there, and no shape
    computation reads a tensor that large. The copy leaves the large tensors out
    rather than copying them and deleting them (ResNet-50: 0.15 s of 100 MB copied).
    """
    big = [t for t in model.graph.initializer if int(np.prod(t.dims, dtype=np.int64)) >= LARGE_INITIALIZER]
    if not big:
        return model, []
    names = {t.name for t in big}
    light = _copy_except(model, onnx.ModelProto(), "graph")
    _copy_except(model.graph, light.graph, "initializer")
    light.graph.initializer.extend(t for t in model.graph.initializer if t.name not in names)
    declared = {i.name for i in light.graph.input}
    light.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in big if t.name not in declared)
    return light, big


def _copy_except(src, dst, skipped: str):
    """`dst` with every field of the message `src` copied but `skipped` (the weights are not copied at all)."""
    for fd, value in src.ListFields():
        if fd.name == skipped:
            continue
        if hasattr(value, "extend"):         # a repeated field (FieldDescriptor.label is deprecated)
            getattr(dst, fd.name).extend(value)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)
    return dst


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _graph_inputs(graph) -> list:
    """Graph inputs that are real inputs (an input with an initializer is a constant)."""
    inits = {t.name for t in graph.initializer}
    return [i for i in graph.input if i.name not in inits]


def _fix_input_shapes(model: onnx.ModelProto, input_shapes: dict) -> onnx.ModelProto:
    inputs = _graph_inputs(model.graph)
    names = [i.name for i in inputs]
    for name in input_shapes:
        if name not in names:
            raise ModelError(f"input_shapes names '{name}', which is not a model input (inputs: {names})")
    if input_shapes:
        fixed = onnx.ModelProto()
        fixed.CopyFrom(model)
        model, inputs = fixed, _graph_inputs(fixed.graph)
    for inp in inputs:
        if not inp.type.HasField("tensor_type"):
            raise UnsupportedError(f"input '{inp.name}' is not a tensor (sequence/map inputs are not supported)")
        tt = inp.type.tensor_type
        if inp.name in input_shapes:
            want = tuple(int(d) for d in input_shapes[inp.name])
            if tt.HasField("shape") and len(tt.shape.dim) != len(want):
                raise ModelError(f"input_shapes['{inp.name}'] = {want} has rank {len(want)}, "
                                 f"but the input has rank {len(tt.shape.dim)}")
            del tt.shape.dim[:]
            for d in want:
                tt.shape.dim.add().dim_value = d
        if not tt.HasField("shape"):
            raise ModelError(f"input '{inp.name}' has no shape; give it with input_shapes={{'{inp.name}': (...)}}")
        for i, d in enumerate(tt.shape.dim):     # a dynamic dim keeps its name; an unnamed one gets one
            if not d.HasField("dim_value") and not d.dim_param:
                d.dim_param = f"{inp.name}_dim{i}"
    return model


def _input_dims(model) -> dict[str, list]:
    """Input name -> its dims: ints, and the names of the dynamic ones."""
    return {inp.name: [d.dim_value if d.HasField("dim_value") else d.dim_param
                       for d in inp.type.tensor_type.shape.dim] for inp in _graph_inputs(model.graph)}


def _elem_types(model) -> dict[str, int]:
    g = model.graph
    out = {t.name: t.data_type for t in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type"):
            out[vi.name] = vi.type.tensor_type.elem_type
    return out


def _node_label(node, i: int) -> str:
    return f"'{node.name}'" if node.name else f"#{i} (output '{node.output[0] if node.output else '?'}')"


def _prescan(model, opsets: dict, opset: int):
    """Collect every unsupported node / dtype, then raise one error listing them all."""
    elem = _elem_types(model)

    def dtype_of(name):
        return ONNX_DTYPES.get(elem.get(name)) if name else None

    problems = []
    for vi in list(_graph_inputs(model.graph)) + list(model.graph.initializer):
        t = vi.data_type if isinstance(vi, TensorProto) else vi.type.tensor_type.elem_type
        if t not in ONNX_DTYPES:
            kind = "initializer" if isinstance(vi, TensorProto) else "input"
            problems.append(f"{kind} '{vi.name}' has dtype {dtype_name(t)}")
    for i, node in enumerate(model.graph.node):
        reason = None
        if node.domain not in _DEFAULT_DOMAINS:
            reason = f"domain '{node.domain}' is not supported (only the default ONNX domain)"
        elif node.op_type not in CONVERTERS:
            reason = "no converter for this op"
        else:
            bad = [f"'{n}' is {dtype_name(elem[n])}" for n in list(node.input) + list(node.output)
                   if n and n in elem and elem[n] not in ONNX_DTYPES]
            if bad:
                reason = f"unsupported dtype: {', '.join(bad)}"
            elif node.op_type in CHECKS:
                at = {a.name: _attr_value(a) for a in node.attribute}
                reason = CHECKS[node.op_type](at, node, opset, dtype_of)
        if reason:
            v = opsets.get(node.domain, opset) if node.domain not in _DEFAULT_DOMAINS else opset
            dom = f"{node.domain}::" if node.domain not in _DEFAULT_DOMAINS else ""
            problems.append(f"{dom}{node.op_type} {_node_label(node, i)} (opset {v}): {reason}")
    if problems:
        head = f"{len(problems)} unsupported item(s) in ONNX model (default-domain opset {opset})"
        raise UnsupportedError(
            f"{head}: " + "; ".join(problems) + f". Supported ONNX ops: {', '.join(sorted(CONVERTERS))}",
            details=problems, summary=f"{head} (`aotc ops` lists what is supported):")


def _attr_value(a: onnx.AttributeProto):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    return v


class Ctx:
    """What a converter sees: the builder, the opset, the current node and static evaluation."""

    def __init__(self, b: GraphBuilder, opset: int):
        self.b = b
        self.opset = opset
        self.node = None
        self.label = ""
        self._values = StaticValues(b)
        self.env: dict[str, Value] = {}

    @property
    def op_type(self) -> str:
        return self.node.op_type

    def where(self) -> str:
        return f"{self.node.op_type} {self.label} (opset {self.opset})"

    def fail(self, reason: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where()}: {reason}")

    def model_error(self, reason: str) -> ModelError:
        return ModelError(f"{self.where()}: {reason}")

    def add(self, op: str, *inputs: Value, **attrs) -> Value:
        return self.b.add(op, *inputs, name=self.node.name or self.node.op_type.lower(), **attrs)

    def const(self, array, dtype: DType | None = None) -> Value:
        return self.b.constant(np.asarray(array), name=self.node.name or "c", dtype=dtype)

    def static(self, v: Value, what: str = "input") -> np.ndarray:
        """The value of `v`, computed now from constants; UnsupportedError if it depends on an input."""
        value, leaf = self._values.evaluate(v)
        if value is None:
            err = self.fail(f"{what} must be computable at import time (aotc shapes are static), "
                            f"but it depends on model input '{leaf.name}'")
            err.static_input = leaf.name   # a caller may freeze this input to a constant and retry
            raise err
        return value

    def maybe_static(self, v: Value) -> np.ndarray | None:
        try:
            return self.static(v)
        except UnsupportedError:
            return None

    def static_ints(self, v: Value, what: str = "input") -> list:
        """The integers of `v`; in a dynamic graph some may be sizes known only at run time (DimExprs)."""
        return [x if isinstance(x, D.DimExpr) else int(x) for x in np.asarray(self.static(v, what)).reshape(-1)]


def _convert(model: onnx.ModelProto, opset: int, big=()) -> Graph:
    """The Graph of `model`; `big` are the large initializers split out before checking (constants)."""
    g = model.graph
    b = GraphBuilder(g.name or "main")
    env: dict[str, Value] = {}
    big_names = {t.name for t in big}
    for inp in _graph_inputs(g):
        if inp.name in big_names:
            continue
        tt = inp.type.tensor_type
        env[inp.name] = b.input(inp.name, [d.dim_value if d.HasField("dim_value") else D.sym(d.dim_param)
                                           for d in tt.shape.dim], ONNX_DTYPES[tt.elem_type])
    for t in list(g.initializer) + list(big):
        env[t.name] = b.constant(numpy_helper.to_array(t), name=t.name, dtype=ONNX_DTYPES[t.data_type])
    inferred = {vi.name: vi.type.tensor_type for vi in list(g.value_info) + list(g.output)
                if vi.type.HasField("tensor_type")}
    ctx = Ctx(b, opset)
    convert_nodes(ctx, g.node, env, inferred)
    outputs = [env[o.name] for o in g.output]
    return b.build(outputs, [o.name for o in g.output])


def convert_nodes(ctx: Ctx, nodes, env: dict[str, Value], inferred: dict) -> None:
    """Convert `nodes` in order, binding their outputs in `env` (also for If, Loop and Scan bodies)."""
    saved, saved_env = (ctx.node, ctx.label), ctx.env
    ctx.env = env
    for i, node in enumerate(nodes):
        ctx.node, ctx.label = node, _node_label(node, i)
        if node.domain not in _DEFAULT_DOMAINS or node.op_type not in CONVERTERS:
            raise ctx.fail("no converter for this op (inside a subgraph)")
        missing = [n for n in node.input if n and n not in env]
        if missing:
            raise ModelError(f"{ctx.where()}: input(s) {missing} are not defined before the node")
        ins = [env[n] if n else None for n in node.input]
        at = {a.name: _attr_value(a) for a in node.attribute}
        try:
            outs = CONVERTERS[node.op_type](ctx, ins, at)
        except D.DynamicDecisionError as e:     # this converter needs a size the ranges leave open
            raise ctx.fail(f"not supported with dynamic dims here: {e}") from None
        outs = [outs] if isinstance(outs, Value) else list(outs)
        for k, name in enumerate(node.output):
            if not name:
                continue
            if k >= len(outs) or outs[k] is None:
                raise ctx.fail(f"output {k} ('{name}') is not supported")
            env[name] = outs[k]
            _check_inferred(ctx, name, outs[k], inferred.get(name))
    (ctx.node, ctx.label), ctx.env = saved, saved_env


def _check_inferred(ctx: Ctx, name: str, v: Value, tt):
    """Cross-check a converter's result type with ONNX shape inference (catches converter bugs)."""
    if tt is None or not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
        return
    shape = tuple(d.dim_value for d in tt.shape.dim)
    dt = ONNX_DTYPES.get(tt.elem_type)
    if shape != v.shape or (dt is not None and dt != v.dtype):
        raise VerifyError(f"{ctx.where()}: output '{name}' converted to {v.type} but ONNX infers "
                          f"{dtype_name(tt.elem_type)}{list(shape)} (importer bug)")
