"""The systems `aotc bench` times: aotc itself and onnxruntime, behind one small interface.

Each system answers `unavailable()` (None, or the one-line reason it cannot
run here: "not installed (pip install ...)", "not applicable (...)"),
`build()` (timed by the driver), `run(feeds)` (host arrays in, the outputs
as host arrays in the engine's output order: used for accuracy),
`prepare(feeds)` + `launch(prepared)` + `sync()` (what is timed: on cuda the
inputs and outputs stay on the device) and `close()`. Competitors that need
optional packages live in competitors.py; adding one is a subclass there
and a line in driver.SYSTEMS.
"""
from __future__ import annotations

import importlib.util

import numpy as np


def missing(module: str, pip_name: str) -> str | None:
    """'not installed (pip install X)' when `module` cannot be imported, else None."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"not installed (pip install {pip_name})"


class System:
    name = "system"
    precision = "fp32"

    def __init__(self, source, device: str, output_names: list[str], precision: str = "fp32", arch=None):
        self.source, self.device, self.output_names = source, device, output_names
        self.precision, self.arch = precision, arch
        self.note = ""
        self.example = None            # the first input set, for systems that compile on first call

    def unavailable(self) -> str | None:
        return None

    def build(self) -> None:
        raise NotImplementedError

    def run(self, feeds: dict) -> list[np.ndarray]:
        raise NotImplementedError

    def prepare(self, feeds: dict):
        return feeds

    def launch(self, prepared) -> None:
        self.run(prepared)

    def stage(self, prepared) -> None:
        """Untimed, before each timed launch (see measure.time_runs)."""

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class AotcSystem(System):
    """The aotc engine through the C runtime (aotc.package.runtime_binding)."""
    name = "aotc"

    def __init__(self, source, device, output_names, precision="fp32", arch=None):
        super().__init__(source, device, output_names, precision, arch)
        self.engine_bytes = source.engine_bytes
        self.prebuilt = source.engine_bytes is not None
        self.ctx = None

    def build(self) -> None:
        if not self.prebuilt:
            from aotc.compiler import compile_model
            from aotc.package.engine_format import engine_bytes
            from aotc.testing.fakecuda import active as stand_in
            arch = self.arch if self.arch is not None else ("none" if self.device == "cpu" else None)
            result = compile_model(self.source.model, arch=arch, input_shapes=self.source.input_shapes,
                                   precision=self.precision, host=self.device == "cpu" or stand_in())
            self.engine_bytes = engine_bytes(result.plan)
        from aotc.package.runtime_binding import Engine
        self.engine = Engine(self.engine_bytes)
        self.ctx = self.engine.create_context(device=self.device)
        engine_names = [s.name for s in self.engine.outputs]
        # the model's output order when the engine kept the model's names, else the engine's
        self.names = self.output_names if sorted(self.output_names) == sorted(engine_names) else engine_names

    def run(self, feeds):
        outs = self.ctx.run(self._own(feeds))
        return [outs[n] for n in self.names]

    def _own(self, feeds):
        return {s.name: feeds[s.name] for s in self.engine.inputs}

    # On cuda the context serves from one set of device buffers, bound once, as
    # a server does: unchanged pointers let the runtime capture its launches
    # into a CUDA graph and replay it. Each input set lives on the device too;
    # stage() copies the next one into the bound buffers, untimed.
    def prepare(self, feeds):
        if self.device != "cuda":
            return (self._own(feeds), None)
        from aotc.bench.cuda_mem import DeviceArray
        from aotc.package.runtime_binding import _np_dtype
        if getattr(self, "bound", None) is None:
            self.bound = ({s.name: DeviceArray(s.shape, _np_dtype(s.dtype)) for s in self.engine.inputs},
                          {s.name: DeviceArray(s.shape, _np_dtype(s.dtype)) for s in self.engine.outputs})
        return {k: DeviceArray.from_host(v) for k, v in self._own(feeds).items()}

    def stage(self, prepared):
        if self.device == "cuda":
            from aotc.bench.cuda_mem import synchronize
            for k, src in prepared.items():
                self.bound[0][k].copy_from_device(src)
            synchronize()

    def launch(self, prepared):
        ins, outs = self.bound if self.device == "cuda" else prepared
        self.ctx.run(ins, outputs=outs)      # run() synchronises the context's stream

    @property
    def uses_cuda_graph(self) -> bool:
        return bool(self.ctx is not None and self.ctx.uses_cuda_graph)

    def close(self):
        self.bound = None
        if self.ctx is not None:
            self.ctx.close()


class OrtSystem(System):
    """onnxruntime with the CPU provider on cpu, the CUDA provider on cuda."""
    name = "onnxruntime"

    def __init__(self, source, device, output_names, precision="fp32", arch=None):
        super().__init__(source, device, output_names, "fp32", arch)     # runs the model as given
        self.provider = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
        self.name = f"onnxruntime-{device}"

    def unavailable(self):
        if self.source.kind != "onnx":
            return "not applicable (onnxruntime runs ONNX models; the input is " + self.source.kind + ")"
        why = missing("onnxruntime", "onnxruntime-gpu" if self.device == "cuda" else "onnxruntime")
        if why:
            return why
        import onnxruntime as ort
        if self.provider not in ort.get_available_providers():
            return "not installed (pip install onnxruntime-gpu: this onnxruntime has no CUDA provider)"
        return None

    def build(self):
        self.sess = ort_session(self.source.model_bytes(), self.provider)
        if self.sess.get_providers()[0] != self.provider:
            raise RuntimeError(f"onnxruntime fell back to {self.sess.get_providers()[0]}")
        self.input_names = [i.name for i in self.sess.get_inputs()]

    def run(self, feeds):
        return self.sess.run(self.output_names, {n: feeds[n] for n in self.input_names})

    def prepare(self, feeds):
        if self.device != "cuda":
            return {n: feeds[n] for n in self.input_names}
        import onnxruntime as ort
        binding = self.sess.io_binding()
        for n in self.input_names:
            binding.bind_ortvalue_input(n, ort.OrtValue.ortvalue_from_numpy(feeds[n], "cuda", 0))
        for n in self.output_names:
            binding.bind_output(n, "cuda")
        return binding

    def launch(self, prepared):
        if self.device == "cuda":
            self.sess.run_with_iobinding(prepared)
        else:
            self.sess.run(self.output_names, prepared)

    def sync(self):
        if self.device == "cuda":
            from aotc.bench.cuda_mem import synchronize
            synchronize()


def ort_session(model_bytes: bytes, provider: str = "CPUExecutionProvider"):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes, opts, providers=[provider])


def reference_outputs(source, output_names: list[str], input_sets: list[dict]) -> tuple[str, list | None]:
    """The reference for the accuracy columns: onnxruntime CPU fp32, else aotc's interpreter.

    Returns (what the reference is, one list of outputs per input set), or
    (reason, None) when there is none (an engine given without --model).
    """
    if source.kind == "engine":
        return "none (an engine alone has no reference: pass --model)", None
    if source.kind == "onnx" and missing("onnxruntime", "onnxruntime") is None:
        sess = ort_session(source.model_bytes())
        names = [i.name for i in sess.get_inputs()]
        return "onnxruntime-cpu fp32", [sess.run(output_names, {n: f[n] for n in names}) for f in input_sets]
    from aotc.ir.interpreter import interpret
    graph = source.graph()
    outs = []
    for feeds in input_sets:
        outs.append([np.asarray(a) for a in interpret(graph, {v.name: feeds[v.name] for v in graph.inputs})])
    return "aotc interpreter (fp32)", outs
