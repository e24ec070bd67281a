"""python -m bench.gpu_kernels runs end to end on the cpu device (--small), so the script works on a GPU machine."""
from bench import gpu_kernels


def test_gpu_kernels_smoke_run_on_cpu(capsys):
    rc = gpu_kernels.main(["--device", "cpu", "--small", "--against", "onnxruntime", "--cases", "gemm,conv",
                   "--precisions", "tf32", "--iterations", "3", "--max-seconds", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "gemm 70x48x50" in out and "conv 2x8x9x9" in out and "onnxruntime-cpu" in out
