"""Run an engine under the host emulation's sanitizer (`aotc run ENGINE --sanitize`).

An engine's host build is compiled without instrumentation, so that normal
runs pay nothing. The engine also carries what a sanitizing build needs, in
its manifest's extra fields: the kernels' CUDA source ("kernel_source", zlib
then base64) and, per kernel, the byte size of each pointer parameter's buffer
("kernel_extents"; a view's extent runs to the end of the buffer it slices).
sanitized_engine() rebuilds the host library from them as a sanitizing build
(host_compile.compile_host(sanitize=True)) and returns an engine image that
runs it through the same C runtime and cpu device. Rebuilding needs g++ and
the CUDA headers, as any host build does, but only when sanitizing.

The sanitizing library appends one JSON line per violation to the file named
by AOTC_SANITIZE_REPORT (templates/cuda_host_sanitizer.h); summary_lines()
turns them into one line per kind.
"""
from __future__ import annotations

import base64
import json
import zlib

from aotc.errors import AotcError


def kernel_extents(kernels) -> dict[str, list[int]]:
    """Per kernel name: the bytes each launch argument may touch, in argument order.

    Arguments: the region inputs (a view: to the end of its source buffer), the
    output, extra outputs, then split-K's f32 workspace and u32 tile counters.
    A kernel launched several times gets the largest extent per argument. A dynamic
    tensor's extent is its size at the top of the ranges (the buffer that fits every run).
    """
    out: dict[str, list[int]] = {}
    for k in kernels:
        ext = []
        for v in k.params[:-1]:
            if v in k.views:
                src, off = k.views[v]
                ext.append(src.type.max_nbytes - off)
            else:
                ext.append(v.type.max_nbytes)
        ext.append(k.params[-1].type.max_nbytes)
        ext += [v.type.max_nbytes for v in k.extra_outputs]
        if k.splits > 1:
            ext += [k.workspace, 4 * k.counters]
        prev = out.get(k.name)
        out[k.name] = ext if prev is None else [max(a, b) for a, b in zip(prev, ext)]
    return out


def manifest_fields(source: str, kernels) -> dict:
    """What compile_model stores in the manifest so that the engine can be sanitized later."""
    packed = base64.b64encode(zlib.compress(source.encode(), 9)).decode("ascii")
    return {"kernel_source": packed, "kernel_extents": kernel_extents(kernels)}


def _source_of(plan, profile: bool) -> tuple[str, dict]:
    packed, extents = plan.manifest.get("kernel_source"), plan.manifest.get("kernel_extents")
    what = "profile" if profile else "sanitize"
    if not isinstance(packed, str) or not isinstance(extents, dict):
        raise AotcError(f"cannot {what} this engine: it carries no kernel source (compiled by an older "
                        "aotc); compile it again")
    try:
        return zlib.decompress(base64.b64decode(packed)).decode(), extents
    except (ValueError, zlib.error, UnicodeDecodeError) as e:
        raise AotcError(f"cannot {what} this engine: its kernel source is corrupt ({e})") from e


def kernel_source(data: bytes) -> str:
    """The CUDA source of engine image `data`'s kernels (what a profiling build is compiled from)."""
    from aotc.package.engine_format import read_engine
    return _source_of(read_engine(data), True)[0]


def sanitized_engine(data: bytes, profile: bool = False) -> bytes:
    """The engine image `data` with its host build replaced by a sanitizing (or profiling) one."""
    from aotc.kernels.host_compile import compile_host
    from aotc.package.engine_format import engine_bytes, read_engine
    plan = read_engine(data)
    source, extents = _source_of(plan, profile)
    names = list(dict.fromkeys(ln.kernel for ln in plan.launches))
    plan.host_lib = compile_host(source, names, sanitize=True, profile=profile,
                                 extents={n: [int(e) for e in extents.get(n, [])] for n in names})
    return engine_bytes(plan)


def read_report(path) -> list[dict]:
    """The violations a sanitized run appended to `path` (none when the file is absent)."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def summary_lines(violations: list[dict]) -> list[str]:
    """One line per violation kind (its count and first instance), then the total."""
    by_kind: dict[str, list[dict]] = {}
    counts: dict[str, int] = {}
    for v in violations:       # an {"kind", "unlisted": n} line counts n not listed
        if "detail" in v:
            by_kind.setdefault(v["kind"], []).append(v)
        counts[v["kind"]] = counts.get(v["kind"], 0) + int(v.get("unlisted", 1))
    lines = []
    for kind, vs in by_kind.items():
        n = counts[kind]
        first = vs[0]
        where = (f"kernel {first['kernel']}, block {tuple(first['block'])}, thread {tuple(first['thread'])}, "
                 f"address {first['address']}: {first['detail']}")
        lines.append(f"sanitizer: {n} {kind} violation{'s' if n != 1 else ''}; first: {where}")
    total = sum(counts.values())
    if total:
        lines.append(f"sanitizer: {total} violation{'s' if total != 1 else ''} in all")
    return lines
