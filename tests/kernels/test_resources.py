"""Resource checks reject launches an arch cannot run; usage read from cubins matches ptxas -v."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from aotc.errors import AotcError, CompileError
from aotc.kernels import resources as R
from aotc.kernels.nvrtc_compile import _options, compile_device

from .kernel_sources import SOURCE

ARCHS = ("sm_80", "sm_90")

STATIC_48K = r"""
extern "C" __global__ void smem_48k(const float *x, float *y) {
  __shared__ float tile[12288];                       // exactly the 48 KiB static limit
  for (int i = threadIdx.x; i < 12288; i += blockDim.x) tile[i] = x[i];
  __syncthreads();
  y[threadIdx.x] = tile[(threadIdx.x * 7) % 12288];
}
"""

# 160 live floats per thread: ptxas takes all 255 registers and spills the rest.
MANY_REGS = r"""
extern "C" __global__ void many_regs(const float *x, float *y, int n) {
  float a[160];
  #pragma unroll
  for (int i = 0; i < 160; i++) a[i] = x[i * n + threadIdx.x];
  float s = 0.f;
  #pragma unroll
  for (int i = 0; i < 160; i++) s += a[i] * a[159 - i] + a[(i * 37) % 160];
  #pragma unroll
  for (int i = 0; i < 160; i++) y[i * n + threadIdx.x] = a[i] * s;
}
extern "C" __global__ void __launch_bounds__(128) bounded(float *y) { y[threadIdx.x] += 1.0f; }
"""


def ptxas_report(source: str, arch: str) -> dict[str, dict]:
    """The oracle: what `ptxas -v` (through NVRTC) says of each kernel."""
    from cuda.bindings import nvrtc
    opts = [o.encode() for o in _options(arch) + ["--ptxas-options=-v"]]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"k.cu", 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    out, name = {}, None
    for line in buf.decode().splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
            out[name] = {"static_smem": 0}
        elif m := re.search(r"(\d+) bytes stack frame", line):
            out[name]["local_bytes"] = int(m.group(1))
        elif m := re.search(r"Used (\d+) registers", line):
            out[name]["registers"] = int(m.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                out[name]["static_smem"] = int(s.group(1))
    return out


def launch(name="k", grid=(1, 1, 1), block=(256, 1, 1), smem=0):
    return SimpleNamespace(name=name, grid=grid, block=block, smem=smem)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", [SOURCE, STATIC_48K, MANY_REGS], ids=["samples", "smem48k", "regs"])
def test_cubin_usage_matches_ptxas(source, arch):
    usage = R.cubin_resources(compile_device(source, arch))
    assert {k: r.as_dict() for k, r in usage.items()} == ptxas_report(source, arch)


def test_block_of_2048_threads_rejected():
    with pytest.raises(R.ResourceError) as info:
        R.check_kernels([launch("aotc_loop_x", block=(2048, 1, 1))], "sm_80")
    msg = str(info.value)
    assert "aotc_loop_x" in msg and "sm_80" in msg and "2048 threads" in msg and "1024 threads per block" in msg
    assert isinstance(info.value, AotcError) and "\n" not in msg


@pytest.mark.parametrize("grid, axis", [((2**31, 1, 1), "x"), ((1, 65536, 1), "y"), ((1, 1, 65536), "z")])
def test_grid_limits(grid, axis):
    R.check_launch("k", (2**31 - 1, 65535, 65535), (32, 1, 1), 0, "sm_90")
    with pytest.raises(R.ResourceError, match=f"grid {axis} dimension {max(grid)} is above the limit"):
        R.check_launch("k", grid, (32, 1, 1), 0, "sm_90")


def test_block_z_limit():
    with pytest.raises(R.ResourceError, match="block z dimension 65 is above the limit of 64"):
        R.check_launch("k", (1, 1, 1), (1, 1, 65), 0, "sm_80")


@pytest.mark.parametrize("arch, limit", [("sm_80", 166912), ("sm_90", 232448), ("sm_90a", 232448),
                                         ("compute_90", 232448), ("sm_86", 101376)])
def test_dynamic_smem_limit_per_arch(arch, limit):
    R.check_kernels([launch(smem=limit)], arch)
    with pytest.raises(R.ResourceError) as info:
        R.check_kernels([launch("aotc_dot_y", smem=limit + 1)], arch)
    msg = str(info.value)
    assert f"aotc_dot_y on {arch}" in msg and f"{limit + 1} B dynamic" in msg and f"{limit} B" in msg


def test_unknown_arch_held_to_portable_48k():
    R.check_launch("k", (1, 1, 1), (64, 1, 1), 48 * 1024, "sm_120")
    with pytest.raises(R.ResourceError, match="k on sm_120: .* above the 49152 B"):
        R.check_launch("k", (1, 1, 1), (64, 1, 1), 48 * 1024 + 1, "sm_120")


@pytest.mark.parametrize("arch", ARCHS)
def test_static_plus_dynamic_smem(arch):
    cubin = compile_device(STATIC_48K, arch)
    assert R.cubin_resources(cubin)["smem_48k"].static_smem == 48 * 1024
    room = R.limits_for(arch).max_smem_per_block - 48 * 1024
    R.check_kernels([launch("smem_48k", smem=room)], arch, cubin)
    with pytest.raises(R.ResourceError, match=f"smem_48k on {arch}: 49152 B static \\+ {room + 1} B dynamic"):
        R.check_kernels([launch("smem_48k", smem=room + 1)], arch, cubin)


def test_static_smem_above_48k_fails_in_nvrtc():
    src = STATIC_48K.replace("12288]", "12289]")
    with pytest.raises(CompileError, match="too much shared data"):
        compile_device(src, "sm_80")


@pytest.mark.parametrize("arch", ARCHS)
def test_register_file_limit(arch):
    cubin = compile_device(MANY_REGS, arch)
    usage = R.cubin_resources(cubin)["many_regs"]
    assert usage.registers == 255 and usage.local_bytes > 0        # spills are recorded, not rejected
    R.check_kernels([launch("many_regs", block=(256, 1, 1))], arch, cubin)   # 8 warps x 8192 = 65536
    for threads in (288, 1024):         # 9 warps count as 12 (4 sub-partitions): 98304 registers
        with pytest.raises(R.ResourceError) as info:
            R.check_kernels([launch("many_regs", block=(threads, 1, 1))], arch, cubin)
        msg = str(info.value)
        assert f"many_regs on {arch}: 255 registers per thread x {threads} threads" in msg
        assert "65536 registers per SM" in msg


def test_register_check_rounds_warps_to_sub_partitions():
    usage = R.KernelResources(registers=200, static_smem=0, local_bytes=0)   # 6400 registers per warp
    R.check_launch("k", (1, 1, 1), (256, 1, 1), 0, "sm_90", usage)          # 8 warps: 51200
    with pytest.raises(R.ResourceError, match="200 registers per thread x 320 threads needs 76800 registers"):
        R.check_launch("k", (1, 1, 1), (320, 1, 1), 0, "sm_90", usage)      # 10 warps count as 12


@pytest.mark.parametrize("arch", ARCHS)
def test_launch_bounds_respected(arch):
    cubin = compile_device(MANY_REGS, arch)
    assert R.cubin_resources(cubin)["bounded"].max_threads == 128
    R.check_kernels([launch("bounded", block=(128, 1, 1))], arch, cubin)
    with pytest.raises(R.ResourceError, match="bounded on .*256 threads exceeds its __launch_bounds__ of 128"):
        R.check_kernels([launch("bounded", block=(256, 1, 1))], arch, cubin)


def test_kernel_missing_from_cubin():
    with pytest.raises(CompileError, match="kernel nope is missing from the sm_80 cubin"):
        R.check_kernels([launch("nope")], "sm_80", compile_device(SOURCE, "sm_80"))


@pytest.mark.parametrize("blob", [b"", b"\x7fELF" + b"\0" * 60, b"not a cubin" * 10])
def test_garbage_is_a_compile_error(blob):
    with pytest.raises(CompileError, match="cannot read kernel resources"):
        R.cubin_resources(blob)


def test_truncated_cubin_is_a_compile_error():
    cubin = compile_device(SOURCE, "sm_80")
    with pytest.raises(CompileError, match="cannot read kernel resources"):
        R.cubin_resources(cubin[: len(cubin) // 2])


def test_cached_cubin_gives_the_same_usage(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AOTC_NO_CACHE", raising=False)
    fresh = R.cubin_resources(compile_device(MANY_REGS, "sm_90"))
    assert list((tmp_path / "nvrtc").iterdir())
    assert R.cubin_resources(compile_device(MANY_REGS, "sm_90")) == fresh


@pytest.fixture(scope="module")
def compiled_model():
    from aotc.compiler import compile_model
    from aotc.bench.models.small import transformer_block
    model, _ = transformer_block()
    return compile_model(model, arch="sm_80,sm_90,none", host=False)


def test_generated_kernels_report_plausible_usage(compiled_model):
    from aotc.kernels.codegen import module_source
    res = compiled_model.plan.manifest["kernel_resources"]
    names = set(compiled_model.plan.kernels)
    assert set(res) == set(ARCHS) and len(names) >= 3
    source = module_source(compiled_model.kernels)
    for arch in ARCHS:
        assert set(res[arch]) == names
        assert all(0 < r["registers"] <= 255 for r in res[arch].values())
        oracle = ptxas_report(source, arch)
        assert {k: oracle[k] for k in names} == res[arch]
    assert any(r["static_smem"] > 0 for r in res["sm_80"].values())   # attention / row kernels tile in smem


def test_inspect_shows_registers_and_smem(compiled_model):
    from aotc.package.engine_format import engine_bytes, read_manifest
    from aotc.package.inspect import describe_engine, format_description
    data = engine_bytes(compiled_model.plan)
    assert read_manifest(data)["extra"]["kernel_resources"] == compiled_model.plan.manifest["kernel_resources"]
    info = describe_engine(data)
    res = compiled_model.plan.manifest["kernel_resources"]
    row = info["kernels"][0]
    assert row["resources"] == {a: res[a][row["name"]] for a in ARCHS}
    text = format_description(info)
    regs = "/".join(str(res[a][row["name"]]["registers"]) for a in ARCHS)
    assert "(regs per thread on sm_80/sm_90)" in text and f"regs {regs} smem " in text


def test_compile_rejects_kernels_over_the_arch_limits(monkeypatch):
    from aotc.compiler import compile_model
    from aotc.bench.models.small import mlp
    tiny = R.ArchLimits("sm_80", max_smem_per_block=163 * 1024, max_regs_per_thread=4)
    monkeypatch.setitem(R.LIMITS, "sm_80", tiny)
    model, _ = mlp()
    with pytest.raises(R.ResourceError,
                       match=r"kernel aotc_\w+ on sm_80: \d+ registers per thread is above the limit of 4"):
        compile_model(model, arch="sm_80,none", host=False)
