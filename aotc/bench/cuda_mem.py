"""Device buffers for timing on the `cuda` device, without torch or cupy.

Benchmarks on a GPU time device-resident runs (inputs already on the GPU,
outputs left there), as trtexec's "GPU compute time" does; host copies would
otherwise dominate small models. `DeviceArray` allocates with the CUDA
driver API (cuda-bindings, an aotc dependency) in the device's primary
context, the one the aotc runtime and onnxruntime's CUDA provider use, and
exposes `__cuda_array_interface__` so aotc's Context.run binds it by
pointer. Only imported on the cuda path; needs a driver (libcuda).
"""
from __future__ import annotations

import numpy as np

_ctx = None


def _check(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        from aotc.errors import RuntimeFailure
        raise RuntimeFailure(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def ensure_context():
    """Make device 0's primary context current on this thread (once per process)."""
    global _ctx
    from cuda.bindings import driver as cu
    if _ctx is None:
        _check(cu.cuInit(0))
        dev = _check(cu.cuDeviceGet(0))
        _ctx = _check(cu.cuDevicePrimaryCtxRetain(dev))
    _check(cu.cuCtxSetCurrent(_ctx))


class DeviceArray:
    """A C-contiguous device allocation with numpy's shape and dtype."""

    def __init__(self, shape, dtype):
        from cuda.bindings import driver as cu
        ensure_context()
        self.shape, self.dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = int(_check(cu.cuMemAlloc(max(1, self.nbytes))))

    @classmethod
    def from_host(cls, array: np.ndarray) -> "DeviceArray":
        a = np.ascontiguousarray(array)
        d = cls(a.shape, a.dtype)
        d.copy_from(a)
        return d

    def copy_from(self, array: np.ndarray) -> None:
        from cuda.bindings import driver as cu
        a = np.ascontiguousarray(array, self.dtype)
        _check(cu.cuMemcpyHtoD(cu.CUdeviceptr(self.ptr), a.ctypes.data, self.nbytes))

    def copy_from_device(self, other: "DeviceArray") -> None:
        """Device-to-device copy (legacy stream: synchronize before another stream reads it)."""
        from cuda.bindings import driver as cu
        if other.nbytes != self.nbytes:
            raise ValueError(f"copy of {other.nbytes} bytes into a {self.nbytes}-byte device array")
        _check(cu.cuMemcpyDtoD(cu.CUdeviceptr(self.ptr), cu.CUdeviceptr(other.ptr), self.nbytes))

    def to_host(self) -> np.ndarray:
        from cuda.bindings import driver as cu
        out = np.empty(self.shape, self.dtype)
        _check(cu.cuMemcpyDtoH(out.ctypes.data, cu.CUdeviceptr(self.ptr), self.nbytes))
        return out

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None}

    def __del__(self):
        if getattr(self, "ptr", 0):
            try:
                from cuda.bindings import driver as cu
                cu.cuMemFree(cu.CUdeviceptr(self.ptr))
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
            self.ptr = 0


def synchronize() -> None:
    from cuda.bindings import driver as cu
    _check(cu.cuCtxSynchronize())


def new_stream() -> int:
    from cuda.bindings import driver as cu
    ensure_context()
    return int(_check(cu.cuStreamCreate(0)))


def stream_synchronize(stream: int) -> None:
    from cuda.bindings import driver as cu
    _check(cu.cuStreamSynchronize(cu.CUstream(stream)))
