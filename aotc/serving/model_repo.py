"""Writes a Triton model repository for aotc engines: `<repo>/<model>/config.pbtxt`,
`<repo>/<model>/1/model.engine` and the backend library `<repo>/<model>/libtriton_aotc.so`.

The config names only what the engine cannot say: the backend, the instance
group (device and count) and the model name. Inputs, outputs, dtypes, dims
and max_batch_size are the engine's, and the backend fills them in when Triton
loads the model (its auto-complete), so they never drift from the engine; the
server's model config endpoint shows the completed config. Triton looks a
backend up in the model's own folder first, so a repository written here runs
on a stock Triton image (a KServe InferenceService, a container) as it is.
"""
from __future__ import annotations

import os
import re
import shutil

from aotc.errors import AotcError
from aotc.serving.backend_build import LIB_NAME, backend_library

ENGINE_FILE = "model.engine"
CONFIG_FILE = "config.pbtxt"
VERSION = "1"
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class ServingError(AotcError):
    """A serving setup the user must fix: a bad engine path, model name or repository."""


def model_name(engine_path: str) -> str:
    """The model name of an engine: its file's stem (`bert.engine` -> `bert`)."""
    stem = os.path.splitext(os.path.basename(engine_path))[0]
    if not _NAME.match(stem):
        raise ServingError(f"cannot name a model after '{os.path.basename(engine_path)}': use letters, digits, "
                           f"'_', '-' or '.' in the engine's file name")
    return stem


def config_text(name: str, device: str = "cpu", instances: int = 1, gpus: tuple[int, ...] = ()) -> str:
    """config.pbtxt of one model: backend, name and instance group."""
    if device not in ("cpu", "cuda"):
        raise ServingError(f"unknown device '{device}': use cpu or cuda")
    if instances < 1:
        raise ServingError(f"--instances must be at least 1, got {instances}")
    kind = "KIND_GPU" if device == "cuda" else "KIND_CPU"
    gpu_list = f", gpus: [{', '.join(str(g) for g in gpus)}]" if device == "cuda" and gpus else ""
    return (f'# inputs, outputs, max_batch_size and dynamic_batching come from {ENGINE_FILE}:\n'
            f'# the aotc backend fills them in when Triton loads the model\n'
            f'name: "{name}"\nbackend: "aotc"\n'
            f'instance_group [{{ kind: {kind}, count: {instances}{gpu_list} }}]\n')


def write_model(repo: str, engine_path: str, device: str = "cpu", instances: int = 1,
                copy_backend: bool = True) -> str:
    """Adds one engine to the repository at `repo` as model `<stem>`; returns the model name."""
    if not os.path.isfile(engine_path):
        raise ServingError(f"no engine file at '{engine_path}'")
    name = model_name(engine_path)
    folder = os.path.join(repo, name)
    os.makedirs(os.path.join(folder, VERSION), exist_ok=True)
    dest = os.path.join(folder, VERSION, ENGINE_FILE)
    if device == "cpu":     # the backend runs the C runtime alone, which cannot build a host library itself
        from aotc.package.host_on_demand import copy_with_host_build
        copy_with_host_build(engine_path, dest)
    else:
        shutil.copyfile(engine_path, dest)
    with open(os.path.join(folder, CONFIG_FILE), "w") as f:
        f.write(config_text(name, device, instances))
    if copy_backend:
        shutil.copyfile(backend_library(), os.path.join(folder, LIB_NAME))
    return name


def write_repository(repo: str, engine_paths: list[str], device: str = "cpu", instances: int = 1,
                     copy_backend: bool = True) -> list[str]:
    """Writes every engine into `repo` (created if missing); returns the model names."""
    missing = [p for p in engine_paths if not os.path.isfile(p)]
    if missing:
        raise ServingError(f"no engine file at '{missing[0]}'")
    names = [model_name(p) for p in engine_paths]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ServingError(f"two engines would both be model '{dupes[0]}': rename one of the files")
    os.makedirs(repo, exist_ok=True)
    return [write_model(repo, p, device, instances, copy_backend) for p in engine_paths]


def is_repository(path: str) -> bool:
    """Is `path` a Triton model repository (a folder of model folders with config.pbtxt)?"""
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, d, CONFIG_FILE))
                                       for d in os.listdir(path))
