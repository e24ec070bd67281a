"""ctypes access to the stand-in CUDA driver and a small kernel module for its tests.

The kernels are compiled the way aotc compiles engines: NVRTC for the cubin
(and PTX), g++ with the host emulation for the host build the stand-in runs.
"""
from __future__ import annotations

import ctypes
import functools
import os
import tempfile

import numpy as np

from aotc.kernels.host_compile import compile_host
from aotc.kernels.nvrtc_compile import compile_device, compile_device_with_ptx
from aotc.testing.fakecuda import library_path

SOURCE = r'''
#include "aotc_prelude.cuh"
struct Three { float a, b, c; };
// y[i] = a * x[i] + b + t.b for i < n; at most 128 threads (launch bounds).
extern "C" __global__ void __launch_bounds__(128) axpb(float *y, const float *x, int n, char c,
                                                        double b, Three t) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (float)c * x[i] + (float)b + t.b;
}
// y[i] = i through dynamic shared memory (one block of n threads).
extern "C" __global__ void staged(float *y) {
  AOTC_DYN_SMEM(float, s);
  s[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  y[threadIdx.x] = s[threadIdx.x];
}
'''
KERNELS = ["axpb", "staged"]

INVALID_VALUE, INVALID_DEVICE, INVALID_CONTEXT, INVALID_HANDLE = 1, 101, 201, 400
NO_BINARY_FOR_GPU, ILLEGAL_STATE, ILLEGAL_ADDRESS = 209, 401, 700
NOT_SUPPORTED, CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED = 801, 900, 901


class Three(ctypes.Structure):
    _fields_ = [("a", ctypes.c_float), ("b", ctypes.c_float), ("c", ctypes.c_float)]


@functools.lru_cache(maxsize=None)
def images() -> dict:
    """cubins for sm_80 and sm_90, the sm_90 PTX, and the host build's dlopen handle."""
    cubin90, ptx90 = compile_device_with_ptx(SOURCE, "sm_90")
    host = compile_host(SOURCE, KERNELS)
    fd, path = tempfile.mkstemp(suffix=".so")
    with os.fdopen(fd, "wb") as f:
        f.write(host)
    lib = ctypes.CDLL(path)
    os.unlink(path)
    return {"sm_90": cubin90, "sm_80": compile_device(SOURCE, "sm_80"), "ptx": ptx90 + b"\0",
            "host_lib": lib, "host": lib._handle}


class Driver:
    """The stand-in, loaded in this process under its own path (not as libcuda.so.1)."""

    def __init__(self):
        self.lib = ctypes.CDLL(library_path())
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.lib.aotcFakeCudaAttachHostBuild.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.lib.aotcFakeCudaCounter.restype = ctypes.c_ulonglong
        self.lib.aotcFakeCudaCounter.argtypes = [ctypes.c_char_p]
        for name in ("cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2"):
            getattr(self.lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        self.lib.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                  ctypes.c_void_p]
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        self.lib.cuFuncGetParamInfo.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        assert self.lib.cuInit(0) == 0

    def __getattr__(self, name):
        fn = getattr(self.lib, name)
        if fn.argtypes:
            return fn
        # Handles and device addresses are 64-bit: ctypes would pass a bare int as a C int.
        return lambda *args: fn(*[ctypes.c_void_p(a) if isinstance(a, int) and not -2**31 <= a < 2**31
                                  else a for a in args])

    def ok(self, r):
        assert r == 0, f"CUDA error {r}"

    def out(self, fn, *args, kind=ctypes.c_void_p):
        v = kind()
        self.ok(fn(ctypes.byref(v), *args))
        return v.value

    def new_context(self):
        ctx = self.out(self.lib.cuCtxCreate_v2, 0, 0)
        return ctx

    def load(self, which: str = "sm_90", attach: bool = True):
        """(status, module handle) for an image, with the host build attached."""
        image = images()[which]
        buf = ctypes.create_string_buffer(image, len(image))
        if attach:
            self.ok(self.lib.aotcFakeCudaAttachHostBuild(ctypes.addressof(buf), images()["host"]))
        mod = ctypes.c_void_p()
        log = ctypes.create_string_buffer(512)
        opts = (ctypes.c_int * 2)(5, 6)
        vals = (ctypes.c_void_p * 2)(ctypes.addressof(log), 512)
        r = self.lib.cuModuleLoadDataEx(ctypes.byref(mod), buf, 2, opts, vals)
        self.last_log = log.value.decode()
        return r, mod.value

    def function(self, mod, name: str):
        return self.out(self.lib.cuModuleGetFunction, ctypes.c_void_p(mod), name.encode())

    def alloc(self, nbytes: int) -> int:
        return self.out(self.lib.cuMemAlloc_v2, ctypes.c_size_t(nbytes), kind=ctypes.c_uint64)

    def upload(self, a: np.ndarray) -> int:
        p = self.alloc(a.nbytes)
        self.ok(self.lib.cuMemcpyHtoD_v2(p, a.ctypes.data, a.nbytes))
        return p

    def download(self, p: int, n: int) -> np.ndarray:
        a = np.empty(n, np.float32)
        self.ok(self.lib.cuMemcpyDtoH_v2(a.ctypes.data, p, a.nbytes))
        return a


def axpb_params(y: int, x: int, n: int, c: int = 2, b: float = 0.5, t_b: float = 0.25):
    """cuLaunchKernel's kernelParams for axpb, and the objects that must stay alive."""
    vals = [ctypes.c_uint64(y), ctypes.c_uint64(x), ctypes.c_int(n), ctypes.c_char(c),
            ctypes.c_double(b), Three(0.0, t_b, 0.0)]
    arr = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    return arr, vals
