"""`aotc debug compare`: the error of every kernel of an engine, and the first one beyond tolerance.

The model is compiled as the debug build (aotc.package.debug_outputs: the production
regions and kernels, every region's result also an engine output) and run on the cpu
device, and on cuda when a GPU is present. Each kernel's results are compared with
their reference:

- the ONNX tensor the value holds (onnx_model.import_with_tensor_names; a precision
  or channels-last twin is cast or transposed to match), from onnxruntime run on the
  model at ORT_DISABLE_ALL with those tensors added as outputs;
- else, for a fused value no ONNX tensor holds (a norm's partial sums, a layout
  transpose), the reference interpreter's value of it, run on the optimized graph at
  fp32 (the same passes, without the precision pass: the value keeps its name there),
  so an fp16 overflow shows against full precision too.

Kernels are numbered in launch order, which is the production engine's order: the
debug build only appends copies. A kernel's error is the worst over its results
(metrics.py); the first kernel whose error is past the tolerance is where it goes
wrong: its ONNX nodes are where to look, and what `--bisect-precision` starts from.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from aotc.debug import onnx_model as om
from aotc.debug.inputs import load_inputs, random_inputs, read_npz
from aotc.debug.metrics import DEFAULT_RTOL, TensorError, measure, worst
from aotc.errors import AotcError
from aotc.ir import ops

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
_INDEX_MATH = (ops.INJECTIVE, ops.SOURCE)
_MERGED = ".merged"        # merge_dots names a merged GEMM after the first ONNX node it merges


@dataclass
class TensorCheck:
    """One result of one kernel against its reference (`reference` None: nothing to compare with)."""
    kernel: int
    tensor: str                 # the ONNX tensor name, or the IR value name when no tensor holds it
    value: str                  # the IR value name
    reference: str | None       # "onnxruntime", "interpreter" or None
    error: TensorError | None

    def as_dict(self) -> dict:
        d = {"kernel": self.kernel, "tensor": self.tensor, "value": self.value, "reference": self.reference}
        d.update(self.error.as_dict() if self.error else {"max_abs_err": None, "max_rel_err": None,
                                                           "nonfinite": None})
        return d


@dataclass
class KernelReport:
    index: int
    name: str
    onnx_nodes: list[str]
    outputs: list[str]
    error: TensorError | None
    nodes: list[str] = field(default_factory=list)      # IR compute nodes (for kernels with no ONNX node)
    keep_names: list[str] = field(default_factory=list)     # of those, the names --keep-fp32 accepts

    def as_dict(self) -> dict:
        d = {"index": self.index, "name": self.name, "onnx_nodes": self.onnx_nodes, "outputs": self.outputs}
        d.update(self.error.as_dict() if self.error else {"max_abs_err": None, "max_rel_err": None,
                                                           "nonfinite": None})
        return d


@dataclass
class DeviceReport:
    device: str
    kernels: list[KernelReport]
    tensors: list[TensorCheck]
    outputs: dict[str, TensorError]        # the model's outputs against onnxruntime's
    rtol: float

    @property
    def first_bad(self) -> KernelReport | None:
        return next((k for k in self.kernels if k.error is not None and k.error.fails(self.rtol)), None)

    @property
    def output_error(self) -> TensorError:
        return worst(self.outputs.values())

    @property
    def passes(self) -> bool:
        return not self.output_error.fails(self.rtol)

    def as_dict(self) -> dict:
        bad = self.first_bad
        return {"device": self.device, "kernels": [k.as_dict() for k in self.kernels],
                "first_bad": None if bad is None else {"index": bad.index, "onnx_nodes": bad.onnx_nodes},
                "model_outputs": [dict(name=n, **e.as_dict()) for n, e in self.outputs.items()],
                "tensors": [t.as_dict() for t in self.tensors]}


@dataclass
class CompareReport:
    model: str
    precision: str
    keep_fp32: list[str]
    rtol: float
    devices: list[DeviceReport]
    model_nodes: list[str] = field(default_factory=list)     # the ONNX node names, in graph order

    @property
    def main(self) -> DeviceReport:
        return self.devices[0]

    def as_dict(self) -> dict:
        """The cpu device's report at the top level (the issue's shape), other devices under their name."""
        d = {"model": self.model, "precision": self.precision, "rtol": self.rtol,
             "keep_fp32_given": self.keep_fp32, **self.main.as_dict()}
        for other in self.devices[1:]:
            d[other.device] = other.as_dict()
        return d


def default_rtol(precision: str) -> float:
    return DEFAULT_RTOL[precision]


def check_precision(precision: str) -> None:
    if precision == "int8":
        raise AotcError("int8 engines do not exist in aotc yet (no quantization); use --precision fp16 or bf16")
    if precision not in PRECISIONS:
        raise AotcError(f"unknown precision '{precision}'; supported: {', '.join(PRECISIONS)}")


def cuda_arch() -> str | None:
    """sm_XY of GPU 0 when a CUDA driver and a GPU are present, else None."""
    try:
        from cuda.bindings import driver as cu
        if int(cu.cuInit(0)[0]) != 0:
            return None
        err, dev = cu.cuDeviceGet(0)
        if int(err) != 0:
            return None
        attr = cu.CUdevice_attribute
        major = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        minor = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        if int(major[0]) != 0 or int(minor[0]) != 0:
            return None
        return f"sm_{major[1]}{minor[1]}"
    except Exception:  # noqa: BLE001 - no libcuda.so.1, no device: the cpu device only
        return None


class Session:
    """One model under debug: its ONNX form, import, tensor names, inputs and onnxruntime's tensors.

    bisect.py compiles the same model several times (other --keep-fp32 sets); the import,
    the inputs and onnxruntime's reference values are the same for all of them.
    """

    def __init__(self, model, *, inputs=None, seed: int = 0, input_shapes=None, layout: str = "nhwc"):
        self.path = str(model) if not hasattr(model, "SerializeToString") else "<model>"
        self.proto = om.load_model(model)
        given = None
        if inputs is not None:
            given = dict(inputs) if isinstance(inputs, dict) else read_npz(inputs)
            # symbolic dims take the shapes of the arrays given for them
            input_shapes = {**{n: tuple(np.shape(given[n])) for n in om.symbolic_inputs(self.proto) if n in given},
                            **(input_shapes or {})}
        self.graph, self.tensor_of = om.import_with_tensor_names(self.proto, input_shapes or None)
        self.layout = layout
        self.onnx_names = om.node_names(self.proto)
        self.types = om.tensor_types(self.proto)
        from aotc.package.plan import TensorSpec
        specs = [TensorSpec(v.name, v.dtype.name, v.shape) for v in self.graph.inputs]
        self.feeds = random_inputs(specs, seed) if given is None else load_inputs(given, specs)
        self.ort_values: dict[str, np.ndarray] = {}
        self._asked: set[str] = set()
        self._interp: dict[str, np.ndarray] | None = None
        self._g32 = None
        self.producer_of = {o: om.node_name(n) for n in self.proto.graph.node for o in n.output if o}

    def reference(self, tensors) -> dict[str, np.ndarray]:
        """onnxruntime's values of the model's outputs and of `tensors` (run once per new tensor set)."""
        want = [t for t in dict.fromkeys(tensors) if t not in self._asked]
        if want or not self.ort_values:
            self._asked.update(want)
            self.ort_values.update(om.ort_run(self.proto, self.feeds, want, self.types))
        return self.ort_values

    def before_precision(self):
        """The graph optimized at fp32: what the precision pass of an fp16/bf16 compile starts from
        (the same passes run before it), so its node names are the ones --keep-fp32 accepts."""
        if self._g32 is None:
            from aotc.hlo_passes.pipeline import run_pipeline
            self._g32, _ = run_pipeline(self.graph, layout=self.layout, precision="fp32")
        return self._g32

    def keepable(self) -> set[str]:
        return {n.name for n in self.before_precision().nodes}

    def interpreted(self) -> dict[str, np.ndarray]:
        """Value name -> the interpreter's value, on the graph optimized at fp32 (computed once)."""
        if self._interp is None:
            from aotc.ir.interpreter import interpret
            g32 = self.before_precision()
            _, env = interpret(g32, {v.name: self.feeds[v.name] for v in g32.inputs}, return_env=True)
            self._interp = {v.name: a for v, a in env.items()}
        return self._interp

    def compile(self, precision: str, keep_fp32=(), arch="none", progress=None):
        from aotc.compiler import compile_model
        return compile_model(self.graph, arch=arch, precision=precision, keep_fp32=tuple(keep_fp32),
                             layout=self.layout, debug_outputs=True, progress=progress)


def onnx_nodes_of(region, onnx_names: set[str], computed: set[str], merged=()) -> list[str]:
    """The ONNX nodes a region holds: those it computes, and pure index-math nodes (Reshape,
    Transpose...) that no region computes, which it reads through its index math; `merged`
    are the ONNX nodes of a merged GEMM (see _merged_sources)."""
    out = []
    for n in region.nodes:
        if n.name not in onnx_names:
            continue
        if ops.category(n.op) not in _INDEX_MATH or n.name not in computed:
            out.append(n.name)
    return list(dict.fromkeys(out + list(merged)))


def _merged_sources(region, users, session: Session) -> list[str]:
    """The ONNX nodes merge-dots fused into this region's GEMM (`NAME.merged`, Q/K/V sharing one
    input): the first by its name, the others as producers of the tensors sliced out of the result."""
    merged = [n.name[:-len(_MERGED)] for n in region.nodes if n.name.endswith(_MERGED)]
    if not merged:
        return []
    for u in users.get(region.root, []):
        if u.op == "slice":     # named after the value it replaces, made unique with a counter: "MatMul_21.1"
            base = om.twin_of(u.outputs[0].name).base
            tensor = session.tensor_of.get(base, session.tensor_of.get(re.sub(r"\.\d+$", "", base)))
            if tensor in session.producer_of:
                merged.append(session.producer_of[tensor])
    return [m for m in dict.fromkeys(merged) if m in session.onnx_names]


def _resolve(session: Session, value, precision: str):
    """(tensor label, reference kind, reference array or None) for one result value."""
    twin = om.twin_of(value.name)
    tensor = session.tensor_of.get(twin.base)
    if tensor is not None:
        ref = session.ort_values.get(tensor)
        if ref is not None and twin.nhwc and ref.ndim >= 3:
            ref = om.to_channels_last(ref)
        if ref is not None and tuple(ref.shape) == tuple(value.shape):
            return tensor, "onnxruntime", ref
    name32 = twin.base + (".nhwc" if twin.nhwc else "")
    ref = session.interpreted().get(name32)
    if ref is not None and tuple(ref.shape) == tuple(value.shape):
        return tensor or value.name, "interpreter", ref
    return tensor or value.name, None, None


def run_compare(session: Session, precision: str = "fp32", keep_fp32=(), rtol: float | None = None,
                devices=None, progress=None) -> CompareReport:
    """Compile the debug build of `session`'s model, run it, and compare every kernel's results."""
    from aotc.package.engine_format import engine_bytes
    from aotc.package.runtime_binding import Engine
    check_precision(precision)
    rtol = default_rtol(precision) if rtol is None else float(rtol)
    say = progress or (lambda msg: None)
    arch = cuda_arch() if devices is None or "cuda" in devices else None
    devices = list(devices) if devices is not None else (["cpu", "cuda"] if arch else ["cpu"])
    if "cuda" in devices and arch is None:
        raise AotcError("--device cuda: no CUDA driver or GPU found here")
    say(f"compiling the debug build ({precision}" + (f", keep fp32: {','.join(keep_fp32)}" if keep_fp32 else "")
        + ")")
    result = session.compile(precision, keep_fp32, arch=arch or "none", progress=say)
    graph, plan = result.graph_optimized, result.plan
    out_name: dict = {}
    for v, name in zip(graph.outputs, graph.signature_output_names()):
        out_name.setdefault(v, name)
    regions = [(i, r) for i, r in enumerate(result.regions) if r.nodes]
    onnx_names = set(session.onnx_names)
    computed = {n.name for _, r in regions for n in r.nodes if ops.category(n.op) not in _INDEX_MATH}
    users, keepable = graph.users(), session.keepable()

    wanted = []
    for _, r in regions:
        for v in [r.root] + list(r.extra_roots):
            t = session.tensor_of.get(om.twin_of(v.name).base)
            if t is not None:
                wanted.append(t)
    say(f"running onnxruntime with {len(set(wanted))} intermediate tensors as outputs")
    ref_outputs = session.reference(wanted)
    model_outputs = [o.name for o in session.proto.graph.output]

    engine = Engine(engine_bytes(plan))
    reports = []
    for device in devices:
        say(f"running the debug build on the {device} device")
        got = engine.create_context(device=device).run(session.feeds)
        kernels, tensors = [], []
        for i, r in regions:
            checks = []
            for v in [r.root] + list(r.extra_roots):
                label, kind, ref = _resolve(session, v, precision)
                err = measure(got[out_name[v]], ref) if ref is not None else None
                checks.append(TensorCheck(i, label, v.name, kind, err))
            errs = [c.error for c in checks if c.error is not None]
            held = onnx_nodes_of(r, onnx_names, computed, _merged_sources(r, users, session))
            compute = list(dict.fromkeys(n.name for n in r.nodes if ops.category(n.op) not in _INDEX_MATH))
            kernels.append(KernelReport(i, plan.launches[i].kernel, held, [c.tensor for c in checks],
                                        worst(errs) if errs else None, compute,
                                        [n for n in compute if n in keepable]))
            tensors += checks
        outs = {name: measure(got[name], ref_outputs[name]) for name in model_outputs if name in got}
        reports.append(DeviceReport(device, kernels, tensors, outs, rtol))
    return CompareReport(session.path, precision, list(keep_fp32), rtol, reports, session.onnx_names)


def compare(model, *, precision: str = "fp32", keep_fp32=(), inputs=None, seed: int = 0, rtol=None,
            input_shapes=None, layout: str = "nhwc", devices=None, progress=None) -> CompareReport:
    """Python API of `aotc debug compare`: see the module docstring."""
    session = Session(model, inputs=inputs, seed=seed, input_shapes=input_shapes, layout=layout)
    return run_compare(session, precision, keep_fp32, rtol, devices, progress)


__all__ = ["compare", "run_compare", "Session", "CompareReport", "DeviceReport", "KernelReport", "TensorCheck",
           "cuda_arch", "check_precision", "default_rtol", "PRECISIONS"]
