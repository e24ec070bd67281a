"""text: one line per kernel, the marker on kernels beyond tolerance, the first bad kernel, the bisect line."""
from aotc.debug.bisect import BisectResult
from aotc.debug.compare import CompareReport, DeviceReport, KernelReport
from aotc.debug.metrics import TensorError
from aotc.debug.text import format_bisect, format_compare


def _report(errors, outputs):
    kernels = [KernelReport(i, f"aotc_k{i}", names, [f"t{i}"], e, ["x.f16"])
               for i, (names, e) in enumerate(errors)]
    return DeviceReport("cpu", kernels, [], outputs, 1e-2)


def test_table_marks_the_bad_kernels_and_names_the_first():
    d = _report([(["a", "b", "c", "d", "e", "f"], TensorError(1e-4, 1e-5)), ([], TensorError(3.0, 0.5, 0, 7)),
                 (["g"], None)], {"y": TensorError(2.0, 0.4, 1, 0)})
    text = format_compare(CompareReport("m.onnx", "fp16", ["k"], 1e-2, [d]))
    lines = text.splitlines()
    assert lines[0] == "aotc debug compare: m.onnx (fp16, keep fp32: k)"
    row0 = next(line for line in lines if "aotc_k0" in line)
    row1 = next(line for line in lines if "aotc_k1" in line)
    assert "a, b, c, d, ... 2 more -> t0" in row0 and "beyond" not in row0
    assert "(no ONNX node: x.f16)" in row1 and row1.endswith("<- beyond tolerance") and "0/7" in row1
    assert "first kernel beyond tolerance: #1 aotc_k1" in text and "--bisect-precision" in text
    assert "output y:" in text and any("-" in line and "aotc_k2" in line for line in lines)


def test_outputs_off_without_a_bad_kernel():
    d = _report([(["a"], TensorError(1e-3, 5e-3))], {"y": TensorError(1.0, 0.02)})
    assert "errors add up" in format_compare(CompareReport("m", "fp32", [], 1e-2, [d]))


def test_bisect_lines():
    ok = _report([], {"y": TensorError(1e-4, 1e-5)})
    bad = _report([], {"y": TensorError(1.0, 0.5)})
    fixed = BisectResult(["n1", "n 2"], ["n1", "n 2"], True, 5, bad, ok)
    assert format_bisect(fixed).splitlines()[-1] == "  --keep-fp32 'n1,n 2'"
    assert "already" in format_bisect(BisectResult([], [], True, 1, ok, ok))
    assert "raise --max-trials" in format_bisect(BisectResult(["n1"], ["n1"], False, 16, bad, bad))
