"""A stand-in for the CUDA driver, so aotc's cuda path runs on a machine without a GPU.

The C library beside this file (fakecuda_*.c) implements, on the CPU, the
driver entry points aotc's runtime uses: contexts, memory, copies, streams,
events, modules (it reads each cubin's or PTX's kernels and parameter
layout), launches (run through the engine's host build, the same CUDA C
compiled for the CPU) and CUDA-graph capture and replay. It refuses what a
real driver refuses, with the same error codes. The runtime loads it instead
of libcuda.so.1 when `AOTC_LIBCUDA` names it:

    AOTC_LIBCUDA=$(python -m aotc.testing.fakecuda) aotc run model.engine --device cuda

`python -m aotc.testing.fakecuda --env` prints shell assignments that also
make cuda-bindings load it (a directory holding it as libcuda.so.1, put on
LD_LIBRARY_PATH). It is a test tool: results are the host build's, and
timings say nothing about a GPU.

The library is `_fakecuda.so` in aotc/testing (built by `pip install`, see
setup.py) unless the C sources beside this file are newer; else it is
compiled once with `cc` (or $CC) into the cache directory, keyed by a hash
of the sources.
"""
from __future__ import annotations

import glob
import hashlib
import os

from aotc.package.c_build import build_cached, cache_dir

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = ["fakecuda_core.c", "fakecuda_exec.c", "fakecuda_module.c", "fakecuda_image.c", "fakecuda_queue.c"]
_HEADERS = ["fakecuda.h", "fakecuda_state.h"]


def _build_cached() -> str:
    return build_cached("stand-in CUDA driver", _HERE, _SOURCES, _HEADERS, "fakecuda")


def library_path() -> str:
    """Path of the stand-in driver library, building it into the cache if needed."""
    built = sorted(glob.glob(os.path.join(_HERE, "..", "_fakecuda*.so")))
    if not built:
        return _build_cached()
    checkout = os.path.exists(os.path.join(_HERE, "..", "..", "..", "setup.py"))
    src_mtime = max(os.path.getmtime(os.path.join(_HERE, f)) for f in _SOURCES + _HEADERS)
    if checkout and os.path.getmtime(built[0]) < src_mtime:
        return _build_cached()
    return os.path.abspath(built[0])


def libcuda_dir() -> str:
    """A directory holding the stand-in as `libcuda.so.1`, for LD_LIBRARY_PATH (cuda-bindings)."""
    lib = library_path()
    d = os.path.join(cache_dir(), "fakecuda-libdir-" + hashlib.sha256(lib.encode()).hexdigest()[:12])
    os.makedirs(d, exist_ok=True)
    link = os.path.join(d, "libcuda.so.1")
    if os.path.realpath(link) != os.path.realpath(lib):
        tmp = f"{link}.{os.getpid()}"
        os.symlink(lib, tmp)
        os.replace(tmp, link)
    return d


def environment(arch: int | None = None) -> dict[str, str]:
    """Variables that make a new process use the stand-in (the runtime and cuda-bindings)."""
    env = {"AOTC_LIBCUDA": library_path(),
           "LD_LIBRARY_PATH": os.pathsep.join(p for p in (libcuda_dir(), os.environ.get("LD_LIBRARY_PATH"))
                                              if p)}
    if arch is not None:
        env["AOTC_FAKECUDA_ARCH"] = str(arch)
    return env


def active() -> bool:
    """Whether this process's cuda device is the stand-in ($AOTC_LIBCUDA names it).

    The stand-in runs kernels through the engine's host build, so code that
    compiles engines for the cuda device alone must keep the host build then.
    """
    path = os.environ.get("AOTC_LIBCUDA")
    if not path:
        return False
    import ctypes
    try:
        return hasattr(ctypes.CDLL(path), "aotcFakeCudaAttachHostBuild")
    except OSError:
        return False
