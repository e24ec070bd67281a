"""Finds a tritonserver binary and builds the command line and environment that run it.

Order: an explicit path, $AOTC_TRITONSERVER, `tritonserver` on PATH, then the
binary inside an installed nvidia-pytriton wheel (which ships Triton 2.51 and
its shared libraries in `nvidia_pytriton.libs`; it pins numpy < 2, so it is
installed apart from aotc: `pip install --no-deps --target DIR nvidia-pytriton`,
found through $AOTC_PYTRITON_DIR=DIR or on sys.path). The server binds to
loopback unless told otherwise.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from dataclasses import dataclass, field

from aotc.errors import AotcError

HOW_TO_GET = ("no tritonserver found: pass --tritonserver PATH, set $AOTC_TRITONSERVER, put tritonserver on "
              "PATH, or `pip install --no-deps --target DIR nvidia-pytriton` and set $AOTC_PYTRITON_DIR=DIR")


class NoTritonServer(AotcError):
    """No tritonserver binary was found (the message says how to get one)."""


@dataclass
class TritonServer:
    binary: str
    lib_dirs: list[str] = field(default_factory=list)   # for LD_LIBRARY_PATH
    backends_dir: str | None = None                      # the binary's own backends (python), if any

    def env(self, base: dict | None = None) -> dict:
        env = dict(os.environ if base is None else base)
        if self.lib_dirs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(self.lib_dirs + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
        return env


def _from_pytriton_root(root: str) -> TritonServer | None:
    binary = os.path.join(root, "pytriton", "tritonserver", "bin", "tritonserver")
    if not os.path.isfile(binary):
        return None
    libs = [d for d in (os.path.join(root, "nvidia_pytriton.libs"),
                        os.path.join(root, "pytriton", "tritonserver", "external_libs")) if os.path.isdir(d)]
    backends = os.path.join(root, "pytriton", "tritonserver", "backends")
    return TritonServer(binary, libs, backends if os.path.isdir(backends) else None)


def _pytriton_roots() -> list[str]:
    roots = [os.environ["AOTC_PYTRITON_DIR"]] if os.environ.get("AOTC_PYTRITON_DIR") else []
    try:
        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        spec = None
    if spec and spec.submodule_search_locations:
        roots.append(os.path.dirname(list(spec.submodule_search_locations)[0]))
    return roots


def _sibling_pytriton(binary: str) -> TritonServer:
    """A binary inside a pytriton wheel gets the wheel's libraries; any other runs as it is."""
    real = os.path.realpath(binary)
    parts = real.split(os.sep)
    if "pytriton" in parts:
        found = _from_pytriton_root(os.sep.join(parts[:len(parts) - 1 - parts[::-1].index("pytriton")]))
        if found and os.path.realpath(found.binary) == real:
            return found
    return TritonServer(binary)


def find_tritonserver(explicit: str | None = None) -> TritonServer:
    """The tritonserver to run, in the order the module docstring gives; NoTritonServer if none."""
    for source, path in (("--tritonserver", explicit), ("$AOTC_TRITONSERVER", os.environ.get("AOTC_TRITONSERVER"))):
        if path:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise NoTritonServer(f"{source} names '{path}', which is not an executable file")
            return _sibling_pytriton(path)
    on_path = shutil.which("tritonserver")
    if on_path:
        return _sibling_pytriton(on_path)
    for root in _pytriton_roots():
        found = _from_pytriton_root(root)
        if found:
            return found
    raise NoTritonServer(HOW_TO_GET)


def server_command(server: TritonServer, repos: list[str], backend_dir: str, host: str = "127.0.0.1",
                   http_port: int = 8000, grpc_port: int = 8001, metrics_port: int = 8002,
                   extra: list[str] | None = None) -> list[str]:
    """tritonserver's command line: the repositories, the backend directory and the ports on `host`."""
    return [server.binary, *[f"--model-repository={r}" for r in repos], f"--backend-directory={backend_dir}",
            f"--http-address={host}", f"--http-port={http_port}", f"--grpc-address={host}",
            f"--grpc-port={grpc_port}", f"--metrics-address={host}", f"--metrics-port={metrics_port}",
            "--strict-readiness=true", "--exit-on-error=true", *(extra or [])]


def backend_dir_for(server: TritonServer, root: str) -> str:
    """A --backend-directory with the aotc backend and, where the server ships one, its python backend."""
    from aotc.serving.backend_build import backend_directory
    backend_directory(root)
    if server.backends_dir:
        for name in os.listdir(server.backends_dir):
            link = os.path.join(root, name)
            if name != "aotc" and not os.path.lexists(link):
                os.symlink(os.path.join(server.backends_dir, name), link)
    return root




def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n ports free on `host` right now (for tests and benchmarks that start a server)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
