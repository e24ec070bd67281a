"""ctypes binding of the C runtime (aotc_runtime.h): load and run engines from Python.

Serving needs only this module, numpy and the runtime library. The library
is found, in order: $AOTC_RUNTIME_LIB; `_aotc_runtime*.so` next to this file
(built by `pip install`, see setup.py) unless the C sources beside it are
newer; else it is compiled once with `cc` (or $CC) into the cache directory
($AOTC_CACHE_DIR, else $XDG_CACHE_HOME/aotc, else ~/.cache/aotc), keyed by a
hash of the sources.

Dynamic engines (Engine.dims not empty): `ctx.run` sets each input's shape
from its array (aotc_context_set_input_shape: range errors are InputError
naming the input, dim, value and range) and returns outputs at the shapes
the runtime computes; `ctx.set_input_shape` / `ctx.output_shape` serve
callers that bind their own buffers.

Threads: an Engine may be shared; use one Context per thread (a Context
also serializes its own runs with a lock). ctypes releases the GIL while the
runtime runs, so contexts on several threads run in parallel.

Arrays: numpy arrays (host memory) work on every device; on "cuda" they are
staged through device buffers the context owns. Objects exposing
`__cuda_array_interface__` (torch and cupy CUDA tensors) are bound by their
device pointer, without a copy, on a "cuda" context. The run is enqueued on
the stream the interface says the data is ordered on (`_cai_stream`), so it
runs after the work that wrote the inputs: a version 3 interface names it
(or says None: no wait needed); an older one (torch's is version 2) names
none, and its producer's work may still be in flight on the legacy default
stream, so the run goes there. A torch tensor written on a side stream
(`torch.cuda.stream(s)`) is not ordered by that: synchronize `s` first. `ctx.run(inputs, outputs=...)` writes into
caller-owned arrays (host or CUDA) instead of allocating new ones.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading

import numpy as np

from aotc.errors import EngineFormatError, InputError, RuntimeFailure
from aotc.package.c_build import build_cached
from aotc.package.plan import DTYPE_CODES, DimSpec, Reg, TensorSpec

_HERE = os.path.dirname(os.path.abspath(__file__))
_SRC = os.path.join(_HERE, "runtime")
_SOURCES = ["status.c", "engine.c", "plan.c", "context.c", "shape.c", "device_cpu.c", "device_cuda.c"]
_HEADERS = ["aotc_runtime.h", "aotc_internal.h"]
_MAX_RANK = 8
_DEVICES = {"cpu": 0, "cuda": 1}
_DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
# An output dim the engine computes from the input shapes (aotc_runtime.h's AOTC_DIM_COMPUTED):
# Context.output_shape gives its value. An input's dynamic dim is Reg(index into Engine.dims).
COMPUTED_DIM = Reg(-2)
_INPUT_CODES = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"}
_CODES = ["OK", "INVALID_ARGUMENT", "NOT_FOUND", "DATA_LOSS", "UNIMPLEMENTED", "UNAVAILABLE",
          "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "INTERNAL"]


class _ContextOptions(ctypes.Structure):
    _fields_ = [("use_cuda_graph", ctypes.c_int)]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_uint32),
                ("dims", ctypes.c_uint64 * _MAX_RANK), ("byte_size", ctypes.c_uint64),
                ("dim_index", ctypes.c_int32 * _MAX_RANK)]


class _DimInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("min", ctypes.c_uint32), ("max", ctypes.c_uint32),
                ("divisor", ctypes.c_uint32)]


def _build_cached() -> str:
    """Compile the runtime with cc into the cache directory (once per source hash)."""
    return build_cached("aotc runtime library", _SRC, _SOURCES, _HEADERS, "aotc_runtime")


def library_path() -> str:
    """Path of the runtime shared library, building it into the cache if needed."""
    env = os.environ.get("AOTC_RUNTIME_LIB")
    if env:
        return env
    built = sorted(glob.glob(os.path.join(_HERE, "_aotc_runtime*.so")))
    if not built:
        return _build_cached()
    # In a source checkout (editable install), C edits newer than the built
    # library win; an installed package (no setup.py above it) uses its build.
    checkout = os.path.exists(os.path.join(_HERE, "..", "..", "setup.py"))
    src_mtime = max((os.path.getmtime(os.path.join(_SRC, f))
                     for f in _SOURCES + _HEADERS if os.path.exists(os.path.join(_SRC, f))),
                    default=0.0)
    if checkout and os.path.getmtime(built[0]) < src_mtime:
        try:
            return _build_cached()
        except RuntimeFailure:
            pass
    return built[0]


_lib = None
_lib_lock = threading.Lock()


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(library_path())
        P, S, I, U64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64
        st = ctypes.c_void_p  # aotc_status_t
        for name, res, args in [
            ("aotc_status_code", I, [st]), ("aotc_status_message", ctypes.c_char_p, [st]),
            ("aotc_status_free", None, [st]),
            ("aotc_engine_load_from_file", st, [ctypes.c_char_p, P, ctypes.POINTER(P)]),
            ("aotc_engine_load_from_memory", st, [ctypes.c_char_p, S, P, ctypes.POINTER(P)]),
            ("aotc_engine_release", None, [P]),
            ("aotc_engine_input_count", S, [P]), ("aotc_engine_output_count", S, [P]),
            ("aotc_engine_input_info", st, [P, S, ctypes.POINTER(_TensorInfo)]),
            ("aotc_engine_output_info", st, [P, S, ctypes.POINTER(_TensorInfo)]),
            ("aotc_engine_dim_count", S, [P]),
            ("aotc_engine_dim_info", st, [P, S, ctypes.POINTER(_DimInfo)]),
            ("aotc_context_set_input_shape", st, [P, ctypes.c_char_p, S, ctypes.POINTER(ctypes.c_int64)]),
            ("aotc_context_get_output_shape", st, [P, ctypes.c_char_p, ctypes.POINTER(S),
                                                   ctypes.POINTER(ctypes.c_int64)]),
            ("aotc_engine_arena_size", U64, [P]), ("aotc_engine_weights_size", U64, [P]),
            ("aotc_engine_device_memory_size", U64, [P, S]),
            ("aotc_engine_aotc_version", ctypes.c_char_p, [P]),
            ("aotc_engine_manifest", st, [P, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(S)]),
            ("aotc_context_create_with_options", st, [P, I, ctypes.POINTER(_ContextOptions),
                                                      ctypes.POINTER(P)]),
            ("aotc_context_bind_input", st, [P, ctypes.c_char_p, P, S]),
            ("aotc_context_bind_output", st, [P, ctypes.c_char_p, P, S]),
            ("aotc_context_enqueue", st, [P, P]), ("aotc_context_synchronize", st, [P]),
            ("aotc_context_uses_cuda_graph", I, [P]),
            ("aotc_engine_check", st, [ctypes.c_char_p, S, I, ctypes.c_char_p, S]),
            ("aotc_context_create", st, [P, I, ctypes.POINTER(P)]),
            ("aotc_context_release", None, [P]),
            ("aotc_context_bind_host_input", st, [P, ctypes.c_char_p, P, S]),
            ("aotc_context_bind_host_output", st, [P, ctypes.c_char_p, P, S]),
            ("aotc_context_run", st, [P]),
            ("aotc_runtime_version", ctypes.c_char_p, []),
        ]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib = lib
        return lib


def _take_status(status) -> tuple[str, str] | None:
    """(code name, message) of an error status, freeing it; None when OK."""
    if not status:
        return None
    lib = _load()
    code = lib.aotc_status_code(status)
    msg = lib.aotc_status_message(status).decode("utf-8", "replace")
    lib.aotc_status_free(status)
    return (_CODES[code] if 0 <= code < len(_CODES) else str(code)), msg


def _check(status, loading: bool = False) -> None:
    err = _take_status(status)
    if err is None:
        return
    code, msg = err
    cls = EngineFormatError if loading and code in ("DATA_LOSS", "UNIMPLEMENTED") else RuntimeFailure
    exc = cls(msg)
    exc.code = code
    raise exc


def _check_input(status) -> None:
    """Like _check, but the caller's mistakes (a shape out of range, inputs that disagree) are InputError."""
    err = _take_status(status)
    if err is None:
        return
    code, msg = err
    exc = (InputError if code in _INPUT_CODES else RuntimeFailure)(msg)
    exc.code = code
    raise exc


_ML_DTYPES = {"bf16": "bfloat16", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
              "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz", "i4": "int4", "u4": "uint4",
              "i2": "int2", "u2": "uint2", "f4e2m1fn": "float4_e2m1fn",
              "f8e8m0fnu": "float8_e8m0fnu"}


def _np_dtype(name: str) -> np.dtype:
    """The numpy dtype of an engine dtype; bf16, float8, float4 and 4/2-bit ints from ml_dtypes (one per byte)."""
    if name in _ML_DTYPES:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))
    return np.dtype({"f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32,
                     "i8": np.int8, "u8": np.uint8, "bool": np.bool_, "f64": np.float64, "i16": np.int16,
                     "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}[name])


def _device_code(device: str) -> int:
    if device not in _DEVICES:
        raise RuntimeFailure(f"unknown device {device!r}: use 'cpu' or 'cuda'")
    return _DEVICES[device]


class Engine:
    """A loaded engine: from a path or from the engine bytes (copied).

    `dims` lists the engine's dynamic dims (empty for a static engine); in
    `inputs` and `outputs` a dynamic dim is a Reg (an input's: Reg(i) for
    dims[i]; an output's: COMPUTED_DIM) and `max_shape` is the largest shape.
    """

    def __init__(self, path_or_bytes):
        lib = _load()
        self._lib = lib
        self._ptr = None
        self._origin = path_or_bytes if not isinstance(path_or_bytes, (bytearray, memoryview)) \
            else bytes(path_or_bytes)
        self._cpu_twin = None            # this engine with the host build attached (host_on_demand.py)
        self._twin_lock = threading.Lock()
        out = ctypes.c_void_p()
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            data = bytes(path_or_bytes)
            _check(lib.aotc_engine_load_from_memory(data, len(data), None, ctypes.byref(out)), True)
        else:
            path = os.fsencode(os.fspath(path_or_bytes))
            _check(lib.aotc_engine_load_from_file(path, None, ctypes.byref(out)), True)
        self._ptr = out.value
        self.dims = [self._dim(i) for i in range(lib.aotc_engine_dim_count(self._ptr))]
        self.inputs = [self._info(lib.aotc_engine_input_info, i)
                       for i in range(lib.aotc_engine_input_count(self._ptr))]
        self.outputs = [self._info(lib.aotc_engine_output_info, i)
                        for i in range(lib.aotc_engine_output_count(self._ptr))]
        self.arena_size = int(lib.aotc_engine_arena_size(self._ptr))
        self.weights_size = int(lib.aotc_engine_weights_size(self._ptr))
        self.aotc_version = lib.aotc_engine_aotc_version(self._ptr).decode()

    def device_memory_size(self, contexts: int = 1) -> int:
        """Device bytes for `contexts` contexts on one device: weights once, an arena each."""
        return int(self._lib.aotc_engine_device_memory_size(self._ptr, contexts))

    @property
    def is_dynamic(self) -> bool:
        return bool(self.dims)

    def _dim(self, i: int) -> DimSpec:
        info = _DimInfo()
        _check(self._lib.aotc_engine_dim_info(self._ptr, i, ctypes.byref(info)))
        return DimSpec(info.name.decode("utf-8", "replace"), info.min, info.max, info.divisor)

    def _info(self, fn, i: int) -> TensorSpec:
        info = _TensorInfo()
        _check(fn(self._ptr, i, ctypes.byref(info)))
        top = tuple(int(info.dims[r]) for r in range(info.rank))
        shape = tuple(top[r] if info.dim_index[r] == -1 else Reg(int(info.dim_index[r])) for r in range(info.rank))
        return TensorSpec(info.name.decode("utf-8", "replace"), _DTYPE_NAMES[info.dtype], shape,
                          None if shape == top else top)

    def shape_text(self, spec: TensorSpec) -> str:
        """`[batch,128]`: a spec's shape with each dynamic dim by name (`?` for a computed output dim)."""
        return "[" + ",".join(str(d) if not isinstance(d, Reg) else self.dims[d.index].name if d.index >= 0
                              else "?" for d in spec.shape) + "]"

    def sample_shape(self, spec: TensorSpec, values: dict[str, int]) -> tuple[int, ...]:
        """An input's shape with each dim taken from `values` (name -> int), else the dim's max."""
        return tuple(d if not isinstance(d, Reg) else int(values.get(self.dims[d.index].name, self.dims[d.index].max))
                     for d in spec.shape)

    def create_context(self, device: str = "cpu", use_cuda_graph: bool = True) -> "Context":
        return Context(self, device, use_cuda_graph)

    def manifest(self) -> dict:
        """The MANIFEST section as a dict."""
        from aotc.package.host_on_demand import manifest_of
        text, size = ctypes.c_char_p(), ctypes.c_size_t()
        _check(self._lib.aotc_engine_manifest(self._ptr, ctypes.byref(text), ctypes.byref(size)))
        return manifest_of(ctypes.string_at(text, size.value))

    def _engine_for(self, device: str):
        """The C engine a context on `device` runs: this one, or on cpu, when it has no host
        build but carries its kernel source, a copy with the host build made now (once)."""
        if device != "cpu":
            return self._ptr
        with self._twin_lock:
            if self._cpu_twin is None:
                from aotc.package.host_on_demand import has_kernel_source, with_host_build
                manifest = self.manifest()
                if manifest.get("host_lib", True) or not has_kernel_source(manifest):
                    self._cpu_twin = self._ptr      # has one, or cannot: the runtime says which
                else:
                    data = self._origin
                    if not isinstance(data, bytes):
                        try:
                            with open(data, "rb") as f:
                                data = f.read()
                        except OSError as e:
                            raise RuntimeFailure(f"cannot read engine file {data} to build its host library: "
                                                 f"{e.strerror}") from None
                    out = ctypes.c_void_p()
                    image = with_host_build(data)
                    _check(self._lib.aotc_engine_load_from_memory(image, len(image), None, ctypes.byref(out)), True)
                    self._cpu_twin = out.value
            return self._cpu_twin

    def __del__(self):
        twin = getattr(self, "_cpu_twin", None)
        if twin and twin != getattr(self, "_ptr", None):
            self._lib.aotc_engine_release(twin)
        self._cpu_twin = None
        if getattr(self, "_ptr", None):
            self._lib.aotc_engine_release(self._ptr)
            self._ptr = None


class _Buffer:
    """One argument ready to bind: a pointer, its size, where it lives."""

    def __init__(self, ptr: int, nbytes: int, on_device: bool, stream=None, keep=None, shape=()):
        self.ptr, self.nbytes, self.on_device, self.stream, self.keep = ptr, nbytes, on_device, stream, keep
        self.shape = shape


def _cuda_buffer(spec: TensorSpec, obj, role: str, device: str, shape: tuple | None = None) -> _Buffer:
    """Check a `__cuda_array_interface__` object against `spec` (and `shape`, the expected shape
    of a dynamic output; a dynamic input's shape is checked by the runtime); no copy is made."""
    what, expected = f"{role} {spec.name!r}", shape
    if device != "cuda":
        raise InputError(f"{what} is a CUDA array (__cuda_array_interface__); create the context "
                         f"with device='cuda' to bind it, or pass a host (numpy) array")
    cai = obj.__cuda_array_interface__
    try:
        shape = tuple(int(d) for d in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        ptr, readonly = cai["data"]
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{what}: malformed __cuda_array_interface__ ({e})") from None
    want = _np_dtype(spec.dtype)
    expect = spec.shape if spec.is_static else expected
    if dtype != want or (expect is not None and shape != tuple(expect)):
        raise InputError(f"{what}: expected {spec.dtype} {list(expect or spec.shape)}, "
                         f"got CUDA {dtype} {list(shape)}")
    strides = cai.get("strides")
    if strides is not None:
        dense, step = [], want.itemsize
        for d in reversed(shape):
            dense.append(step)
            step *= d
        if any(d != 1 and s != t for d, s, t in zip(shape, strides, reversed(dense))):
            raise InputError(f"{what}: CUDA array is not C-contiguous (strides {list(strides)}); "
                             f"make it contiguous first")
    if role == "output" and readonly:
        raise InputError(f"{what}: CUDA array is read-only")
    nbytes = int(np.prod(shape, dtype=np.int64)) * want.itemsize
    if not ptr and nbytes:
        raise InputError(f"{what}: CUDA array has a NULL data pointer")
    return _Buffer(int(ptr or 0), nbytes, True, _cai_stream(cai, what), obj, shape)


# CAI stream values 1 and 2 are the legacy and per-thread default streams, the very
# handles the driver takes for them (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
LEGACY_DEFAULT_STREAM = 1


def _cai_stream(cai: dict, what: str) -> int | None:
    """The stream aotc must run on to be ordered after the producer's writes, or None.

    Version 3 of the interface carries `stream`: None (or no key) promises the
    data is ready, 1 and 2 name the default streams, anything else a CUstream;
    0 is forbidden as ambiguous. Versions before 3 have no stream protocol at
    all: the producer may still be writing on its current stream, which for
    torch's version-2 tensors is the legacy default stream unless the user
    chose another, so the run goes on the legacy stream.
    """
    try:
        version = int(cai.get("version", 0))
    except (TypeError, ValueError):
        raise InputError(f"{what}: malformed __cuda_array_interface__ version {cai.get('version')!r}") from None
    if version < 3:
        return LEGACY_DEFAULT_STREAM
    stream = cai.get("stream")
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise InputError(f"{what}: __cuda_array_interface__ stream {stream!r} is not a stream handle")
    if stream == 0:
        raise InputError(f"{what}: __cuda_array_interface__ stream 0 is ambiguous (the interface forbids it); "
                         f"use 1 for the legacy default stream or 2 for the per-thread one")
    return stream


def _host_input(spec: TensorSpec, obj, shape_text: str = "") -> _Buffer:
    """A numpy input; a dynamic one's shape is checked by the runtime (set_input_shape)."""
    arr = np.asarray(obj)
    want = _np_dtype(spec.dtype)
    if arr.dtype != want or (spec.is_static and tuple(arr.shape) != spec.shape):
        shown = list(spec.shape) if spec.is_static or not shape_text else shape_text
        raise InputError(f"input {spec.name!r}: expected {spec.dtype} {shown}, "
                         f"got {arr.dtype} {list(arr.shape)}")
    arr = np.ascontiguousarray(arr)
    return _Buffer(arr.ctypes.data, arr.nbytes, False, keep=arr, shape=tuple(arr.shape))


def _host_output(spec: TensorSpec, arr, shape: tuple | None = None) -> _Buffer:
    """A caller's numpy output array: its shape must be `shape` (the current one) or the static shape."""
    want = _np_dtype(spec.dtype)
    shape = tuple(spec.shape if shape is None else shape)
    if not isinstance(arr, np.ndarray) or arr.dtype != want or tuple(arr.shape) != shape:
        got = f"{arr.dtype} {list(arr.shape)}" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise InputError(f"output {spec.name!r}: expected a numpy {spec.dtype} {list(shape)} array, "
                         f"got {got}")
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise InputError(f"output {spec.name!r}: array must be C-contiguous and writeable")
    return _Buffer(arr.ctypes.data, arr.nbytes, False, keep=arr, shape=shape)


def _stream_of(buffers) -> int | None:
    """The producer stream named by CUDA arguments (CAI v3), or None."""
    streams = {b.stream for b in buffers if b.on_device and b.stream is not None}
    if len(streams) > 1:
        raise InputError(f"CUDA arguments come from different streams {sorted(streams)}; "
                         f"synchronize them or use one stream")
    return streams.pop() if streams else None


class Context:
    """One execution context (own activation arena); use one per thread."""

    def __init__(self, engine: Engine, device: str = "cpu", use_cuda_graph: bool = True):
        self.engine = engine
        self.device = device
        self._lib = engine._lib
        self._ptr = None
        self._lock = threading.Lock()
        out = ctypes.c_void_p()
        opts = _ContextOptions(1 if use_cuda_graph else 0)
        _check(self._lib.aotc_context_create_with_options(engine._engine_for(device), _device_code(device),
                                                          ctypes.byref(opts), ctypes.byref(out)))
        self._ptr = out.value

    def _validate(self, inputs: dict) -> dict[str, _Buffer]:
        expected = {t.name: t for t in self.engine.inputs}
        unknown = [k for k in inputs if k not in expected]
        missing = [k for k in expected if k not in inputs]
        if unknown or missing:
            parts = ([f"unknown input(s) {', '.join(map(repr, unknown))}"] if unknown else []) + \
                    ([f"missing input(s) {', '.join(map(repr, missing))}"] if missing else [])
            raise InputError(f"{'; '.join(parts)}; the engine takes "
                             f"{', '.join(f'{t.name!r}' for t in self.engine.inputs) or 'no inputs'}")
        return {name: _cuda_buffer(spec, inputs[name], "input", self.device)
                if hasattr(inputs[name], "__cuda_array_interface__")
                else _host_input(spec, inputs[name], "" if spec.is_static else self.engine.shape_text(spec))
                for name, spec in expected.items()}

    def set_input_shape(self, name: str, shape) -> None:
        """Set a dynamic input's shape for the runs that follow (checked against the engine's ranges)."""
        dims = (ctypes.c_int64 * max(1, len(shape)))(*[int(d) for d in shape])
        with self._lock:
            self._set_shape(name, dims, len(shape))

    def _set_shape(self, name: str, dims, rank: int) -> None:
        if not self._ptr:
            raise RuntimeFailure("context is closed")
        _check_input(self._lib.aotc_context_set_input_shape(self._ptr, name.encode(), rank, dims))

    def output_shape(self, name: str) -> tuple[int, ...]:
        """An output's shape at the input shapes set (InputError if they are out of range or disagree)."""
        with self._lock:
            return self._output_shape(name)

    def _output_shape(self, name: str) -> tuple[int, ...]:
        if not self._ptr:
            raise RuntimeFailure("context is closed")
        rank, dims = ctypes.c_size_t(), (ctypes.c_int64 * _MAX_RANK)()
        _check_input(self._lib.aotc_context_get_output_shape(self._ptr, name.encode(), ctypes.byref(rank), dims))
        return tuple(int(dims[r]) for r in range(rank.value))

    def _outputs(self, outputs: dict | None, shapes: dict) -> tuple[dict, dict[str, _Buffer]]:
        outputs = dict(outputs or {})
        specs = {t.name: t for t in self.engine.outputs}
        unknown = [k for k in outputs if k not in specs]
        if unknown:
            raise InputError(f"unknown output(s) {', '.join(map(repr, unknown))}; the engine returns "
                             f"{', '.join(map(repr, specs))}")
        bufs = {}
        for name, spec in specs.items():
            if name not in outputs:
                outputs[name] = np.empty(shapes[name], _np_dtype(spec.dtype))
            obj = outputs[name]
            bufs[name] = _cuda_buffer(spec, obj, "output", self.device, shapes[name]) \
                if hasattr(obj, "__cuda_array_interface__") else _host_output(spec, obj, shapes[name])
        return {name: outputs[name] for name in specs}, bufs

    def run(self, inputs: dict, outputs: dict | None = None) -> dict:
        """Run once; returns the outputs by name: new numpy arrays, or the arrays given in `outputs`.

        Inputs of a dynamic engine may have any shape in its ranges: the outputs come at the
        shapes the engine computes for them (and arrays given in `outputs` must have those).
        """
        ins = self._validate(inputs)
        lib = self._lib
        with self._lock:
            if not self._ptr:
                raise RuntimeFailure("context is closed")
            for spec in self.engine.inputs:
                if not spec.is_static:
                    shape = ins[spec.name].shape
                    self._set_shape(spec.name, (ctypes.c_int64 * max(1, len(shape)))(*shape), len(shape))
            shapes = {t.name: t.shape if t.is_static else self._output_shape(t.name) for t in self.engine.outputs}
            result, outs = self._outputs(outputs, shapes)
            stream = _stream_of(list(ins.values()) + list(outs.values()))
            for group, binds in ((ins, (lib.aotc_context_bind_input, lib.aotc_context_bind_host_input)),
                                 (outs, (lib.aotc_context_bind_output, lib.aotc_context_bind_host_output))):
                for name, b in group.items():
                    _check(binds[0 if b.on_device else 1](self._ptr, name.encode(), b.ptr, b.nbytes))
            _check(lib.aotc_context_enqueue(self._ptr, stream))
            _check(lib.aotc_context_synchronize(self._ptr))
        return result

    @property
    def uses_cuda_graph(self) -> bool:
        """True when the next run replays a captured CUDA graph."""
        return bool(self._ptr and self._lib.aotc_context_uses_cuda_graph(self._ptr))

    def close(self) -> None:
        with self._lock:
            if self._ptr:
                self._lib.aotc_context_release(self._ptr)
                self._ptr = None

    def __del__(self):
        if getattr(self, "_ptr", None):
            self._lib.aotc_context_release(self._ptr)
            self._ptr = None


def check_engine(data, device: str = "cpu") -> tuple[bool, str]:
    """Can this runtime run the engine (bytes or path) on `device` here, and why (not)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        with open(data, "rb") as f:
            data = f.read()
    data = bytes(data)
    lib = _load()
    why = ctypes.create_string_buffer(512)
    err = _take_status(lib.aotc_engine_check(data, len(data), _device_code(device), why, len(why)))
    return err is None, why.value.decode("utf-8", "replace")


def runtime_version() -> str:
    return _load().aotc_runtime_version().decode()
