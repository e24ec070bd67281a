"""Builds the aotc C runtime as a plain shared library, aotc/package/_aotc_runtime.so,
the stand-in CUDA driver used to test the cuda path without a GPU,
aotc/testing/_fakecuda.so (aotc/testing/fakecuda/), and the Triton backend,
aotc/serving/libtriton_aotc.so (aotc/serving/backend/).

Package metadata lives in pyproject.toml; this file only adds the runtime.
It is an ordinary C shared library (C99, libc + dlopen + pthreads), not a
Python extension module: the Python side loads it with ctypes
(aotc/package/runtime_binding.py), so it has no Python C API dependency and
is the very library a C serving process links against.

It also says what a static table cannot: the package list. The repository
keeps the command line in a top-level `cli/` folder, but it installs as
`aotc.cli` (package_dir), so nothing named `cli` lands at the top of
site-packages. Packages are found, not listed, so a new subpackage of aotc
ships without an edit here; the kernel templates and the runtime's C sources
ship as package data (pyproject.toml), because the compiler reads them at
run time.
"""
import os
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

RUNTIME = "aotc/package/runtime"
SOURCES = ["status.c", "engine.c", "plan.c", "context.c", "shape.c", "device_cpu.c", "device_cuda.c"]
FAKECUDA = "aotc/testing/fakecuda"
FAKECUDA_SOURCES = ["fakecuda_core.c", "fakecuda_exec.c", "fakecuda_module.c", "fakecuda_image.c",
                    "fakecuda_queue.c"]


class build_runtime(build_ext):
    """build_ext that names the runtime `_aotc_runtime.so` and exports no PyInit_."""

    def get_ext_filename(self, fullname):
        name = super().get_ext_filename(fullname)
        if fullname.split(".")[-1] in ("_aotc_runtime", "_fakecuda", "libtriton_aotc"):
            suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
            if name.endswith(suffix):
                name = name[: -len(suffix)] + ".so"
        return name

    def get_export_symbols(self, ext):
        return []  # visibility("default") in aotc_runtime.h marks the API


runtime = Extension(
    "aotc.package._aotc_runtime",
    sources=[f"{RUNTIME}/{s}" for s in SOURCES],
    depends=[f"{RUNTIME}/aotc_runtime.h", f"{RUNTIME}/aotc_internal.h"],
    include_dirs=[RUNTIME],
    extra_compile_args=["-std=c99", "-O2", "-fvisibility=hidden"],
    libraries=["dl", "pthread"],
)

fakecuda = Extension(
    "aotc.testing._fakecuda",
    sources=[f"{FAKECUDA}/{s}" for s in FAKECUDA_SOURCES],
    depends=[f"{FAKECUDA}/fakecuda.h", f"{FAKECUDA}/fakecuda_state.h"],
    include_dirs=[FAKECUDA],
    extra_compile_args=["-std=c99", "-O2", "-fvisibility=hidden"],
    libraries=["dl", "pthread"],
)

# libtriton_aotc.so, the Triton backend: the backend's C sources with the runtime's linked in
SERVING = "aotc/serving/backend"
triton_backend = Extension(
    "aotc.serving.libtriton_aotc",
    sources=[f"{SERVING}/{s}" for s in ["json_tree.c", "engine_config.c", "triton_aotc.c", "triton_execute.c"]]
    + [f"{RUNTIME}/{s}" for s in SOURCES],
    depends=[f"{SERVING}/{h}" for h in ["json_tree.h", "engine_config.h", "triton_api.h", "backend_state.h"]]
    + [f"{RUNTIME}/aotc_runtime.h", f"{RUNTIME}/aotc_internal.h"],
    include_dirs=[SERVING, RUNTIME],
    extra_compile_args=["-std=c99", "-O2", "-fvisibility=hidden"],
    libraries=["dl", "pthread"],
)

PACKAGES = find_packages(include=["aotc", "aotc.*"]) + ["aotc.cli"]

setup(packages=PACKAGES, package_dir={"aotc.cli": "cli"},
      ext_modules=[runtime, fakecuda, triton_backend] if os.name == "posix" else [], cmdclass={"build_ext": build_runtime})
