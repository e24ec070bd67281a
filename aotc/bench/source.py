"""What `aotc bench` was given: an ONNX model, a StableHLO program or an engine.

A Source knows its kind, the model bytes every system builds from (after a
`--batch` override, so aotc and onnxruntime see the same shapes), the
imported Graph (for input specs and the interpreter reference) and, when a
caller has it, the model's torch source (`torch_module`, a factory, with
`torch_input_names`), which is what makes a torch row honest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aotc.errors import AotcError, ModelError


@dataclass
class Source:
    kind: str                               # "onnx" | "stablehlo" | "engine"
    label: str
    model: object = None                    # onnx.ModelProto, or StableHLO bytes
    engine_bytes: bytes | None = None       # a prebuilt engine (kind "engine", or with --model)
    input_shapes: dict | None = None
    torch_module: object = None             # callable returning a torch.nn.Module
    torch_input_names: list = field(default_factory=list)
    dim_values: dict = field(default_factory=dict)   # a dynamic engine's dims (`--dim`), others at their max
    _graph: object = None

    def model_bytes(self) -> bytes:
        return self.model.SerializeToString()

    def stablehlo_bytes(self) -> bytes:
        return bytes(self.model)

    def graph(self):
        """The imported (unoptimized) Graph of the model."""
        if self._graph is None:
            from aotc.compiler import load_graph
            self._graph = load_graph(self.model, self.input_shapes)
        return self._graph

    def input_specs(self) -> list:
        """Input specs (name, dtype name, shape): from the imported model, else from the engine."""
        if self.model is None:
            from aotc.package.dim_values import choose_dims, concrete_spec
            from aotc.package.engine_format import read_engine
            plan = read_engine(self.engine_bytes)
            values = choose_dims(plan.dims, self.dim_values)
            return [concrete_spec(s, plan.dims, values) for s in plan.inputs]
        from aotc.package.plan import TensorSpec
        return [TensorSpec(v.name, v.dtype.name, tuple(v.shape)) for v in self.graph().inputs]

    def output_names(self) -> list[str]:
        if self.kind == "onnx":
            return [o.name for o in self.model.graph.output]
        if self.model is None:
            from aotc.package.engine_format import read_engine
            return [s.name for s in read_engine(self.engine_bytes).outputs]
        return self.graph().signature_output_names()


def is_engine(data: bytes) -> bool:
    from aotc.package.engine_format import MAGIC
    return data[:len(MAGIC)] == MAGIC


def load_source(path, batch: int | None = None, model_path=None) -> Source:
    """Classify `path` and load it; `model_path` is the source model of a prebuilt engine."""
    p = Path(path)
    if not p.is_file():
        raise AotcError(f"no such file: {path}")
    data = p.read_bytes()
    if is_engine(data):
        if model_path is None:
            if batch is not None:
                raise AotcError("--batch needs a model: an engine's shapes are fixed when it is built")
            return Source("engine", p.name, engine_bytes=data)
        src = load_source(model_path, batch)
        src.engine_bytes, src.label = data, f"{p.name} ({Path(model_path).name})"
        from aotc.package.engine_format import read_engine
        engine_in = {s.name: tuple(s.shape) for s in read_engine(data).inputs}
        model_in = {s.name: tuple(s.shape) for s in src.input_specs()}
        if engine_in != model_in:
            raise AotcError(f"the engine's inputs {engine_in} differ from the model's {model_in}"
                            + ("" if batch else " (use --batch to match the engine's batch)"))
        return src
    if model_path is not None:
        raise AotcError("--model is for a prebuilt engine; here the input is already a model")
    from aotc.compiler import STABLEHLO_SUFFIXES, _is_stablehlo
    if p.suffix.lower() in STABLEHLO_SUFFIXES or (p.suffix.lower() != ".onnx" and _is_stablehlo(data)):
        if batch is not None:
            raise AotcError("--batch applies to ONNX models; StableHLO programs have static shapes")
        return Source("stablehlo", p.name, model=data)
    import onnx
    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types
        raise ModelError(f"{path} is neither an aotc engine, a StableHLO program nor an ONNX model "
                         f"({' '.join(str(e).split())})") from None
    return onnx_source(model, p.name, batch)


def onnx_source(model, label: str, batch: int | None = None) -> Source:
    """A Source for an onnx.ModelProto, its batch (dim 0 of every input) set to `batch` if given."""
    if batch is None:
        return Source("onnx", label, model=model)
    model, shapes = with_batch(model, batch)
    return Source("onnx", label, model=model, input_shapes=shapes)


def with_batch(model, batch: int):
    """Copy of `model` with dim 0 of every graph input set to `batch`, and those shapes.

    Output shapes and intermediate value_info are cleared (they may spell the
    old batch); onnxruntime and aotc's importer infer them again. A model
    whose other dims are symbolic, or with a rank-0 input, is refused.
    """
    import onnx
    if batch < 1:
        raise AotcError(f"--batch must be at least 1, got {batch}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    shapes = {}
    for inp in m.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        if len(dims) == 0:
            raise AotcError(f"--batch: input '{inp.name}' is a scalar, so the model has no batch dimension")
        for i, d in enumerate(dims[1:], 1):
            if not d.HasField("dim_value"):
                raise AotcError(f"--batch: input '{inp.name}' dim {i} is symbolic; only dim 0 can be set")
        dims[0].Clear()
        dims[0].dim_value = batch
        shapes[inp.name] = tuple(d.dim_value for d in dims)
    for out in m.graph.output:
        for d in out.type.tensor_type.shape.dim:
            d.Clear()
    del m.graph.value_info[:]
    return m, shapes
