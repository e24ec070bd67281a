"""Compile generated CUDA C for the GPU without a GPU: NVRTC from PyPI wheels.

`compile_device(source, "sm_90")` returns a cubin (ELF), `"compute_90"` returns
PTX text. NVRTC runs in-process from the `nvidia-cuda-nvrtc` wheel, with the
CUDA headers of the `nvidia-cuda-runtime` wheel and aotc's own templates on
the include path, so no toolkit, driver or device is needed (docs/design.md,
principle 4). Results are cached by content hash (cache.py).

`compile_device_nvcc` is an optional cross-check with a local toolkit's nvcc.

Math semantics: IEEE, never `--use_fast_math`. The host build (cuda_host_emu.h)
runs the same source on libm and must compute what the GPU computes, so the
GPU gets `/` and sqrtf correctly rounded (div.rn, sqrt.rn), denormals kept
(no ftz), and CUDA's precise math library (expf, powf, sinf... within their
documented few-ulp bounds; powf of a negative base is finite). Fast math would
turn powf(-2, 2) into NaN (lg2.approx -> ex2.approx) and make tanhf, sinf, cosf
and `/` approximate. `-fmad=true` stays: a*b+c may become one fma, as every
GPU compiler does; the host rounds twice, which is within a tolerance's reach.
Which PTX instruction each emitted function becomes under these flags is pinned
in tests/kernels/test_gpu_math_ptx.py.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from aotc.errors import CompileError
from aotc.kernels.cache import cache_lookup, cache_store, cached_bytes
from aotc.kernels.template import check_filled

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
_TARGET_RE = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


@functools.lru_cache(maxsize=None)
def cuda_include_dir() -> Path:
    """`nvidia/cu13/include` of the nvidia-cuda-runtime wheel (cuda_fp16.h and friends)."""
    try:
        import nvidia.cu13
    except ImportError as e:  # pragma: no cover - a packaging error
        raise CompileError("CUDA headers not found: install the nvidia-cuda-runtime wheel") from e
    for base in nvidia.cu13.__path__:
        inc = Path(base) / "include"
        if (inc / "cuda_fp16.h").is_file():
            return inc
    raise CompileError("CUDA headers not found: nvidia/cu13/include has no cuda_fp16.h")


@functools.lru_cache(maxsize=None)
def cuda_package_versions() -> str:
    from importlib import metadata
    out = []
    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl"):
        try:
            out.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist}=?")
    return ",".join(out)


def templates_hash() -> str:
    """Hash of aotc's own headers; part of every kernel cache key."""
    h = hashlib.sha256()
    for p in sorted(TEMPLATES_DIR.glob("*")):
        if p.suffix in (".h", ".cuh"):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _check(result, what: str) -> None:
    from cuda.bindings import nvrtc
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed: {result.name}")


def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc
    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "version query")
    return (major, minor)


# Spelled out rather than left to defaults: these are what the host emulation
# assumes (see the module docstring), and they are part of every cache key.
MATH_FLAGS = ("-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-fmad=true")


def _options(target: str, fast_compile: bool = False) -> list[str]:
    opts = [f"--gpu-architecture={target}", "-std=c++17", "-default-device",
            f"-I{cuda_include_dir()}", f"-I{TEMPLATES_DIR}", *MATH_FLAGS]
    if fast_compile:        # NVRTC 12.8+: skip most optimization (ResNet-50's module: 0.55 s, not 3.9 s)
        opts.append("--Ofast-compile=max")
    return opts


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line:
            return line.strip()
    return log.strip().splitlines()[0] if log.strip() else "no log"


def _nvrtc_compile(source: str, target: str, options: list[str], with_ptx: bool = False):
    """The cubin (sm_XY) or PTX (compute_XY); with_ptx: (cubin, the PTX it was built from)."""
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"aotc_kernels.cu", 0, [], [])
    _check(err, "program creation")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        _, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        # Output buffers are bytearrays: NVRTC writes into them, and a 1-byte bytes object (an
        # empty log is just its NUL) is CPython's shared b" ", which every later " " would then be.
        log_buf = bytearray(log_size)
        nvrtc.nvrtcGetProgramLog(prog, log_buf)
        log = bytes(log_buf).rstrip(b"\0").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC compile for {target} failed: {_first_error(log)}", log=log)
        ptx = None
        if not target.startswith("sm_") or with_ptx:
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            _check(err, "PTX size")
            buf = bytearray(size)
            _check(nvrtc.nvrtcGetPTX(prog, buf)[0], "PTX fetch")
            ptx = bytes(buf).rstrip(b"\0")  # ptxas rejects the trailing NUL
        if not target.startswith("sm_"):
            return ptx
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "cubin size")
        buf = bytearray(size)
        _check(nvrtc.nvrtcGetCUBIN(prog, buf)[0], "cubin fetch")
        return (bytes(buf), ptx) if with_ptx else bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_device(source: str, target: str, *, fast_compile: bool = False) -> bytes:
    """Compile `source` for `target`: "sm_XY" gives a cubin, "compute_XY" gives PTX.

    `fast_compile` trades kernel speed for compile time (for quick iteration, not serving).
    """
    if not _TARGET_RE.match(target):
        raise CompileError(f"bad GPU target {target!r}: expected sm_XY or compute_XY, e.g. sm_90")
    check_filled(source)
    options = _options(target, fast_compile)
    return cached_bytes("nvrtc", _key(source, options), lambda: _nvrtc_compile(source, target, options))


def _key(source: str, options: list[str]) -> list[str]:
    # Include paths are left out of the key (they move between venvs);
    # what they hold is keyed by the package versions and templates_hash().
    flags = [o for o in options if not o.startswith("-I")]
    return [source, "\0".join(flags), f"nvrtc={nvrtc_version()}", cuda_package_versions(), templates_hash()]


def compile_device_with_ptx(source: str, sm_target: str, *, fast_compile: bool = False) -> tuple[bytes, bytes]:
    """(cubin for sm_XY, PTX for compute_XY) from one NVRTC run.

    Compiling for sm_XY produces the very PTX a compute_XY compile does (checked
    byte for byte on ViT's module), so the default targets (sm_80, sm_90 + PTX
    compute_90) need two front-end runs, not three. Both land in the cache under
    the keys compile_device uses.
    """
    if not re.match(r"sm_\d+\Z", sm_target):
        raise CompileError(f"bad GPU target {sm_target!r}: expected sm_XY")
    check_filled(source)
    ptx_target = "compute_" + sm_target[3:]
    sm_opts, ptx_opts = (_options(t, fast_compile) for t in (sm_target, ptx_target))
    cubin, ptx = cache_lookup("nvrtc", _key(source, sm_opts)), cache_lookup("nvrtc", _key(source, ptx_opts))
    if cubin is None or ptx is None:
        cubin, ptx = _nvrtc_compile(source, sm_target, sm_opts, with_ptx=True)
        cache_store("nvrtc", _key(source, sm_opts), cubin)
        cache_store("nvrtc", _key(source, ptx_opts), ptx)
    return cubin, ptx


def find_nvcc() -> str | None:
    """A local toolkit's nvcc, if there is one (never required)."""
    for cand in (os.environ.get("AOTC_NVCC"), "/usr/local/cuda/bin/nvcc", shutil.which("nvcc")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def compile_device_nvcc(source: str, target: str) -> bytes:
    """Cross-check build with nvcc (same options); raises CompileError when nvcc is absent."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found (set AOTC_NVCC or install the CUDA toolkit)")
    check_filled(source)
    kind = "-cubin" if target.startswith("sm_") else "-ptx"
    with tempfile.TemporaryDirectory(prefix="aotc-nvcc-") as tmp:
        src, out = Path(tmp) / "k.cu", Path(tmp) / "k.out"
        src.write_text(source)
        # nvcc brings its own CUDA headers; only aotc's templates are added.
        cmd = [nvcc, kind, f"-arch={target}", "-std=c++17", *MATH_FLAGS, f"-I{TEMPLATES_DIR}",
               "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log = proc.stdout + proc.stderr
            raise CompileError(f"nvcc compile for {target} failed: {_first_error(log)}", log=log)
        return out.read_bytes()
