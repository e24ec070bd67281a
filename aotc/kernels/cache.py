"""Content-hash cache for compiled kernels (cubins, PTX, host libraries).

A result is stored under `<dir>/<kind>/<sha256 of the key parts>`; the key
must hold everything the output depends on (source, options, compiler
version, headers). The directory is `$AOTC_CACHE_DIR`, default `~/.cache/aotc`;
`AOTC_NO_CACHE=1` turns caching off. Writes go to a temporary file and are
renamed into place, so concurrent processes never see a partial entry.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence


def cache_dir() -> Path:
    return Path(os.environ.get("AOTC_CACHE_DIR") or Path.home() / ".cache" / "aotc")


def cache_enabled() -> bool:
    return os.environ.get("AOTC_NO_CACHE", "") not in ("1", "true", "yes")


def content_key(key_parts: Sequence[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in key_parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        # Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cache_lookup(kind: str, key_parts: Sequence[bytes | str]) -> bytes | None:
    """The cached bytes for `key_parts`, or None (a miss, or caching off)."""
    if not cache_enabled():
        return None
    try:
        return (cache_dir() / kind / content_key(key_parts)).read_bytes()
    except OSError:
        return None


def cache_store(kind: str, key_parts: Sequence[bytes | str], data: bytes) -> None:
    if not cache_enabled():
        return
    try:
        atomic_write(cache_dir() / kind / content_key(key_parts), data)
    except OSError:
        pass  # a read-only or full cache must not fail a compile


def cached_bytes(kind: str, key_parts: Sequence[bytes | str],
                 produce: Callable[[], bytes]) -> bytes:
    """Return the cached bytes for `key_parts`, running `produce()` on a miss."""
    hit = cache_lookup(kind, key_parts)
    if hit is not None:
        return hit
    data = produce()
    cache_store(kind, key_parts, data)
    return data
