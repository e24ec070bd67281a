"""The stand-in CUDA driver: it runs kernels through the host build and refuses what a GPU refuses.

Each refusal is checked for the error code a real driver returns. The library
is loaded under its own path, so the aotc runtime in this process still sees
no driver; the runtime's use of it is tested in test_fakecuda_runtime.py.
"""
import ctypes
import subprocess
import sys
import threading

import numpy as np
import pytest

from aotc.kernels.host_compile import have_host_compiler
from tests.testing.fakecuda_driver import (CAPTURE_INVALIDATED, CAPTURE_UNSUPPORTED, ILLEGAL_ADDRESS,
                                           ILLEGAL_STATE, INVALID_CONTEXT, INVALID_HANDLE, INVALID_VALUE,
                                           NO_BINARY_FOR_GPU, NOT_SUPPORTED, Driver, axpb_params, images)

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")


@pytest.fixture(scope="module")
def cu():
    return Driver()


@pytest.fixture
def ctx(cu):
    c = cu.new_context()
    yield c
    cu.cuCtxDestroy_v2(ctypes.c_void_p(c))


@pytest.fixture
def axpb(cu, ctx):
    r, mod = cu.load("sm_90")
    assert r == 0, cu.last_log
    return cu.function(mod, "axpb")


def _launch(cu, fn, grid=(1, 1, 1), block=(64, 1, 1), smem=0, stream=None, params=None, extra=None):
    return cu.cuLaunchKernel(fn, *grid, *block, smem, stream, params, extra)


def test_kernel_runs_through_the_host_build(cu, axpb):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(200).astype(np.float32)
    px, py = cu.upload(x), cu.alloc(x.nbytes)
    params, keep = axpb_params(py, px, 200, c=3, b=-1.5, t_b=0.25)
    assert _launch(cu, axpb, grid=(2, 1, 1), block=(128, 1, 1), params=params) == 0
    got = cu.download(py, 200)
    np.testing.assert_array_equal(got, np.float32(3) * x + np.float32(-1.5) + np.float32(0.25))


def test_param_info_follows_the_cubin(cu, axpb):
    off, size = ctypes.c_size_t(), ctypes.c_size_t()
    layout = []
    for i in range(6):
        assert cu.cuFuncGetParamInfo(axpb, i, ctypes.byref(off), ctypes.byref(size)) == 0
        layout.append((off.value, size.value))
    # float*, const float*, int, char, double, struct of three floats
    assert layout == [(0, 8), (8, 8), (16, 4), (20, 1), (24, 8), (32, 12)]
    assert cu.cuFuncGetParamInfo(axpb, 6, ctypes.byref(off), ctypes.byref(size)) == INVALID_VALUE


def test_ptx_image_gives_the_same_layout(cu, ctx):
    r, mod = cu.load("ptx")
    assert r == 0, cu.last_log
    fn = cu.function(mod, "axpb")
    off, size = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuFuncGetParamInfo(fn, 5, ctypes.byref(off), ctypes.byref(size)) == 0
    assert (off.value, size.value) == (32, 12)
    v = ctypes.c_int()
    assert cu.cuFuncGetAttribute(ctypes.byref(v), 0, fn) == 0 and v.value == 128  # .maxntid


def test_parameter_buffer_of_the_wrong_size_is_refused(cu, axpb):
    py = cu.alloc(256)
    buf = (ctypes.c_uint8 * 48)()
    for size in (40, 48):  # the cubin's parameter buffer is 44 bytes
        n = ctypes.c_size_t(size)
        extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(n), 0)
        assert _launch(cu, axpb, extra=extra) == INVALID_VALUE
    assert _launch(cu, axpb, params=None, extra=None) == INVALID_VALUE  # parameters missing
    params, keep = axpb_params(py, py, 0)
    n = ctypes.c_size_t(44)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(n), 0)
    assert _launch(cu, axpb, params=params, extra=extra) == INVALID_VALUE  # both forms at once


@pytest.mark.parametrize("grid,block", [
    ((1, 1, 1), (1025, 1, 1)), ((1, 1, 1), (32, 32, 2)), ((1, 1, 1), (1, 1, 65)),
    ((1, 65536, 1), (32, 1, 1)), ((0, 1, 1), (32, 1, 1)), ((1, 1, 1), (0, 1, 1)),
    ((1, 1, 1), (256, 1, 1)),  # beyond the kernel's __launch_bounds__(128)
])
def test_launch_dimensions_beyond_the_limits_are_refused(cu, axpb, grid, block):
    py = cu.alloc(1 << 16)
    params, keep = axpb_params(py, py, 0)
    assert _launch(cu, axpb, grid=grid, block=block, params=params) == INVALID_VALUE


def test_dynamic_shared_memory_needs_the_attribute_and_stays_below_the_arch_max(cu, ctx):
    r, mod = cu.load("sm_90")
    fn = cu.function(mod, "staged")
    py = cu.alloc(4096)
    p = ctypes.c_uint64(py)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(p), ctypes.c_void_p))
    assert _launch(cu, fn, block=(64, 1, 1), smem=48 * 1024, params=params) == 0
    assert _launch(cu, fn, block=(64, 1, 1), smem=48 * 1024 + 4, params=params) == INVALID_VALUE
    assert cu.cuFuncSetAttribute(fn, 8, 227 * 1024 + 1) == INVALID_VALUE  # sm_90 opt-in max: 227 KiB
    assert cu.cuFuncSetAttribute(fn, 8, 100 * 1024) == 0
    assert _launch(cu, fn, block=(64, 1, 1), smem=100 * 1024, params=params) == 0
    np.testing.assert_array_equal(cu.download(py, 64), np.arange(64, dtype=np.float32))
    assert _launch(cu, fn, block=(64, 1, 1), smem=100 * 1024 + 4, params=params) == INVALID_VALUE


def test_sm80_limits_and_binaries(tmp_path):
    """On an sm_80 device: 163 KiB opt-in, and an sm_90 cubin does not load."""
    code = (
        "import ctypes\n"
        "from tests.testing.fakecuda_driver import Driver\n"
        "cu = Driver(); cu.new_context()\n"
        "r90, _ = cu.load('sm_90'); r80, mod = cu.load('sm_80')\n"
        "fn = cu.function(mod, 'staged')\n"
        "print(r90, r80, cu.cuFuncSetAttribute(fn, 8, 163 * 1024 + 1), cu.cuFuncSetAttribute(fn, 8, 163 * 1024))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "AOTC_FAKECUDA_ARCH": "80"}, check=True)
    assert out.stdout.split() == [str(NO_BINARY_FOR_GPU), "0", str(INVALID_VALUE), "0"]


def test_image_without_a_host_build_is_refused_with_a_log(cu, ctx):
    r, _ = cu.load("sm_90", attach=False)
    assert r == NOT_SUPPORTED and "no host build attached" in cu.last_log


def test_calls_without_a_current_context_are_refused(cu):
    got = {}

    def work():  # a new thread has no current context
        p, s = ctypes.c_uint64(), ctypes.c_void_p()
        got["alloc"] = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(64))
        got["stream"] = cu.cuStreamCreate(ctypes.byref(s), 0)
        got["sync"] = cu.cuCtxSynchronize()
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert got == {"alloc": INVALID_CONTEXT, "stream": INVALID_CONTEXT, "sync": INVALID_CONTEXT}


def test_handles_of_another_context_are_refused(cu):
    a = cu.new_context()
    r, mod_a = cu.load("sm_90")
    fn_a = cu.function(mod_a, "axpb")
    stream_a = cu.out(cu.cuStreamCreate, 1)
    pa = cu.alloc(512)
    b = cu.new_context()  # now current
    params, keep = axpb_params(pa, pa, 1)
    assert _launch(cu, fn_a, params=params) == INVALID_HANDLE
    assert cu.cuStreamSynchronize(ctypes.c_void_p(stream_a)) == INVALID_HANDLE
    f = ctypes.c_void_p()
    assert cu.cuModuleGetFunction(ctypes.byref(f), ctypes.c_void_p(mod_a), b"axpb") == INVALID_HANDLE
    cu.ok(cu.cuCtxDestroy_v2(ctypes.c_void_p(b)))
    cu.ok(cu.cuCtxSetCurrent(ctypes.c_void_p(a)))
    assert _launch(cu, fn_a, stream=stream_a, params=params) == 0  # in its own context it works
    cu.ok(cu.cuCtxDestroy_v2(ctypes.c_void_p(a)))
    assert cu.cuCtxPushCurrent_v2(ctypes.c_void_p(a)) == INVALID_CONTEXT  # destroyed


def test_freed_memory_is_refused(cu, axpb):
    p = cu.alloc(1024)
    a = np.ones(256, np.float32)
    cu.ok(cu.cuMemFree_v2(p))
    assert cu.cuMemcpyHtoD_v2(p, a.ctypes.data, a.nbytes) == INVALID_VALUE
    assert cu.cuMemFree_v2(p) == INVALID_VALUE  # twice
    live = cu.alloc(1024)
    assert cu.cuMemcpyHtoD_v2(live, a.ctypes.data, 2048) == INVALID_VALUE  # past the allocation's end
    params, keep = axpb_params(live, p, 8)
    assert _launch(cu, axpb, params=params) == ILLEGAL_ADDRESS
    assert cu.cuCtxSynchronize() == ILLEGAL_ADDRESS  # the fault poisons the context


def test_fresh_memory_is_not_zero(cu, ctx):
    p = cu.alloc(64)
    assert np.isnan(cu.download(p, 16)).all()


def test_graph_replays_the_captured_launches(cu, axpb):
    x = np.arange(64, dtype=np.float32)
    px, py = cu.upload(x), cu.alloc(256)
    stream = cu.out(cu.cuStreamCreate, 1)
    params, keep = axpb_params(py, px, 64, c=2, b=0.0, t_b=0.0)
    cu.ok(cu.cuStreamBeginCapture_v2(ctypes.c_void_p(stream), 1))
    cu.ok(_launch(cu, axpb, stream=stream, params=params))
    keep[2].value = 1  # later changes to the argument values do not reach the graph
    g = ctypes.c_void_p()
    cu.ok(cu.cuStreamEndCapture(ctypes.c_void_p(stream), ctypes.byref(g)))
    assert np.isnan(cu.download(py, 64)).all()  # captured, not run
    exe = ctypes.c_void_p()
    cu.ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(exe), g, ctypes.c_ulonglong(0)))
    before = cu.aotcFakeCudaCounter(b"graph_launches")
    cu.ok(cu.cuGraphLaunch(exe, ctypes.c_void_p(stream)))
    assert cu.aotcFakeCudaCounter(b"graph_launches") == before + 1
    np.testing.assert_array_equal(cu.download(py, 64), 2 * x)


def test_capture_refuses_synchronous_work(cu, ctx):
    stream = ctypes.c_void_p(cu.out(cu.cuStreamCreate, 1))
    p = cu.alloc(64)
    a = np.zeros(16, np.float32)
    g = ctypes.c_void_p()
    cu.ok(cu.cuStreamBeginCapture_v2(stream, 1))
    assert cu.cuStreamBeginCapture_v2(stream, 1) == ILLEGAL_STATE
    assert cu.cuStreamSynchronize(stream) == CAPTURE_UNSUPPORTED
    assert cu.cuStreamEndCapture(stream, ctypes.byref(g)) == CAPTURE_INVALIDATED and not g.value
    cu.ok(cu.cuStreamBeginCapture_v2(stream, 1))
    assert cu.cuMemcpyHtoD_v2(p, a.ctypes.data, a.nbytes) == CAPTURE_UNSUPPORTED  # pageable, synchronous
    assert cu.cuStreamEndCapture(stream, ctypes.byref(g)) == CAPTURE_INVALIDATED
    cu.ok(cu.cuStreamBeginCapture_v2(stream, 1))
    cu.ok(cu.cuMemcpyHtoDAsync_v2(p, a.ctypes.data, a.nbytes, stream))  # async on the stream: recorded
    cu.ok(cu.cuStreamEndCapture(stream, ctypes.byref(g)))
    assert g.value


DEFERRED_ORDER = r'''
import ctypes, numpy as np
from tests.testing.fakecuda_driver import Driver, axpb_params
cu = Driver(); cu.new_context()
r, mod = cu.load("sm_90"); fn = cu.function(mod, "axpb")
x = np.arange(64, dtype=np.float32)

def trial(flags, order):
    px, py = cu.alloc(x.nbytes), cu.alloc(x.nbytes)
    s = cu.out(cu.cuStreamCreate, flags)
    cu.ok(cu.cuMemcpyHtoD_v2(px, x.ctypes.data, x.nbytes))   # pageable upload: the legacy stream
    if order == "event":
        ev = cu.out(cu.cuEventCreate, 0)
        cu.ok(cu.cuEventRecord(ev, None)); cu.ok(cu.cuStreamWaitEvent(s, ev, 0))
    if order == "sync":
        cu.ok(cu.cuCtxSynchronize())
    params, keep = axpb_params(py, px, 64, c=2, b=0.0, t_b=0.0)
    cu.ok(cu.cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, s, params, None))
    cu.ok(cu.cuStreamSynchronize(s))
    y = cu.download(py, 64)
    return "ok" if np.array_equal(y, 2 * x) else "nan" if np.isnan(y).all() else "other"

print(trial(1, None), trial(0, None), trial(1, "event"), trial(1, "sync"))
'''


def test_deferred_order_shows_work_that_cuda_does_not_order():
    """A non-blocking stream does not wait for a pageable upload on the legacy stream: under
    AOTC_FAKECUDA_ORDER=deferred the kernel reads the allocation's NaN pattern, as on a GPU that
    loses the race; a blocking stream, an event wait or a synchronisation orders it."""
    import os
    out = subprocess.run([sys.executable, "-c", DEFERRED_ORDER], capture_output=True, text=True, check=True,
                         env={**os.environ, "AOTC_FAKECUDA_ORDER": "deferred"})
    assert out.stdout.split() == ["nan", "ok", "ok", "ok"], out.stderr
    eager = subprocess.run([sys.executable, "-c", DEFERRED_ORDER], capture_output=True, text=True, check=True)
    assert eager.stdout.split() == ["ok", "ok", "ok", "ok"]  # eager order happens to be safe
