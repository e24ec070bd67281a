"""The host emulation runs real kernels right: each kernel is compiled with
compile_host, run through HostLibrary on fresh random inputs into NaN-poisoned
outputs, and compared with numpy."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import aotc
from aotc.errors import CompileError, RuntimeFailure
from aotc.kernels.host_compile import compile_host
from aotc.kernels.host_exec import HostLibrary

from .kernel_sources import DEADLOCK_SOURCE, KERNELS, SOURCE


@pytest.fixture(scope="module")
def lib():
    return HostLibrary(compile_host(SOURCE, KERNELS))


@pytest.fixture
def rng():
    return np.random.default_rng()


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype=dtype)


def test_abi(lib):
    assert lib.abi == "aotc-host-1"


@pytest.mark.parametrize("n,grid,block", [(1, 1, 32), (783, 2, 128), (4096, 3, 256)])
def test_elementwise_grid_stride(lib, rng, n, grid, block):
    x = rng.standard_normal(n).astype(np.float32) * 3
    y = poisoned(n)
    lib.launch("ew_gelu_f32", grid, block, [x, y, np.int32(n)])
    want = 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("block", [64, 256, 1024])
def test_block_reduce_checks_every_lane(lib, rng, block):
    nblocks = 3
    n = nblocks * block - 5  # the tail lanes see 0.0
    x = np.zeros(nblocks * block, np.float32)
    x[:n] = rng.uniform(-1, 3, n)
    total = nblocks * block
    block_sum, warp_sum, scan, bcast = (poisoned(s) for s in (nblocks, total, total, total))
    vote = np.full(total, -1, np.int32)
    lib.launch("block_reduce", nblocks, block,
               [x, block_sum, warp_sum, scan, bcast, vote, np.int32(n)])
    warps = x.reshape(-1, 32).astype(np.float64)
    np.testing.assert_allclose(warp_sum, np.repeat(warps.sum(1), 32), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scan, np.cumsum(warps, axis=1).ravel(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(bcast, np.repeat(x.reshape(-1, 16)[:, 3], 16))
    np.testing.assert_allclose(block_sum, x.reshape(nblocks, block).sum(1), rtol=1e-5, atol=1e-4)
    popc = np.repeat((warps > 0).sum(1), 32)
    any_big = np.repeat((warps > 2).any(1), 32)
    all_small = np.repeat((warps < 10).all(1), 32)
    count = np.repeat((x.reshape(nblocks, block) > 0).sum(1), block)
    np.testing.assert_array_equal(vote, popc + 33 * any_big + 66 * all_small + 1000 * count)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("rows,cols,block", [(7, 300, 128), (3, 50, 64), (2, 1000, 256)])
def test_softmax_dynamic_smem(lib, rng, rows, cols, block):
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 4
    y = poisoned((rows, cols))
    lib.launch("softmax_rows", rows, block, [x, y, np.int32(cols)], smem=(cols + 32) * 4)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-7)


def test_atomics(lib, rng):
    n = 5000
    x = rng.uniform(0, 8, n).astype(np.float32)
    total = np.zeros(1, np.float32)
    hist = np.zeros(8, np.int32)
    maxbits = np.zeros(1, np.uint32)
    lib.launch("atomics", 16, 128, [x, total, hist, maxbits, np.int32(n)])
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-4)
    np.testing.assert_array_equal(hist, np.bincount(np.floor(x).astype(int).clip(0, 7), minlength=8))
    assert maxbits.view(np.float32)[0] == x.max()


def test_half_and_bfloat16(lib, rng):
    n = 1000
    a = rng.uniform(-2, 2, n).astype(np.float16)
    b = rng.uniform(-2, 2, n).astype(np.float16)
    out = poisoned(n, np.float16)
    bf = poisoned(n)
    swapped = poisoned(n, np.float16)
    lib.launch("ew_half", 4, 256, [a, b, out, bf, swapped, np.int32(n)])
    np.testing.assert_array_equal(swapped, a.reshape(-1, 2)[:, ::-1].ravel())
    want = (a.astype(np.float32) * b.astype(np.float32) + a.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)
    want_bf = (a.astype(np.float32) * 2).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(bf, want_bf)


@pytest.mark.parametrize("rows,cols", [(33, 50), (3, 783), (64, 64)])
def test_transpose_2d_blocks(lib, rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = poisoned((cols, rows))
    grid = ((cols + 31) // 32, (rows + 31) // 32)
    lib.launch("transpose", grid, (32, 8), [x, y, np.int32(rows), np.int32(cols)])
    np.testing.assert_array_equal(y, x.T)


def test_concurrent_launches_from_threads(lib):
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(5):
                x = rng.standard_normal((9, 200)).astype(np.float32)
                y = poisoned((9, 200))
                lib.launch("softmax_rows", 9, 64, [x, y, np.int32(200)], smem=232 * 4)
                np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-7)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("block", [2048, (32, 32, 2), 0])
def test_bad_launch_is_a_status_not_a_crash(lib, block):
    x = np.zeros(8, np.float32)
    with pytest.raises(RuntimeFailure, match="invalid launch"):
        lib.launch("ew_gelu_f32", 1, block, [x, x, np.int32(8)])


def test_unknown_kernel(lib):
    with pytest.raises(RuntimeFailure, match="no kernel 'nope'"):
        lib.launch("nope", 1, 1, [])


def test_compile_error_carries_log():
    with pytest.raises(CompileError) as info:
        compile_host('#include "aotc_prelude.cuh"\nextern "C" __global__ void k(float *y) { y[0] = ; }\n',
                     ["k"])
    assert "\n" not in str(info.value)
    assert "error" in info.value.log


def test_missing_kernel_name_is_a_compile_error():
    with pytest.raises(CompileError, match="host compile"):
        compile_host('#include "aotc_prelude.cuh"\n', ["absent"])


_DEADLOCK_SCRIPT = """
import sys, numpy as np
from aotc.kernels.host_compile import compile_host
from aotc.kernels.host_exec import HostLibrary
from aotc.errors import RuntimeFailure
lib = HostLibrary(compile_host(sys.stdin.read(), ["stuck"]))
try:
    lib.launch("stuck", 2, 32, [np.zeros(32, np.float32)])
except RuntimeFailure as e:
    print("FAILED:", e)
"""


def test_deadlock_is_reported_not_hung():
    root = str(Path(aotc.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _DEADLOCK_SCRIPT], input=DEADLOCK_SOURCE,
                          capture_output=True, text=True, timeout=60, env=env)
    assert "FAILED:" in proc.stdout and "deadlock" in proc.stdout, proc.stdout + proc.stderr
    assert "1 threads wait at __syncthreads, 31 in warp collectives" in proc.stderr


def test_reloaded_libraries_never_alias():
    # glibc matches dlopen'ed libraries by path; memfd paths repeat once closed.
    src = '#include "aotc_prelude.cuh"\nextern "C" __global__ void k(float *y) { y[threadIdx.x] = %d; }\n'
    blobs = [compile_host(src % v, ["k"]) for v in (1, 2)]
    for i in range(6):
        lib = HostLibrary(blobs[i % 2])
        y = poisoned(4)
        lib.launch("k", 1, 4, [y])
        lib.close()
        assert (y == 1 + i % 2).all()


def test_a_recycled_fd_name_of_a_library_loaded_elsewhere_is_not_reused():
    """The C runtime's cpu device dlopens /proc/self/fd/N and closes N at once; the next memfd gets N
    again, and loading through that name must give the new bytes, not the runtime's library."""
    import ctypes
    src = '#include "aotc_prelude.cuh"\nextern "C" __global__ void %s(float *y) { y[threadIdx.x] = %d; }\n'
    other, ours = compile_host(src % ("k_other", 1), ["k_other"]), compile_host(src % ("k_ours", 2), ["k_ours"])
    fd = os.memfd_create("runtime-like", 0)
    os.write(fd, other)
    held = ctypes.CDLL(f"/proc/self/fd/{fd}")      # loaded under that name, as the runtime does
    os.close(fd)
    lib = HostLibrary(ours)
    y = poisoned(4)
    lib.launch("k_ours", 1, 4, [y])
    lib.close()
    assert (y == 2).all()
    assert held.aotc_host_abi is not None
