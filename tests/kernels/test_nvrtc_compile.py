"""NVRTC turns the kernels the host tests run into real GPU code, no GPU needed."""
from __future__ import annotations

import struct

import pytest

from aotc.errors import CompileError
from aotc.kernels.nvrtc_compile import compile_device, compile_device_nvcc, find_nvcc, nvrtc_version

from .kernel_sources import DEADLOCK_SOURCE, SOURCE

EM_CUDA = 190


def elf_machine_and_arch(blob: bytes) -> tuple[int, int]:
    assert blob[:4] == b"\x7fELF" and blob[4] == 2, "not a 64-bit ELF"
    e_machine = struct.unpack_from("<H", blob, 18)[0]
    e_flags = struct.unpack_from("<I", blob, 48)[0]
    return e_machine, (e_flags >> 8) & 0xFF


def test_nvrtc_version():
    major, minor = nvrtc_version()
    assert major >= 12 and minor >= 0


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("source", [SOURCE, DEADLOCK_SOURCE], ids=["kernels", "stuck"])
def test_cubin_per_arch(source, arch):
    cubin = compile_device(source, f"sm_{arch}")
    assert elf_machine_and_arch(cubin) == (EM_CUDA, arch)
    assert b"softmax_rows" in cubin or source is DEADLOCK_SOURCE


def test_ptx_for_compute_90():
    ptx = compile_device(SOURCE, "compute_90")
    text = ptx.decode()
    assert text.lstrip().startswith("//") and "\n.version " in text
    assert ".target sm_90" in text
    assert ".entry ew_gelu_f32" in text and ".entry transpose" in text
    assert not ptx.endswith(b"\0")


def test_no_fast_math_in_the_test_kernels():
    """gelu's tanhf is CUDA's precise one (not tanh.approx); softmax's explicit __expf stays
    ex2.approx but without ftz (the host emulates exactly that: cuda_host_emu.h)."""
    ptx = compile_device(SOURCE, "compute_90").decode()
    assert "tanh.approx" not in ptx and "div.approx.ftz" not in ptx and "lg2.approx" not in ptx
    assert "ex2.approx.f32" in ptx


def test_syntax_error_raises_with_log():
    with pytest.raises(CompileError) as info:
        compile_device('#include "aotc_prelude.cuh"\n__global__ void k(float *y) { y[0] = ; }\n', "sm_90")
    assert "\n" not in str(info.value) and "sm_90" in str(info.value)
    assert "expected an expression" in info.value.log


def test_bad_target():
    with pytest.raises(CompileError, match="bad GPU target"):
        compile_device(SOURCE, "hopper")


@pytest.mark.skipif(find_nvcc() is None, reason="no nvcc on this machine")
def test_nvcc_cross_check():
    cubin = compile_device_nvcc(SOURCE, "sm_90")
    assert elf_machine_and_arch(cubin) == (EM_CUDA, 90)
    assert elf_machine_and_arch(compile_device(SOURCE, "sm_90")) == (EM_CUDA, 90)


def test_fast_compile_gives_a_different_valid_cubin():
    """--Ofast-compile=max (aotc compile --fast-compile) is a distinct, cached build for the same arch."""
    fast = compile_device(SOURCE, "sm_80", fast_compile=True)
    assert elf_machine_and_arch(fast) == (EM_CUDA, 80)
    assert fast != compile_device(SOURCE, "sm_80")


def test_one_sm_compile_gives_the_compute_ptx_too(tmp_path, monkeypatch):
    """compile_device_with_ptx's PTX is what a compute_90 compile makes, and lands in that compile's cache slot."""
    from aotc.kernels.nvrtc_compile import compile_device_with_ptx
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    cubin, ptx = compile_device_with_ptx(SOURCE, "sm_90")
    assert cubin[:4] == b"\x7fELF" and b".target sm_90" in ptx
    assert compile_device(SOURCE, "sm_90") == cubin
    monkeypatch.setenv("AOTC_NO_CACHE", "1")                 # a real compute_90 compile, no cache
    assert compile_device(SOURCE, "compute_90") == ptx
    monkeypatch.delenv("AOTC_NO_CACHE")
    assert compile_device(SOURCE, "compute_90") == ptx       # and the cached one
    with pytest.raises(CompileError, match="expected sm_XY"):
        compile_device_with_ptx(SOURCE, "compute_90")


def test_an_empty_compile_log_leaves_python_constants_alone():
    """NVRTC writes its log into the buffer it is given; an empty log is one NUL byte, and a 1-byte
    bytes object is CPython's shared b" ": writing there turned every later printed space into NUL."""
    import subprocess
    import sys
    code = ("import os\n"
            "os.environ['AOTC_NO_CACHE'] = '1'\n"
            "from aotc.kernels.nvrtc_compile import compile_device, compile_device_with_ptx\n"
            "src = 'extern \"C\" __global__ void k(float *x) { x[threadIdx.x] = 1.0f; }'\n"
            "compile_device(src, 'sm_90'); compile_device_with_ptx(src, 'sm_80')\n"
            "print('a', 'b')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    assert out == b"a b\n"
