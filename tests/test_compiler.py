"""The compile driver's binary builds: NVRTC per target and the host build start together and run
while the caller plans launches; the PTX comes from the twin sm_XY compile; an error waits for them."""
from __future__ import annotations

import re
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


class _Kernel:
    uses_fp16 = False

    def __init__(self, name, source):
        self.name, self.source = name, source


PTX_HEAD = ".version 9.0\n.target sm_80\n.address_size 64\n"


@pytest.fixture
def shared_fakes(monkeypatch, fakes):
    """Stand-ins for the shared-PTX build: NVRTC's PTX of a piece names its kernels, ptxas records its arch."""
    from aotc.kernels import shared_ptx
    calls, _ = fakes
    monkeypatch.setattr(shared_ptx, "find_ptxas", lambda: "/fake/ptxas")

    def device(source, target, fast_compile=False):
        calls.append(("nvrtc", target))
        names = sorted(set(re.findall(r"void (k\d)\(", source)))
        return (PTX_HEAD + "".join(f".visible .entry {n}()\n{{\n\tret;\n}}\n" for n in names)).encode()

    def assemble(ptx, arch, ptxas):
        calls.append(("ptxas", arch, ptx.splitlines()[1]))
        return f"cubin {arch}".encode(), 0.25
    monkeypatch.setattr(nvrtc_compile, "compile_device", device)
    monkeypatch.setattr(shared_ptx, "assemble", assemble)
    monkeypatch.setattr(resources, "check_kernels",
                        lambda kernels, arch, cubin=None: {k.name: _Usage() for k in kernels})
    return calls


def _kernels(body="float x;"):
    return [_Kernel(f"k{i}", f'extern "C" __global__ void k{i}() {{ {body} }}') for i in range(5)]


def test_arch_neutral_kernels_share_one_nvvm_run(shared_fakes):
    kernels = _kernels()
    cpu = {}
    with compiler.BinaryBuilds(kernels, "whole", [k.name for k in kernels], ["sm_80", "sm_90"], "compute_90",
                               False, None, lambda msg: None) as builds:
        cubins, _, ptx, _ = builds.finish({}, cpu)
    pieces = [c for c in shared_fakes if c[0] == "nvrtc"]
    assert len(pieces) == builds.pool._max_workers and {c[1] for c in pieces} == {"compute_80"}
    assert sorted(c for c in shared_fakes if c[0] == "ptxas") == [("ptxas", "sm_80", ".target sm_80"),
                                                                  ("ptxas", "sm_90", ".target sm_90")]
    assert cubins == {"sm_80": b"cubin sm_80", "sm_90": b"cubin sm_90"}
    assert b".target sm_90" in ptx and all(f".entry k{i}()".encode() in ptx for i in range(5))
    assert builds.child_cpu == 0.5 and cpu["during nvrtc"] >= 0.5      # ptxas's CPU is the compile's


def test_arch_dependent_kernels_compile_per_arch(shared_fakes):
    kernels = _kernels("__nv_bfloat16 x;")
    with compiler.BinaryBuilds(kernels, "whole", [k.name for k in kernels], ["sm_80", "sm_90"], "compute_90",
                               False, None, lambda msg: None) as builds:
        builds.finish({})
    assert sorted(shared_fakes) == [("nvrtc", "sm_80"), ("with_ptx", "sm_90")]     # the per-arch jobs


def test_pieces_that_do_not_merge_compile_whole(shared_fakes, monkeypatch):
    from aotc.kernels import shared_ptx

    def conflict(texts):
        raise shared_ptx.MergeConflict("PTX merge: k0 is defined differently by two pieces")
    monkeypatch.setattr(shared_ptx, "merge_ptx", conflict)
    kernels = _kernels()
    with compiler.BinaryBuilds(kernels, "whole", [k.name for k in kernels], ["sm_80", "sm_90"], "compute_90",
                               False, None, lambda msg: None) as builds:
        cubins, _, ptx, _ = builds.finish({})
    whole = sorted(c[1] for c in shared_fakes if c[0] == "nvrtc")[-3:]
    assert whole == ["compute_90", "sm_80", "sm_90"] and not [c for c in shared_fakes if c[0] == "ptxas"]
    assert set(cubins) == {"sm_80", "sm_90"} and builds.child_cpu == 0.0
