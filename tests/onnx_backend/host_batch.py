"""Build the host libraries of many node cases at once, shared and cached.

A g++ run costs ~0.5 s of fixed overhead (PCH load, link) plus ~20 ms per
kernel, so compiling each of ~1,900 engines alone would take ~15 minutes.
Instead every case is compiled once without a host build (milliseconds),
the cases are grouped in name order into chunks of about CHUNK_KERNELS
distinct kernels, and one library per chunk is built from the union of its
kernels (deduplicated by name: names are content hashes). Libraries go
through aotc's content-hash cache, so a second process (an xdist worker)
or a second run gets them for free; a file lock per chunk lets two workers
build different chunks at the same time (they walk the chunks in opposite
orders) instead of the same one twice.
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager

from aotc.errors import AotcError, CompileError
from aotc.kernels.cache import cache_dir, content_key
from aotc.kernels.host_compile import compile_host
from tests.onnx_backend.backend import SHARED, compile_frozen

CHUNK_KERNELS = 120


def case_feeds(case) -> dict:
    from tests.onnx_backend.backend import as_array, real_inputs
    inputs = [as_array(v) for v in case.data_sets[0][0]]
    return dict(zip([i.name for i in real_inputs(case.model)], inputs))


def case_kernels(case) -> list | None:
    """The kernels of `case`'s engine, or None if it does not compile."""
    try:
        result, _ = compile_frozen(case.model, case_feeds(case), host=False)
    except AotcError:
        return None
    except Exception:   # an importer/codegen bug: the test itself reports it
        return None
    return result.kernels


@contextmanager
def _locked(key: str):
    folder = cache_dir() / "host-locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / key[:32], "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def chunks(cases) -> list[dict[str, str]]:
    """Kernel name -> source, per chunk of cases taken in name order."""
    out, cur = [], {}
    for case in sorted(cases, key=lambda c: c.name):
        ks = case_kernels(case)
        if not ks:
            continue
        for k in ks:
            cur.setdefault(k.name, k.source)
        if len(cur) >= CHUNK_KERNELS:
            out.append(cur)
            cur = {}
    if cur:
        out.append(cur)
    return out


def chunk_source(kernels: dict[str, str]) -> str:
    """One translation unit, laid out as codegen.module_source does (fp16 support always on)."""
    head = ["#define AOTC_USE_FP16 1", '#include "aotc_prelude.cuh"', '#include "aotc_ops.cuh"', ""]
    return "\n".join(head + list(kernels.values())) + "\n"


def prebuild(cases, reverse: bool | None = None) -> dict:
    """Build (or fetch from the cache) every chunk's library into SHARED; returns timings."""
    t0 = time.perf_counter()
    groups = chunks(cases)
    t1 = time.perf_counter()
    if reverse is None:
        reverse = os.environ.get("PYTEST_XDIST_WORKER", "gw0") not in ("gw0", "")
    order = list(range(len(groups)))
    built: list[tuple[bytes, list[str]]] = []
    bad: list[str] = []
    for i in (reversed(order) if reverse else order):
        _build(groups[i], sorted(groups[i]), built, bad)
    for lib, names in built:
        SHARED.add(lib, names)
    return {"chunks": len(groups), "libraries": len(built), "kernels": len({n for g in groups for n in g}),
            "kernels_failing_host_build": bad,
            "compile_s": round(t1 - t0, 1), "host_build_s": round(time.perf_counter() - t1, 1)}


def _build(sources: dict[str, str], names: list[str], built: list, bad: list) -> None:
    """Build `names` into one library; on a compile error, bisect to leave the failing kernels out.

    A case whose kernel fails here compiles its own library in the provider
    and fails its test with the real CompileError.
    """
    src = chunk_source({n: sources[n] for n in names})
    try:
        with _locked(content_key([src])):
            built.append((compile_host(src, names), names))
    except CompileError:
        if len(names) == 1:
            bad.extend(names)
            return
        half = len(names) // 2
        _build(sources, names[:half], built, bad)
        _build(sources, names[half:], built, bad)
