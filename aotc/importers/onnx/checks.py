"""Checks that turn a malformed ONNX model into one ModelError before anything trusts it.

The ONNX checker and shape inference catch most damage, but not all of it:
an opset newer than any aotc knows imports as if it were the newest one, a
negative dim reaches the engine writer, and a tensor's external data file is
opened wherever its `location` points. So the importer loads a model through
`load_model` (external data is read only from regular files inside the
model's own folder, never through `..`, an absolute path or a symlink out of
it; an opset outside aotc's range is refused) and calls `check_model` once the
input shapes are fixed. Every error names the tensor, the dim, the node's
attribute or the opset and what aotc accepts.
"""
from __future__ import annotations

import os

import onnx
from onnx import AttributeProto, TensorProto

from aotc.errors import ModelError

# The default-domain opsets the converter table handles: legacy forms from
# opset 1 (Reshape's shape attribute, Dropout's is_test) up to the newest that
# the installed onnx package defines, whose schemas shape inference checks.
OPSET_MIN = 1
_DEFAULT_DOMAINS = ("", "ai.onnx")


def opset_max() -> int:
    return onnx.defs.onnx_opset_version()


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def load_model(model) -> onnx.ModelProto:
    """A ModelProto from a proto, bytes or a path: external data read only from safe files,
    the default-domain opset checked."""
    proto = _load(model)
    check_opset(proto)
    return proto


def _load(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        _refuse_external(model, "given as an onnx.ModelProto")
        return model
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            proto = onnx.load_from_string(bytes(model))
        else:
            proto = onnx.load(os.fspath(model), load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError, RuntimeWarning, ...
        raise ModelError(f"cannot load ONNX model: {_one_line(e)}") from None
    if isinstance(model, (bytes, bytearray, memoryview)):
        _refuse_external(proto, "given as bytes")
        return proto
    base = os.path.dirname(os.path.abspath(os.fspath(model)))
    external = [t for t in _tensors(proto) if _is_external(t)]
    for t in external:
        _check_location(t, base)
    if external:
        try:
            onnx.load_external_data_for_model(proto, base)
        except Exception as e:
            raise ModelError(f"cannot read the model's external data: {_one_line(e)}") from None
    return proto


def _is_external(t: TensorProto) -> bool:
    return t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL


def _refuse_external(model: onnx.ModelProto, how: str) -> None:
    t = next((t for t in _tensors(model) if _is_external(t)), None)
    if t is not None:
        raise ModelError(f"tensor '{t.name}' keeps its data in an external file ('{_location(t)}'), "
                         f"but the model was {how}: give aotc the model's path so the file can be "
                         f"found beside it (or load it first with onnx.load)")


def _location(t: TensorProto) -> str:
    return next((e.value for e in t.external_data if e.key == "location"), "")


def _check_location(t: TensorProto, base: str) -> None:
    """The external data file must be a regular file inside the model's folder."""
    loc = _location(t)
    what = f"tensor '{t.name}' external data location '{loc}'"
    parts = loc.replace("\\", "/").split("/")
    if not loc or "\0" in loc or os.path.isabs(loc) or loc.startswith(("/", "\\")) or loc[1:2] == ":":
        raise ModelError(f"{what} is not a relative path inside the model's folder")
    if ".." in parts:
        raise ModelError(f"{what} contains '..': external data must stay inside the model's folder "
                         f"(refused, nothing read)")
    path = os.path.join(base, loc)
    real, root = os.path.realpath(path), os.path.realpath(base)
    if os.path.commonpath([real, root]) != root:
        raise ModelError(f"{what} resolves to {real}, outside the model's folder {root} (refused)")
    if not os.path.isfile(real):
        raise ModelError(f"{what}: the file {path} is missing (or not a regular file)")


def _tensors(model: onnx.ModelProto):
    """Every TensorProto of the model: initializers, Constant values, subgraphs, functions."""
    def in_graph(g):
        yield from g.initializer
        for s in g.sparse_initializer:
            yield s.values
            yield s.indices
        yield from in_nodes(g.node)

    def in_nodes(nodes):
        for node in nodes:
            for a in node.attribute:
                if a.type == AttributeProto.TENSOR:
                    yield a.t
                elif a.type == AttributeProto.TENSORS:
                    yield from a.tensors
                elif a.type == AttributeProto.SPARSE_TENSOR:
                    yield from (a.sparse_tensor.values, a.sparse_tensor.indices)
                elif a.type == AttributeProto.GRAPH:
                    yield from in_graph(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    for g in a.graphs:
                        yield from in_graph(g)

    yield from in_graph(model.graph)
    for f in model.functions:
        yield from in_nodes(f.node)


def check_opset(model: onnx.ModelProto) -> None:
    """The default-domain opset must be one aotc converts (ONNX picks schemas by it)."""
    for o in model.opset_import:
        if o.domain in _DEFAULT_DOMAINS and not OPSET_MIN <= o.version <= opset_max():
            raise ModelError(f"the model imports ONNX opset {o.version} (domain '{o.domain or 'ai.onnx'}'); "
                             f"aotc supports opsets {OPSET_MIN} to {opset_max()} (onnx {onnx.__version__})")


# Attributes that ONNX's checker does not bound but that converters divide by or
# step with (Conv/pool strides, dilations, windows and groups, DepthToSpace's block,
# Split's output count), Conv/pool pads, which may not be negative (Pad-2's pads
# attribute may), and data-type attributes, which must name an ONNX data type.
_POSITIVE_ATTRIBUTES = ("strides", "dilations", "kernel_shape", "blocksize", "group", "num_outputs")
_NONNEGATIVE_ATTRIBUTES = ("pads", "output_padding")
_DTYPE_ATTRIBUTES = ("to", "dtype", "output_dtype", "output_datatype")    # TensorProto.DataType values


def check_model(model: onnx.ModelProto) -> None:
    """Outputs exist, no dim is negative, and the attributes in the lists above are in range."""
    if not model.graph.output:
        raise ModelError("the model's graph declares no outputs (an engine must compute something)")
    _check_dims(model)
    for node in _nodes(model):
        if node.domain not in _DEFAULT_DOMAINS:
            continue
        for a in node.attribute:
            values = list(a.ints) if a.type == AttributeProto.INTS else [a.i] if a.type == AttributeProto.INT else []
            low = 1 if a.name in _POSITIVE_ATTRIBUTES else 0 if a.name in _NONNEGATIVE_ATTRIBUTES else None
            label = f"'{node.name}'" if node.name else f"(output '{node.output[0] if node.output else '?'}')"
            if low is not None and node.op_type != "Pad" and any(v < low for v in values):
                raise ModelError(f"{node.op_type} {label}: attribute {a.name}={values} must be "
                                 f"{'positive' if low else 'non-negative'}")
            if a.name in _DTYPE_ATTRIBUTES and any(v not in TensorProto.DataType.values() for v in values):
                raise ModelError(f"{node.op_type} {label}: attribute {a.name}={values} is not an ONNX data type")


def _nodes(model: onnx.ModelProto):
    """Every node of the model, inside subgraphs and functions too."""
    def walk(nodes):
        for node in nodes:
            yield node
            for a in node.attribute:
                for g in [a.g] if a.type == AttributeProto.GRAPH else a.graphs:
                    yield from walk(g.node)

    yield from walk(model.graph.node)
    for f in model.functions:
        yield from walk(f.node)


def _check_dims(model: onnx.ModelProto) -> None:
    """No negative dim in a declared shape or a tensor; the error names the tensor and the dim."""
    g = model.graph
    for kind, infos in (("input", g.input), ("output", g.output), ("value", g.value_info)):
        for vi in infos:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                for i, d in enumerate(vi.type.tensor_type.shape.dim):
                    if d.HasField("dim_value") and d.dim_value < 0:
                        dims = [e.dim_value if e.HasField("dim_value") else e.dim_param or "?"
                                for e in vi.type.tensor_type.shape.dim]
                        raise ModelError(f"{kind} '{vi.name}' dim {i} is {d.dim_value} (shape {dims}); "
                                         f"dims must be >= 0")
    for t in _tensors(model):
        bad = next((i for i, d in enumerate(t.dims) if d < 0), None)
        if bad is not None:
            raise ModelError(f"tensor '{t.name}' dim {bad} is {t.dims[bad]} (dims {list(t.dims)}); "
                             f"dims must be >= 0")
