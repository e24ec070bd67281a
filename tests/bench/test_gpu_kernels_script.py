"""bench/gpu_kernels.py runs end to end on the cpu device (--small), so the GPU session's script works."""
import importlib.util
from pathlib import Path


def test_gpu_kernels_smoke_run_on_cpu(capsys):
    path = Path(__file__).resolve().parents[2] / "bench" / "gpu_kernels.py"
    spec = importlib.util.spec_from_file_location("gpu_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--device", "cpu", "--small", "--against", "onnxruntime", "--cases", "gemm,conv",
                   "--precisions", "tf32", "--iterations", "3", "--max-seconds", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "gemm 70x48x50" in out and "conv 2x8x9x9" in out and "onnxruntime-cpu" in out
