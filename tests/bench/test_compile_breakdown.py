"""bench.compile_breakdown on a small model: stage and CPU seconds, NVRTC phases, kernel classes."""
import os

from bench import compile_breakdown as cb
from aotc.bench.models.small import cnn
from aotc.kernels.codegen import Kernel


def test_cold_compile_reports_nvrtc_cpu_and_restores_the_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path / "kept"))
    s = cb.cold_compile(cnn()[0]).summary()
    assert os.environ["AOTC_CACHE_DIR"] == str(tmp_path / "kept") and not (tmp_path / "kept").exists()
    assert set(s["cpu_seconds"]) == {"total", "during nvrtc"}
    assert s["cpu_seconds"]["during nvrtc"] > 0.1      # cold: NVRTC really ran (a warm cache costs ~0)


def test_nvrtc_phases_name_the_optimizer():
    phases = cb.nvrtc_phases('#include "aotc_prelude.cuh"\nextern "C" __global__ void k(float *p) { p[0] = 1.f; }\n',
                             "sm_90")
    assert "NVVM Optimizer" in phases and all(v >= 0 for v in phases.values())


def _kernel(name, source):
    k = object.__new__(Kernel)
    k.name, k.source = name, source
    return k


def test_kernels_differing_only_in_sizes_form_one_class():
    a = _kernel("aotc_dot_a", "void aotc_dot_a() { if (m < 3136 && k < 64) x = m / 56; }")
    b = _kernel("aotc_dot_b", "void aotc_dot_b() { if (m < 12544 && k < 147) x = m / 112; }")
    c = _kernel("aotc_dot_c", "void aotc_dot_c() { if (m < 3136 && k < 64) x = m % 56; }")
    classes = cb.kernel_classes([a, b, c, a])
    assert sorted(len(v) for v in classes.values()) == [1, 2]


def test_cli_needs_one_model(capsys):
    assert cb._cli(["a", "b"]) == 2 and "name one model" in capsys.readouterr().err
    assert cb._cli([]) == 2


def test_check_sass_finds_the_shared_build_equal_to_nvrtcs(monkeypatch, tmp_path):
    """A cold compile of the small CNN: the manifest says how the device code was built, and each
    kernel's SASS in the engine equals NVRTC's whole-module compile's; a changed cubin is caught."""
    from aotc.kernels.shared_ptx import find_ptxas
    from aotc.profile.sass import nvdisasm_path
    if find_ptxas() is None or nvdisasm_path() is None:
        import pytest
        pytest.skip("needs ptxas of NVRTC's release and nvdisasm")
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    result = cb.cold_compile(cnn()[0])
    assert result.plan.manifest["device_build"] == "one NVVM run, ptxas per arch"
    assert cb.sass_differences(result) == {"sm_80": [], "sm_90": []}
    result.plan.cubins["sm_90"] = result.plan.cubins["sm_80"]          # the wrong arch's code
    assert cb.sass_differences(result)["sm_90"]
