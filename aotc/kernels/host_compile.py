"""Compile generated CUDA C for the host CPU, as a shared library.

The kernel source is compiled unchanged with g++ (`$CXX` overrides), with
templates/cuda_host_emu.h force-included, so the text NVRTC compiles for the
GPU is the text that runs on the CPU (docs/design.md, principle 3). A generated
wrapper exports one C entry point per kernel:

    int aotc_host_launch_<name>(const unsigned *grid3, const unsigned *block3,
                                unsigned dyn_smem, void **params);
    const char *aotc_host_abi(void);                 /* "aotc-host-1" */
    const char *aotc_host_status_string(int status);

`params` follows cuLaunchKernel: an array of pointers to the argument values,
whose types the wrapper takes from the kernel's own signature. A launch
returns 0 on success, else a status (1 bad launch shape, 2 out of memory,
3 deadlock, 4 internal error).

A sanitizing build (`sanitize=True`, or AOTC_SANITIZE=1 in the environment,
which puts the kernel test suite under it) compiles the kernels with
outline address instrumentation whose hooks live in
templates/cuda_host_sanitizer.h, and exports three more entry points:

    void aotc_host_sanitizer_extents(const uint64_t *bytes, unsigned n);
    const char *aotc_host_sanitizer_take(void);      /* JSON lines */
    int aotc_host_sanitizer(void);                   /* 1 */

Most of a build's time goes into the emulation header and the STL/CUDA
headers it pulls in, so that header is precompiled once per compiler, flags
and header content into the cache directory and reused by every build. The
precompiled header costs more than it saves the build that makes it
(MobileNetV2's kernels: 2.3 CPU-s with the plain header, 4.4 building the PCH
first, 1.5 with it ready), so the first build of a cache goes without it and
only the second one makes it: one compile pays nothing, the test suite's
hundreds of builds still get it.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from aotc.errors import CompileError
from aotc.kernels.cache import atomic_write, cache_dir, cache_enabled, cached_bytes
from aotc.kernels.nvrtc_compile import (TEMPLATES_DIR, cuda_include_dir, cuda_package_versions,
                                        templates_hash)
from aotc.kernels.template import check_filled

HOST_ABI = "aotc-host-1"
EMU_HEADER = TEMPLATES_DIR / "cuda_host_emu.h"
SANITIZER_HEADER = TEMPLATES_DIR / "cuda_host_sanitizer.h"
PROFILE_HEADER = TEMPLATES_DIR / "cuda_host_profile.h"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_WRAPPER_HEAD = """\
#include "kernels.cu"
#define AOTC_EXPORT extern "C" __attribute__((visibility("default")))
AOTC_EXPORT const char *aotc_host_abi(void) { return "%s"; }
AOTC_EXPORT const char *aotc_host_status_string(int s) { return aotc_emu::status_string(s); }
"""
_WRAPPER_KERNEL = """\
AOTC_EXPORT int aotc_host_launch_{name}(const unsigned *grid3, const unsigned *block3,
                                        unsigned dyn_smem, void **params) {{
{sanitize}  return aotc_emu::launch_kernel(&{name}, grid3, block3, dyn_smem, params);
}}
"""
_WRAPPER_SANITIZER = """\
AOTC_EXPORT int aotc_host_sanitizer(void) { return 1; }
AOTC_EXPORT void aotc_host_sanitizer_extents(const uint64_t *bytes, unsigned n) {
  aotc_san::tl_extents = bytes;
  aotc_san::tl_extent_count = n;
}
AOTC_EXPORT const char *aotc_host_sanitizer_take(void) {
  static std::string last;
  last = aotc_san::take();
  return last.c_str();
}
"""
_WRAPPER_PROFILE = """\
AOTC_EXPORT const char *aotc_host_profile_take(void) {
  static std::string last;
  last = aotc_prof::take();
  return last.c_str();
}
"""
# -fno-tree-sra keeps a float4 copy one 16-byte access (the alignment check
# needs it); call threshold 0: every access is a call to our hooks, no shadow.
_SANITIZE_FLAGS = ["-DAOTC_SANITIZE", "-fsanitize=kernel-address", "--param=asan-stack=0",
                   "--param=asan-globals=0", "--param=asan-instrumentation-with-call-threshold=0",
                   "-fno-tree-sra"]


def sanitize_requested() -> bool:
    """AOTC_SANITIZE=1: host builds are sanitizing ones (the kernel suite's switch)."""
    return os.environ.get("AOTC_SANITIZE", "") not in ("", "0")


def _cxx() -> list[str]:
    return shlex.split(os.environ.get("CXX") or "g++")


@functools.lru_cache(maxsize=None)
def compiler_version(cxx: tuple[str, ...]) -> str:
    try:
        proc = subprocess.run([*cxx, "--version"], capture_output=True, text=True)
    except OSError as e:
        raise CompileError(f"host compiler {cxx[0]!r} not found: {e.strerror}") from e
    if proc.returncode != 0:
        raise CompileError(f"host compiler {cxx[0]!r} does not run", log=proc.stderr)
    return proc.stdout


def _flags(opt: str, sanitize: bool | str = False) -> list[str]:
    # -U_FORTIFY_SOURCE: fortified longjmp aborts on fiber switches (the
    # header undefines it too, but distributions may add it to the driver).
    return ["-std=c++20", opt, "-fPIC", "-pthread", "-Wno-unknown-pragmas",
            "-fvisibility=hidden", "-U_FORTIFY_SOURCE", *(_SANITIZE_FLAGS if sanitize else []),
            *(["-DAOTC_PROFILE"] if sanitize == "profile" else [])]


def _includes() -> list[str]:
    inc = cuda_include_dir()
    return [f"-I{inc}", f"-I{inc / 'cccl'}", f"-I{TEMPLATES_DIR}"]


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line:
            return line.strip()
    lines = log.strip().splitlines()
    return lines[0] if lines else "no output"


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise CompileError(f"{what}: cannot run {cmd[0]!r}: {e.strerror}") from e
    if proc.returncode != 0:
        log = proc.stdout + proc.stderr
        raise CompileError(f"{what} failed: {_first_error(log)}", log=log)


def _pch_key(cxx: list[str], opt: str, sanitize: bool | str) -> str:
    h = hashlib.sha256()
    for part in (EMU_HEADER.read_bytes(), SANITIZER_HEADER.read_bytes(), PROFILE_HEADER.read_bytes(), compiler_version(tuple(cxx)).encode(),
                 " ".join(_flags(opt, sanitize)).encode(), str(cuda_include_dir()).encode(),
                 cuda_package_versions().encode()):
        h.update(part + b"\0")
    return h.hexdigest()[:32]


def precompiled_header(opt: str = "-O1", sanitize: bool | str = False) -> Path | None:
    """The emulation header to force-include, with a ready .gch beside it.

    Returns None when caching is off, for the first build of a cache (see the
    module docstring) or when the PCH cannot be built; the caller then includes
    the plain header (correct, only slower).
    """
    if not cache_enabled() or os.environ.get("AOTC_NO_PCH") == "1":
        return None
    cxx = _cxx()
    folder = cache_dir() / "host-pch" / _pch_key(cxx, opt, sanitize)
    header, gch = folder / "cuda_host_emu.h", folder / "cuda_host_emu.h.gch"
    if gch.is_file() and header.is_file():
        return header
    wanted = folder / "wanted"          # an earlier build went without it: from now on it pays
    try:
        if not wanted.is_file():
            atomic_write(wanted, b"")
            return None
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="aotc-pch-") as tmp:
            out = Path(tmp) / "cuda_host_emu.h.gch"
            _run([*cxx, *_flags(opt, sanitize), *_includes(), "-x", "c++-header", str(EMU_HEADER),
                  "-o", str(out)], "precompiling cuda_host_emu.h")
            # Header first: g++ uses a .gch only next to a header it would include.
            atomic_write(header, EMU_HEADER.read_bytes())
            atomic_write(gch, out.read_bytes())
    except (CompileError, OSError):
        return None
    return header


def _sanitize_prologue(name: str, extents: list[int] | None) -> str:
    """Tell the sanitizer which kernel runs and, for engines, its buffers' sizes."""
    if extents is None:
        table, ptr = "", "nullptr"
    else:
        table = f"  static const uint64_t extents[] = {{{', '.join(f'{int(e)}ull' for e in extents) or '0'}}};\n"
        ptr = "extents"
    return f'{table}  aotc_san::tl_pending.kernel = "{name}";\n  aotc_san::tl_pending.extents = {ptr};\n'


def _wrapper(kernel_names: list[str], sanitize: bool | str = False,
             extents: dict[str, list[int]] | None = None) -> str:
    body = "".join(_WRAPPER_KERNEL.format(
        name=n, sanitize=_sanitize_prologue(n, (extents or {}).get(n)) if sanitize else "")
        for n in kernel_names)
    return (_WRAPPER_HEAD % HOST_ABI + (_WRAPPER_SANITIZER if sanitize else "")
            + (_WRAPPER_PROFILE if sanitize == "profile" else "") + body)


def _build(source: str, kernel_names: list[str], opt: str, sanitize: bool | str = False,
           extents: dict[str, list[int]] | None = None) -> bytes:
    cxx = _cxx()
    header = precompiled_header(opt, sanitize) or EMU_HEADER
    with tempfile.TemporaryDirectory(prefix="aotc-host-") as tmp:
        d = Path(tmp)
        (d / "kernels.cu").write_text(source)
        (d / "wrapper.cpp").write_text(_wrapper(kernel_names, sanitize, extents))
        out = d / "kernels.so"
        cmd = [*cxx, *_flags(opt, sanitize), "-shared", "-Winvalid-pch", *_includes(), "-include",
               str(header), str(d / "wrapper.cpp"), "-o", str(out)]
        names = ", ".join(kernel_names)
        _run(cmd, f"host compile of kernels {names}")
        return out.read_bytes()


def compile_host(source: str, kernel_names: list[str], *, opt: str = "-O1", sanitize: bool | None = None,
                 extents: dict[str, list[int]] | None = None, profile: bool = False) -> bytes:
    """Compile `source` for the host emulation; returns the shared library's bytes.

    `sanitize` (default: AOTC_SANITIZE set) makes a sanitizing build; `extents`
    then gives, per kernel, the byte size of each parameter's buffer (engines;
    HostLibrary passes its arrays' sizes at launch instead). `profile` makes a
    profiling build instead: the sanitizer's hooks count each warp's global
    sectors and shared-memory wavefronts (templates/cuda_host_profile.h).
    """
    if profile:
        sanitize = "profile"
    elif sanitize is None:
        sanitize = sanitize_requested()
    if not kernel_names:
        raise CompileError("host compile: no kernel names given")
    for name in kernel_names:
        if not _IDENT.match(name):
            raise CompileError(f"host compile: kernel name {name!r} is not a C identifier")
    if len(set(kernel_names)) != len(kernel_names):
        raise CompileError(f"host compile: kernel names repeat: {kernel_names}")
    if not re.match(r"^-O[0-3sg]?$", opt):
        raise CompileError(f"host compile: bad optimisation flag {opt!r}")
    check_filled(source)
    cxx = _cxx()
    key = [source, "\0".join(kernel_names), " ".join(_flags(opt, sanitize)), compiler_version(tuple(cxx)),
           templates_hash(), cuda_package_versions(), HOST_ABI]
    if sanitize:
        key.append(repr(sorted((extents or {}).items())))
    return cached_bytes("host", key, lambda: _build(source, kernel_names, opt, sanitize, extents))


def have_host_compiler() -> bool:
    return shutil.which(_cxx()[0]) is not None
