"""Where libtriton_aotc.so, the Triton backend for aotc engines, is found or built.

`pip install` builds it next to this module (setup.py, like the runtime): it is
the backend C sources in backend/ linked with the runtime's own sources into
one library with no dependency beyond libc, dlopen and pthreads, so a Triton
image needs that one file. In an edited checkout a library older than its
sources is rebuilt into the cache (c_build). Triton looks a backend up as
`<backend-directory>/aotc/libtriton_aotc.so`; backend_directory() makes one.
"""
from __future__ import annotations

import os

from aotc.package.c_build import build_cached
from aotc.package.runtime_binding import _HEADERS as RUNTIME_HEADERS
from aotc.package.runtime_binding import _SOURCES as RUNTIME_SOURCES  # one list, kept by the runtime

_HERE = os.path.dirname(os.path.abspath(__file__))
_SRC = os.path.join(_HERE, "backend")
BACKEND_SOURCES = ["json_tree.c", "engine_config.c", "triton_aotc.c", "triton_execute.c"]
BACKEND_HEADERS = ["json_tree.h", "engine_config.h", "triton_api.h", "backend_state.h"]
_RUNTIME = os.path.join("..", "..", "package", "runtime")
LIB_NAME = "libtriton_aotc.so"


def _all_sources() -> tuple[list[str], list[str]]:
    return (BACKEND_SOURCES + [os.path.join(_RUNTIME, f) for f in RUNTIME_SOURCES],
            BACKEND_HEADERS + [os.path.join(_RUNTIME, f) for f in RUNTIME_HEADERS])


def backend_library() -> str:
    """Path of libtriton_aotc.so: $AOTC_TRITON_BACKEND_LIB, the package build, else a cached build."""
    env = os.environ.get("AOTC_TRITON_BACKEND_LIB")
    if env:
        return env
    sources, headers = _all_sources()
    built = os.path.join(_HERE, LIB_NAME)
    if os.path.exists(built):
        checkout = os.path.exists(os.path.join(_HERE, "..", "..", "setup.py"))
        newest = max(os.path.getmtime(os.path.join(_SRC, f)) for f in sources + headers)
        if not checkout or os.path.getmtime(built) >= newest:
            return built
    return build_cached("aotc Triton backend", _SRC, sources, headers, "triton_aotc",
                        include_dirs=[_SRC, os.path.join(_SRC, _RUNTIME)])


def backend_directory(root: str) -> str:
    """A Triton --backend-directory under `root` holding aotc/libtriton_aotc.so (a symlink)."""
    lib = backend_library()
    folder = os.path.join(root, "aotc")
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, LIB_NAME)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.abspath(lib), link)
    return root
