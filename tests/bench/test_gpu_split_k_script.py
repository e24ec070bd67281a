"""bench/gpu_split_k.py runs end to end on the cpu device (--small), so the GPU session's script works."""
import importlib.util
from pathlib import Path


def test_gpu_split_k_smoke_run_on_cpu(capsys):
    path = Path(__file__).resolve().parents[2] / "bench" / "gpu_split_k.py"
    spec = importlib.util.spec_from_file_location("gpu_split_k", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--device", "cpu", "--small", "--precisions", "fp32", "--rounds", "2", "--iterations", "3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    row = next(line for line in out.splitlines() if line.startswith("matmul"))
    assert row.split()[2] == "1"               # one launch split, in the split engine
    assert float(row.split()[-1]) < 1e-5        # the two engines agree
