"""bench/gpu_check.py's parts that decide what runs on a fresh GPU machine, checked without one."""
import pytest

from aotc.bench.models.small import mlp


@pytest.fixture(scope="module")
def gpu_check():
    import bench.gpu_check
    return bench.gpu_check


class _OldOrt:
    """An onnxruntime that predates the model's opset."""
    __version__ = "1.14.0"

    class InferenceSession:
        def __init__(self, *a, **k):
            raise RuntimeError("ONNX Runtime only *guarantees* support for models stamped with official released "
                               "onnx opset versions. Opset 23 is under development")


def test_a_model_onnxruntime_cannot_load_is_compared_with_the_cpu_only(gpu_check):
    model, feeds = mlp()
    want, why = gpu_check._ort_reference(_OldOrt, model, feeds)
    assert want is None and why.startswith("onnxruntime 1.14.0 cannot run this opset-20 model")  # mlp is opset 20


def test_no_host_build_without_the_cpu_comparison(gpu_check, monkeypatch, tmp_path):
    """--no-cpu must not need g++ and the CUDA host headers (only NVRTC)."""
    calls = []

    def fake_compile(model, path, **kw):
        calls.append(kw)
        raise RuntimeError("stop after the compile call")
    monkeypatch.setattr(gpu_check.aotc.compiler, "compile", fake_compile)
    monkeypatch.setattr(gpu_check, "stand_in", lambda: False)
    rows = gpu_check.Rows("gpu_check")
    gpu_check.check_model(rows, "mlp", mlp, ["fp32"], str(tmp_path), None, with_cpu=False)
    assert calls == [{"precision": "fp32", "host": False}]
    assert rows.rows[0]["status"] == "error"     # guarded: one row, no exception
