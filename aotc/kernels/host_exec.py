"""Load a host build (host_compile.compile_host) and launch its kernels from Python.

For tests and the reference path only; engines run host builds through the C
runtime's `cpu` device, with the same launch ABI:

    lib = HostLibrary(compile_host(src, ["add"]))
    lib.launch("add", grid=4, block=256, args=[x, y, np.int32(n)])

Arrays are passed as device pointers would be (their data address, so they
must be C-contiguous); numpy scalars are passed by value with their own type,
and Python int/float as int32/float32. ctypes drops the GIL during a launch,
so several Python threads may launch at once.

A sanitizing build (host_compile.compile_host(..., sanitize=True)) gets each
array argument's byte size as its buffer's extent, and a launch that broke a
rule raises SanitizerError with the violations as dicts (kind, kernel, block,
thread, address, size, detail).
"""
from __future__ import annotations

import ctypes
import json
import os
import tempfile

import numpy as np

from aotc.errors import RuntimeFailure

_LAUNCH_ARGTYPES = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint), ctypes.c_uint,
                    ctypes.POINTER(ctypes.c_void_p)]


def _dim3(v, what: str) -> ctypes.Array:
    dims = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(dims) <= 3 or any(int(d) < 0 for d in dims):
        raise ValueError(f"{what} must be an int or 1-3 non-negative ints, got {v!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    return (ctypes.c_uint * 3)(*dims)


def _arg_value(i: int, a) -> np.ndarray:
    """A 0-d or 1-d array holding what the argument slot must point at."""
    if isinstance(a, np.ndarray):
        if not a.flags.c_contiguous:
            raise ValueError(f"argument {i}: array must be C-contiguous")
        return np.array([a.ctypes.data], dtype=np.uintp)
    if isinstance(a, np.generic):
        return np.array(a)
    if isinstance(a, (bool, int)):
        return np.array(a, dtype=np.int32)
    if isinstance(a, float):
        return np.array(a, dtype=np.float32)
    raise TypeError(f"argument {i}: expected a numpy array or scalar, got {type(a).__name__}")


def _name_taken(path: str) -> bool:
    """Whether a loaded library already has this name (dlopen would return it, not open the file)."""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    import _ctypes
    _ctypes.dlclose(lib._handle)
    return True


def _fresh_memfd() -> int:
    """A memfd whose /proc/self/fd/N path names no loaded library.

    glibc matches a dlopen name against loaded libraries before it opens any
    file. The C runtime's cpu device closes its memfd right after dlopen, so
    its library keeps the name /proc/self/fd/N of a number this process will
    hand out again: loading through that name would return the runtime's
    library instead of these bytes. Taken numbers are held open while looking
    for a free one, so each try gets a new number.
    """
    held = []
    fd = os.memfd_create("aotc-host-kernels", 0)
    while _name_taken(f"/proc/self/fd/{fd}"):
        held.append(fd)
        fd = os.memfd_create("aotc-host-kernels", 0)
    for h in held:
        os.close(h)
    return fd


class SanitizerError(RuntimeFailure):
    """A sanitized launch broke a rule the GPU enforces; `violations` lists them."""

    def __init__(self, kernel: str, violations: list[dict]):
        self.violations = violations
        kinds: dict[str, int] = {}
        for v in violations:
            kinds[v["kind"]] = kinds.get(v["kind"], 0) + v.get("unlisted", 1)
        first = next((v for v in violations if "detail" in v), {})
        summary = ", ".join(f"{n} {k}" for k, n in kinds.items())
        super().__init__(f"sanitizer: kernel {kernel}: {summary}; first: {first.get('kind')} in block "
                         f"{first.get('block')}, thread {first.get('thread')}: {first.get('detail')}")


def parse_violations(text: str) -> list[dict]:
    """The JSON lines a sanitizing build reports, as dicts."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class HostLibrary:
    """A loaded host build of some kernels."""

    def __init__(self, so_bytes: bytes):
        # A memfd has no name on disk to collide with; it stays open while the
        # library is loaded so its /proc path cannot be reused by another.
        self._fd = _fresh_memfd() if hasattr(os, "memfd_create") else None
        if self._fd is not None:
            os.write(self._fd, so_bytes)
            self._path = f"/proc/self/fd/{self._fd}"
        else:  # pragma: no cover - non-Linux
            fd, self._path = tempfile.mkstemp(suffix=".so", prefix="aotc-host-")
            with os.fdopen(fd, "wb") as f:
                f.write(so_bytes)
        try:
            self._lib = ctypes.CDLL(self._path)
        except OSError as e:
            self._release_file()
            raise RuntimeFailure(f"cannot load host kernel library: {e}") from e
        self._lib.aotc_host_abi.restype = ctypes.c_char_p
        self._lib.aotc_host_status_string.restype = ctypes.c_char_p
        self._lib.aotc_host_status_string.argtypes = [ctypes.c_int]
        self.abi = self._lib.aotc_host_abi().decode()
        self.sanitizing = hasattr(self._lib, "aotc_host_sanitizer")
        if self.sanitizing:
            self._lib.aotc_host_sanitizer_take.restype = ctypes.c_char_p
            self._lib.aotc_host_sanitizer_extents.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint]
        self.profiling = hasattr(self._lib, "aotc_host_profile_take")
        if self.profiling:
            self._lib.aotc_host_profile_take.restype = ctypes.c_char_p
        self._launchers: dict[str, ctypes._CFuncPtr] = {}

    def _release_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        else:  # pragma: no cover
            os.unlink(self._path)

    def _launcher(self, name: str):
        fn = self._launchers.get(name)
        if fn is None:
            try:
                fn = getattr(self._lib, f"aotc_host_launch_{name}")
            except AttributeError:
                raise RuntimeFailure(f"host library has no kernel {name!r}") from None
            fn.argtypes = _LAUNCH_ARGTYPES
            fn.restype = ctypes.c_int
            self._launchers[name] = fn
        return fn

    def launch(self, name: str, grid, block, args: list, smem: int = 0) -> None:
        """Run kernel `name` on the CPU; blocks until it has finished."""
        fn = self._launcher(name)
        values = [_arg_value(i, a) for i, a in enumerate(args)]
        params = (ctypes.c_void_p * max(1, len(values)))(*[v.ctypes.data for v in values])
        if self.sanitizing:
            extents = (ctypes.c_uint64 * max(1, len(args)))(
                *[a.nbytes if isinstance(a, np.ndarray) else 0 for a in args])
            self._lib.aotc_host_sanitizer_extents(extents, len(args))
        status = fn(_dim3(grid, "grid"), _dim3(block, "block"), int(smem), params)
        if self.sanitizing:
            found = parse_violations(self._lib.aotc_host_sanitizer_take().decode())
            if found:
                raise SanitizerError(name, found)
        if status != 0:
            why = self._lib.aotc_host_status_string(status).decode()
            raise RuntimeFailure(f"host kernel {name} failed with status {status}: {why} "
                                 f"(grid {grid}, block {block}, smem {smem})")

    def take_profile(self) -> list[dict]:
        """A profiling build's counters, one dict per launch since the last call."""
        if not self.profiling:
            raise RuntimeFailure("this host library is not a profiling build (compile_host(profile=True))")
        return parse_violations(self._lib.aotc_host_profile_take().decode())

    def close(self) -> None:
        """Unload the library; no launch may be running or follow.

        The memfd is closed only after dlclose: glibc matches loaded libraries
        by path, so /proc/self/fd/N must not name a new file while the old
        library is still loaded. (The build has no STB_GNU_UNIQUE symbols, so
        dlclose really unloads it.)
        """
        if getattr(self, "_lib", None) is not None:
            import _ctypes
            _ctypes.dlclose(self._lib._handle)
            self._lib = None
            self._launchers.clear()
            self._release_file()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
