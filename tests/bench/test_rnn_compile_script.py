"""python -m bench.rnn_compile runs end to end (a few steps) and its engines match onnxruntime."""
from bench import rnn_compile


def test_rnn_compile_report_small(capsys):
    assert rnn_compile.main(["--steps", "12", "--hidden", "8"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(rows) == {"LSTMx12", "GRUx12", "GRUlbrx12"}
    launches, distinct = int(rows["LSTMx12"][1]), int(rows["LSTMx12"][2])
    assert launches <= 12 + 3          # one kernel a step: the cell runs in the recurrent GEMM's epilogue
    assert distinct <= 6               # and the steps share it
    assert int(rows["GRUx12"][1]) <= 2 * 12 + 3 and int(rows["GRUlbrx12"][1]) <= 12 + 3
