"""Compile a small dependency-free C library into the cache directory, once per source hash.

The runtime (runtime_binding) and the stand-in CUDA driver (aotc.testing.fakecuda)
are plain C shared libraries that `pip install` builds next to their Python
module. Where that build is missing or older than the sources (an edited
checkout), they are compiled here with `cc` (or $CC) into $AOTC_CACHE_DIR
(else $XDG_CACHE_HOME/aotc, else ~/.cache/aotc), in a folder named by a hash
of the sources and the compiler, so every process after the first reuses it.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import threading

from aotc.errors import RuntimeFailure


def cache_dir() -> str:
    return os.environ.get("AOTC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "aotc")


def build_cached(what: str, src_dir: str, sources: list[str], headers: list[str], tag: str,
                 include_dirs: list[str] = ()) -> str:
    """Path of `lib<tag>.so` built from `sources` in `src_dir` (C99, -ldl -lpthread, -I each of
    `include_dirs`); `what` names it in errors."""
    h = hashlib.sha256()
    for f in sources + headers:
        with open(os.path.join(src_dir, f), "rb") as src:
            h.update(src.read())
    cc = os.environ.get("CC", "cc")
    h.update(cc.encode())
    h.update(repr(list(include_dirs)).encode())
    out_dir = os.path.join(cache_dir(), f"{tag}-{h.hexdigest()[:16]}")
    lib = os.path.join(out_dir, f"lib{tag}.so")
    if os.path.exists(lib):
        return lib
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, f".build-{os.getpid()}-{threading.get_ident()}.so")
    cmd = [cc, "-std=c99", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
           *[f"-I{d}" for d in include_dirs], *[os.path.join(src_dir, f) for f in sources], "-o", tmp, "-ldl", "-lpthread"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise RuntimeFailure(f"{what} not built and cannot run '{cc}': {e}") from None
    if proc.returncode != 0:
        raise RuntimeFailure(f"building the {what} with '{cc}' failed (exit {proc.returncode})",
                             log=proc.stdout + proc.stderr)
    os.replace(tmp, lib)
    return lib

