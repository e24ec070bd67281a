"""An `onnx.backend.base.Backend` that compiles with aotc and runs on the runtime's `cpu` device.

`prepare(model)` compiles the model through the whole path (import, passes,
fusion, codegen, engine plan) and loads the engine bytes with the C runtime
through its ctypes binding; `run(inputs)` runs it on the `cpu` device.

Two things make ~1,900 node cases affordable and honest:

- Shape-carrying inputs. The node tests feed axes, pads, shapes, scales ...
  as graph *inputs*; aotc shapes are static, so such an input must be known
  at compile time. When the importer says so (`err.static_input`), the rep
  compiles at `run()` with that input frozen to the value it is given (an
  initializer), the way a user of a static compiler would export it. Float
  data inputs are never frozen.
- Shared host builds. `SharedHostLibs` holds host libraries built for many
  engines at once (tests/onnx_backend/host_batch.py); its `provider` is
  passed to `compile_model(host_lib=...)`, so an engine embeds a library
  that already holds its kernels instead of paying a g++ run per case.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep

import aotc.compiler
from aotc.errors import UnsupportedError
from aotc.kernels.host_compile import compile_host
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine

MAX_FROZEN = 8


class SharedHostLibs:
    """Host libraries shared by many engines, looked up by the kernel names an engine needs."""

    def __init__(self):
        self.libs: list[bytes] = []
        self.where: dict[str, set[int]] = {}
        self.misses = 0

    def add(self, lib: bytes, names) -> None:
        i = len(self.libs)
        self.libs.append(lib)
        for n in names:
            self.where.setdefault(n, set()).add(i)

    def provider(self, source: str, names: list[str]) -> bytes:
        holders = None
        for n in names:
            holders = set(self.where.get(n, ())) if holders is None else holders & self.where.get(n, set())
            if not holders:
                break
        if holders:
            return self.libs[min(holders)]
        self.misses += 1
        return compile_host(source, names)


SHARED = SharedHostLibs()


def as_array(v) -> np.ndarray:
    """Test data may come as TensorProto (bfloat16, float8 ...): to numpy (ml_dtypes for bf16)."""
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def freeze(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` with the named inputs turned into initializers holding `values`."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name, arr in values.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    return m


def compile_frozen(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None, host: bool = True,
                   arch: str = "none", host_lib=None):
    """Compile, freezing the inputs the importer needs as constants (from `feeds`).

    Returns (CompileResult, frozen input names). Without `feeds`, a model that
    needs a frozen input re-raises the importer's UnsupportedError.
    """
    frozen: dict[str, np.ndarray] = {}
    while True:
        m = freeze(model, frozen) if frozen else model
        try:
            return aotc.compiler.compile_model(m, arch=arch, host=host, host_lib=host_lib), list(frozen)
        except UnsupportedError as e:
            name = getattr(e, "static_input", None)
            if feeds is None or name is None or name not in feeds or name in frozen or len(frozen) >= MAX_FROZEN:
                raise
            frozen[name] = feeds[name]


class AotcRep(BackendRep):
    """A prepared model: the engine if it compiled without input values, else compiled at run()."""

    def __init__(self, model: onnx.ModelProto, arch: str = "none"):
        self.model = model
        self.arch = arch
        self.input_names = [i.name for i in real_inputs(model)]
        self.engine = None
        self.frozen: list[str] = []
        try:
            result, _ = compile_frozen(model, None, arch=arch, host_lib=SHARED.provider)
            self.engine = Engine(engine_bytes(result.plan))
        except UnsupportedError as e:
            if getattr(e, "static_input", None) is None:
                raise

    def run(self, inputs, **kwargs):
        feeds = dict(zip(self.input_names, inputs)) if isinstance(inputs, (list, tuple)) else dict(inputs)
        feeds = {k: as_array(v) for k, v in feeds.items()}
        engine = self.engine
        if engine is None:
            result, self.frozen = compile_frozen(self.model, feeds, arch=self.arch, host_lib=SHARED.provider)
            engine = Engine(engine_bytes(result.plan))
        names = {s.name for s in engine.inputs}
        outs = engine.create_context("cpu").run({k: v for k, v in feeds.items() if k in names})
        return [outs[o.name] for o in self.model.graph.output]


class AotcBackend(Backend):
    """ONNX backend API over aotc: compiles for the host emulation and runs on the `cpu` device."""

    arch = "none"

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        if not cls.supports_device(device):
            raise UnsupportedError(f"device '{device}' is not supported by the aotc node-test backend (cpu only)")
        return AotcRep(model, kwargs.get("arch", cls.arch))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)
