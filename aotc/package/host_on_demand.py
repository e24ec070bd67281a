"""The cpu device's host library, built when an engine first runs on cpu instead of at compile time.

The host build (g++ over the kernels and the CUDA emulation header) was a
quarter of a cold `aotc compile`'s CPU time (MobileNetV2: 2.7 of 10 CPU-seconds,
NVRTC's two targets the rest), yet only the `cpu` device (validation) uses it. So `aotc compile` leaves it out
unless asked (`--host`), and the engine keeps what building it needs: the
kernels' CUDA source in its manifest ("kernel_source", zlib then base64; the
sanitizer reads it too) and the kernel names in build order (the keys of
"kernel_extents"). When aotc's Python binding opens a context on `cpu` for an
engine without a HOST_LIB section, `host_library` compiles it (host_compile,
cached by content hash like every kernel build, so it happens once per engine
per machine) and `with_host_build` gives the engine image with it attached.

The C runtime alone cannot do this (it runs no compiler): for `hello_engine`
or a serving process on the cpu device, compile with `--host`; a Triton model
repository for the cpu device gets the library attached (`copy_with_host_build`).
"""
from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

from aotc.errors import AotcError


def has_kernel_source(manifest: dict) -> bool:
    """Whether the engine carries what a host build needs (engines of aotc since the sanitizer)."""
    extra = manifest.get("extra", manifest)
    return isinstance(extra.get("kernel_source"), str) and isinstance(extra.get("kernel_extents"), dict)


def kernel_source(manifest: dict, what: str = "build a host library for") -> tuple[str, list[str]]:
    """(the kernels' CUDA source, their names in build order) from an engine's manifest.

    `manifest` is the MANIFEST section (its "extra" holds compile_model's fields) or
    those fields themselves (EnginePlan.manifest).
    """
    if not has_kernel_source(manifest):
        raise AotcError(f"cannot {what} this engine: it carries no kernel source (compiled by an older "
                        "aotc); compile it again")
    extra = manifest.get("extra", manifest)
    try:
        source = zlib.decompress(base64.b64decode(extra["kernel_source"])).decode()
    except (ValueError, zlib.error, UnicodeDecodeError) as e:
        raise AotcError(f"cannot {what} this engine: its kernel source is corrupt ({e})") from None
    return source, list(extra["kernel_extents"])


def host_library_status(plan) -> str:
    """Where an EnginePlan's cpu device library comes from: 'embedded', 'on first cpu run', or 'none'."""
    if plan.host_lib:
        return "embedded"
    return "on first cpu run" if has_kernel_source(plan.manifest) else "none"


def host_library(manifest: dict) -> bytes:
    """The host (cpu device) library of the engine whose manifest this is; cached by content."""
    from aotc.kernels.host_compile import compile_host
    source, names = kernel_source(manifest)
    return compile_host(source, names)     # the flags a compile-time build gets: one cache entry


def with_host_build(data: bytes) -> bytes:
    """The engine image `data` with its host library built and attached (unchanged if it has one)."""
    from aotc.package.engine_format import engine_bytes, read_engine
    plan = read_engine(data)
    if plan.host_lib:
        return data
    plan.host_lib = host_library(plan.manifest)
    return engine_bytes(plan)


def copy_with_host_build(src, dest) -> None:
    """Copy the engine file `src` to `dest`, its host library attached when it left it to the first cpu run
    (for a consumer that runs the C runtime alone: Triton's backend on the cpu device)."""
    from aotc.package.engine_format import read_manifest
    with open(src, "rb") as f:
        data = f.read()
    manifest = read_manifest(data)
    if not manifest.get("host_lib", True) and has_kernel_source(manifest):
        data = with_host_build(data)
    Path(dest).write_bytes(data)


def manifest_of(json_bytes: bytes) -> dict:
    """The MANIFEST section's JSON as a dict ({} when it cannot be read)."""
    try:
        out = json.loads(json_bytes)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}
