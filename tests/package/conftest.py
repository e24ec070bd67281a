"""Fixtures for the engine-format and runtime tests: a tiny host library
compiled here from plain C (implementing the aotc-host-1 ABI the way a CUDA
grid would run) and a plan that uses inputs, outputs, an arena intermediate
and weights."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from aotc.package.plan import BufferRef, EnginePlan, Launch, TensorSpec

N = 1000
HOST_SRC = r"""
#define N 1000
#ifndef ADD_OP
#define ADD_OP +
#endif
const char *aotc_host_abi(void) { return "aotc-host-1"; }

/* Every block and thread of the grid, as CUDA would run them (x only). */
#define FOR_EACH_I(grid, block, body)                                   \
  for (unsigned b = 0; b < grid[0]; ++b)                                \
    for (unsigned t = 0; t < block[0]; ++t) {                           \
      unsigned i = b * block[0] + t;                                    \
      if (i < N) { body; }                                              \
    }

int aotc_host_launch_add_f32(const unsigned *grid, const unsigned *block, unsigned smem,
                             void **params) {
  const float *a = *(const float **)params[0], *x = *(const float **)params[1];
  float *out = *(float **)params[2];
  (void)smem;
  FOR_EACH_I(grid, block, out[i] = a[i] ADD_OP x[i]);
  return 0;
}

int aotc_host_launch_scale_f32(const unsigned *grid, const unsigned *block, unsigned smem,
                               void **params) {
  const float *a = *(const float **)params[0], *s = *(const float **)params[1];
  float *out = *(float **)params[2];
  (void)smem;
  FOR_EACH_I(grid, block, out[i] = a[i] * s[0]);
  return 0;
}

int aotc_host_launch_fail_k(const unsigned *grid, const unsigned *block, unsigned smem,
                            void **params) {
  (void)grid; (void)block; (void)smem; (void)params;
  return 7;
}
"""


def cc() -> str:
    path = shutil.which("cc") or shutil.which("gcc")
    if not path:
        pytest.fail("no C compiler (cc/gcc) on PATH: the runtime tests need one")
    return path


def build_host_lib(directory, *flags: str) -> bytes:
    (directory / "k.c").write_text(HOST_SRC)
    subprocess.run([cc(), "-shared", "-fPIC", "-O1", *flags, "-o", str(directory / "k.so"),
                    str(directory / "k.c")], check=True, capture_output=True)
    return (directory / "k.so").read_bytes()


@pytest.fixture(scope="session")
def host_lib(tmp_path_factory) -> bytes:
    return build_host_lib(tmp_path_factory.mktemp("hostlib"))


@pytest.fixture(scope="session")
def host_lib_sub(tmp_path_factory) -> bytes:
    """The same kernels with add_f32 subtracting instead."""
    return build_host_lib(tmp_path_factory.mktemp("hostlib_sub"), "-DADD_OP=-")


def make_plan(host_lib: bytes = b"", fail: bool = False) -> EnginePlan:
    """y = (x + bias) * scale, z = (x + bias) + u; x+bias lives in the arena."""
    rng = np.random.default_rng(0)
    bias = rng.standard_normal(N).astype(np.float32)
    weights = bias.tobytes().ljust(4096, b"\0") + np.float32(1.5).tobytes()
    grid, block = (4, 1, 1), (256, 1, 1)
    tmp = BufferRef("arena", offset=256)
    launches = [
        Launch("add_f32", grid, block, 0, [BufferRef("input", 0), BufferRef("weight", 0, 0), tmp],
               bytes=3 * 4 * N, flops=N, region="add x+bias"),
        Launch("scale_f32", grid, block, 0, [tmp, BufferRef("weight", 0, 4096), BufferRef("output", 0)],
               bytes=2 * 4 * N, flops=N, region="scale"),
        Launch("add_f32", grid, block, 0, [tmp, BufferRef("input", 1), BufferRef("output", 1)],
               bytes=3 * 4 * N, flops=N, region="add u"),
    ]
    if fail:
        launches.append(Launch("fail_k", (1, 1, 1), (1, 1, 1), 0, []))
    return EnginePlan(
        inputs=[TensorSpec("x", "f32", (10, 100)), TensorSpec("u", "f32", (N,))],
        outputs=[TensorSpec("y", "f32", (10, 100)), TensorSpec("z", "f32", (N,))],
        arena_size=256 + 4 * N, weights=weights, launches=launches,
        cubins={"sm_80": b"\x7fELF fake sm_80 cubin", "sm_90": b"\x7fELF fake sm_90 cubin"},
        ptx=b"// fake ptx\n.version 8.0\n", ptx_arch="compute_90", host_lib=host_lib,
        manifest={"model": "tiny", "note": "test plan"})


def expected(x: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    bias = rng.standard_normal(N).astype(np.float32)
    t = x.reshape(-1) + bias
    return {"y": (t * np.float32(1.5)).reshape(10, 100), "z": t + u}


@pytest.fixture(scope="session")
def engine_file(host_lib, tmp_path_factory):
    from aotc.package.engine_format import write_engine
    path = tmp_path_factory.mktemp("engine") / "tiny.engine"
    write_engine(make_plan(host_lib), path)
    return path


@pytest.fixture(scope="session")
def plan_factory():
    """make_plan(host_lib=b"", fail=False) -> a fresh EnginePlan."""
    return make_plan


@pytest.fixture(scope="session")
def expected_fn():
    """expected(x, u) -> {"y": ..., "z": ...} computed with numpy."""
    return expected
