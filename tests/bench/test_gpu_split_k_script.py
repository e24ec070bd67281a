"""python -m bench.gpu_split_k runs end to end on the cpu device (--small), so the script works on a GPU machine."""
from bench import gpu_split_k


def test_gpu_split_k_smoke_run_on_cpu(capsys):
    rc = gpu_split_k.main(["--device", "cpu", "--small", "--precisions", "fp32", "--rounds", "2", "--iterations", "3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    row = next(line for line in out.splitlines() if line.startswith("matmul"))
    assert row.split()[2] == "1"               # one launch split, in the split engine
    assert float(row.split()[-1]) < 1e-5        # the two engines agree
