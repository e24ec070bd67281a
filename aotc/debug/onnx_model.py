"""The ONNX side of `aotc debug`: node names, which IR value holds which ONNX tensor, onnxruntime runs.

Tensor names. The importer binds every ONNX tensor name to the IR value that holds it
and names values after their nodes, not their tensors. `import_with_tensor_names`
imports a copy of the model in which every intermediate tensor is a graph output:
the converters run in the same order, so every value keeps the name it gets in a
plain import, and the extra outputs tell which value holds which tensor. The graph
handed back has the model's own outputs only, so passes and fusion see the model
itself. The passes keep that name on a value's twins: `NAME.f16`/`.bf16`/`.f32` for
the precision pass's conversions, `NAME.nhwc` for the layout pass's channels-last
copy (ops.conv_layout_perms), so `twin_of` maps an optimized value back to its tensor.

Node names. `--keep-fp32` and the IR name a node by its ONNX node name, an unnamed
node by its op type in lower case (the importer's fallback), which then names every
unnamed node of that type.

onnxruntime runs the model at ORT_DISABLE_ALL, so its intermediate tensors are the
model's own, with any tensors asked for added as graph outputs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from aotc.errors import AotcError, ModelError

_PRECISION_TWINS = (".f16", ".bf16", ".f32")
_LAYOUT_TWIN = ".nhwc"


def load_model(model):
    """An onnx.ModelProto from a path, bytes or a ModelProto; an error names anything else."""
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise AotcError(f"model file not found: {model}")
        if str(model).lower().endswith((".mlir", ".mlirbc")):
            raise AotcError(f"aotc debug compares against onnxruntime and needs an ONNX model, not {model}")
    try:        # a path loads its external data (files beside the model) too
        return onnx.load(model) if isinstance(model, (str, os.PathLike)) else onnx.load_model_from_string(bytes(model))
    except Exception as e:  # noqa: BLE001 - protobuf raises its own DecodeError, onnx its own errors
        raise ModelError(f"not an ONNX model, or its external data is missing ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None


def node_name(node) -> str:
    """The name `--keep-fp32` and the IR give an ONNX node."""
    return node.name or node.op_type.lower()


def node_names(model) -> list[str]:
    return list(dict.fromkeys(node_name(n) for n in model.graph.node))


def symbolic_inputs(model) -> list[str]:
    """The model inputs (initializers aside) with a dim that is not a fixed number."""
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits and
            any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)]


def tensor_types(model) -> dict:
    """Tensor name -> ValueInfoProto with its inferred type (tensors inference could not type are absent)."""
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"ONNX shape inference failed: {e}") from None
    g = inferred.graph
    return {vi.name: vi for vi in list(g.value_info) + list(g.output) + list(g.input)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}


def intermediate_tensors(model) -> list[str]:
    """Every tensor a node produces, in graph order, each once."""
    return list(dict.fromkeys(o for n in model.graph.node for o in n.output if o))


def with_outputs(model, names, types=None):
    """A copy of `model` that also outputs the tensors `names` (those shape inference could type)."""
    types = tensor_types(model) if types is None else types
    out = type(model)()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    out.graph.output.extend(types[n] for n in dict.fromkeys(names) if n not in have and n in types)
    return out


def import_with_tensor_names(model, input_shapes=None):
    """(the model's Graph, IR value name -> ONNX tensor name) for every tensor a node produces."""
    from aotc.importers.onnx import import_onnx
    from aotc.ir.graph import Graph
    marked = with_outputs(model, intermediate_tensors(model))
    kept = len(model.graph.output)
    graph = import_onnx(marked, input_shapes=input_shapes) if input_shapes else import_onnx(marked)
    names = graph.signature_output_names()
    tensor_of: dict[str, str] = {}
    for v, name in zip(graph.outputs[kept:], names[kept:]):
        tensor_of.setdefault(v.name, name)
    for v, name in zip(graph.outputs[:kept], names[:kept]):
        tensor_of.setdefault(v.name, name)
    plain = Graph(list(graph.inputs), list(graph.outputs[:kept]), list(graph.nodes), dict(graph.constants),
                  graph.name, names[:kept], dict(graph.dims))
    return plain, tensor_of


@dataclass(frozen=True)
class Twin:
    """What an optimized value is a copy of: `base` (a value name of the pass input), `nhwc` if channels-last."""
    base: str
    nhwc: bool


def twin_of(value_name: str) -> Twin:
    name = value_name
    for suffix in _PRECISION_TWINS:
        if name.endswith(suffix):
            name = name[:-len(suffix)]
            break
    nhwc = name.endswith(_LAYOUT_TWIN)
    return Twin(name[:-len(_LAYOUT_TWIN)] if nhwc else name, nhwc)


def to_channels_last(a: np.ndarray) -> np.ndarray:
    """An NCHW (NCDHW, ...) array in the layout pass's channels-last order."""
    from aotc.ir import ops
    to_last, _ = ops.conv_layout_perms(a.ndim)
    return np.transpose(a, to_last)


def ort_session(model):
    try:
        import onnxruntime as ort
    except ImportError:
        raise AotcError("aotc debug needs onnxruntime as its reference: pip install onnxruntime") from None
    ort.set_default_logger_severity(3)       # its errors come back as exceptions, once
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise AotcError(f"onnxruntime cannot load the model: {str(e).splitlines()[0]}") from None


def ort_run(model, feeds: dict, extra=(), types=None) -> dict[str, np.ndarray]:
    """Tensor name -> value for the model's outputs and the tensors `extra` (those that can be typed)."""
    marked = with_outputs(model, extra, types) if extra else model
    sess = ort_session(marked)
    wanted = {i.name for i in sess.get_inputs()}
    missing = sorted(wanted - set(feeds))
    if missing:
        raise AotcError(f"no input values for {missing}")
    names = [o.name for o in sess.get_outputs()]
    try:
        values = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as e:  # noqa: BLE001
        hint = "" if not any(f.dtype.kind in "iu" for f in feeds.values()) else \
            " (random integer inputs out of range? give them with --inputs)"
        raise AotcError(f"onnxruntime failed to run the model: {str(e).splitlines()[0]}{hint}") from None
    return dict(zip(names, values))


__all__ = ["load_model", "node_name", "node_names", "symbolic_inputs", "tensor_types", "intermediate_tensors", "with_outputs",
           "import_with_tensor_names", "Twin", "twin_of", "to_channels_last", "ort_session", "ort_run"]
