"""The compile driver's binary builds: NVRTC per target and the host build start together and run
while the caller plans launches; the PTX comes from the twin sm_XY compile; an error waits for them."""
from __future__ import annotations

import threading
import time

import pytest

from aotc import compiler
from aotc.kernels import host_compile, nvrtc_compile, resources


class _Usage:
    def as_dict(self):
        return {"registers": 32, "static_smem": 0, "local_bytes": 0}


@pytest.fixture
def fakes(monkeypatch):
    """Stand-in compilers that record what they were asked and signal when they run."""
    calls, started = [], threading.Event()

    def device(source, target, fast_compile=False):
        started.set()
        calls.append(("device", target))
        time.sleep(0.05)
        return f"cubin {target}".encode() if target.startswith("sm_") else f"ptx {target}".encode()

    def with_ptx(source, target, fast_compile=False):
        started.set()
        calls.append(("with_ptx", target))
        time.sleep(0.05)
        return f"cubin {target}".encode(), f"ptx compute_{target[3:]}".encode()

    def host(source, names):
        calls.append(("host", tuple(names)))
        return b"host lib"

    monkeypatch.setattr(nvrtc_compile, "compile_device", device)
    monkeypatch.setattr(nvrtc_compile, "compile_device_with_ptx", with_ptx)
    monkeypatch.setattr(host_compile, "compile_host", host)
    monkeypatch.setattr(resources, "check_kernels", lambda kernels, arch, cubin=None: {"k": _Usage()})
    return calls, started


def _builds(host=False, archs=("sm_80", "sm_90"), ptx="compute_90"):
    return compiler.BinaryBuilds([], "source", ["k"], archs, ptx, host, None, lambda msg: None)


def test_builds_run_while_the_caller_works(fakes):
    calls, started = fakes
    times = {}
    with _builds(host=True) as builds:
        assert started.wait(10), "no compiler started before finish()"
        cubins, usage, ptx, lib = builds.finish(times)
    assert cubins == {"sm_80": b"cubin sm_80", "sm_90": b"cubin sm_90"} and ptx == b"ptx compute_90"
    assert lib == b"host lib" and usage["sm_90"]["k"]["registers"] == 32
    assert sorted(calls) == [("device", "sm_80"), ("host", ("k",)), ("with_ptx", "sm_90")]   # PTX from the twin
    assert times["nvrtc"] > 0 and times["host"] >= 0


def test_ptx_without_its_twin_is_its_own_compile(fakes):
    calls, _ = fakes
    with _builds(archs=("sm_80",), ptx="compute_90") as builds:
        cubins, _, ptx, lib = builds.finish({})
    assert sorted(calls) == [("device", "compute_90"), ("device", "sm_80")]
    assert ptx == b"ptx compute_90" and lib == b""


def test_an_error_in_the_callers_work_waits_for_the_builds(fakes):
    calls, _ = fakes
    with pytest.raises(ValueError, match="plan failed"):
        with _builds() as builds:
            raise ValueError("plan failed")
    assert len(calls) == 2 and builds.pool._shutdown      # both compiles ran to the end; nothing left running


def test_cpu_during_nvrtc_counts_every_thread_of_the_compile(monkeypatch):
    """cpu['during nvrtc'] is the process's CPU from the start of the builds until the last device job ended:
    it holds a compiler's helper threads (NVRTC's --split-compile ones), not just the job's own thread."""
    def burn(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def device(source, target, fast_compile=False):
        helper = threading.Thread(target=burn, args=(0.2,))     # a compiler's own worker thread
        helper.start()
        helper.join()
        return b"cubin"

    def with_ptx(source, target, fast_compile=False):
        time.sleep(0.3)                      # a compiler waiting costs no CPU
        return b"cubin", b"ptx"
    monkeypatch.setattr(nvrtc_compile, "compile_device", device)
    monkeypatch.setattr(nvrtc_compile, "compile_device_with_ptx", with_ptx)
    monkeypatch.setattr(resources, "check_kernels", lambda kernels, arch, cubin=None: {"k": _Usage()})
    cpu, times = {}, {}
    with _builds() as builds:
        builds.finish(times, cpu)
    assert set(cpu) == {"during nvrtc"}
    assert 0.19 <= cpu["during nvrtc"] < times["nvrtc"] + 0.1 and times["nvrtc"] >= 0.3
