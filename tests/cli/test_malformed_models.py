"""Malformed models and non-engine files through the CLI: one clean error line each.

A user who hands `aotc compile` a broken model, or `aotc run` / `aotc inspect`
something that is not an engine, gets one `aotc: error:` line that says what
is wrong and a non-zero exit: no traceback, no "internal error". Each row of
the tables below writes one such file and names words the line must hold.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from aotc.cli.main import main


def _io(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _relu(shape, opset=17) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_io("x", shape)], [_io("y", shape)], opset=opset)


def _with_weight() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_io("x", [2, 64])], [_io("y", [2, 64])], [w])


def _external(location: str) -> onnx.ModelProto:
    """x + w, w's data said to live in the file `location`."""
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", location
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_io("x", [2, 3])], [_io("y", [2, 3])], [w])


def _save(d, model: onnx.ModelProto, name="m.onnx"):
    path = d / name
    path.write_bytes(model.SerializeToString())
    return path


def _raw(data: bytes, name="m.onnx"):
    def write(d):
        (d / name).write_bytes(data)
        return d / name
    return write


def _secret(d) -> None:
    """A file outside the model's folder that a hostile model points at."""
    (d.parent / "secret.bin").write_bytes(np.ones(6, np.float32).tobytes())


def _symlinked(d):
    _secret(d)
    os.symlink(d.parent / "secret.bin", d / "link.bin")
    return _save(d, _external("link.bin"))


def _traversal(d):
    _secret(d)
    return _save(d, _external("../secret.bin"))


def _absolute(d):
    _secret(d)
    return _save(d, _external(str(d.parent / "secret.bin")))


_GOOD = _with_weight().SerializeToString()
_HUGE_MLIR = """func.func @main(%arg0: tensor<1099511627776x4xf32>) -> tensor<1099511627776x4xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<1099511627776x4xf32>
  return %0 : tensor<1099511627776x4xf32>
}
"""
_BAD_MLIR = """func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<2xf32
  return %0 : tensor<2xf32>
}
"""

MODELS = {   # id: (write the model into a folder -> its path, words the error line holds)
    "corrupt-bytes": (_raw(b"\xff\xfe not a protobuf \x00\x01" * 8), ["cannot load ONNX model"]),
    "truncated": (_raw(_GOOD[:len(_GOOD) // 2]), ["cannot load ONNX model"]),
    "truncated-header": (_raw(_GOOD[:7]), ["ONNX"]),
    "empty-file": (_raw(b""), ["ir_version"]),
    "cycle": (lambda d: _save(d, _model([helper.make_node("Relu", ["b"], ["a"]),
                                         helper.make_node("Relu", ["a"], ["b"])],
                                        [_io("x", [2, 3])], [_io("b", [2, 3])])), ["topologically sorted"]),
    "unknown-op": (lambda d: _save(d, _model([helper.make_node("FooBar", ["x"], ["y"])],
                                             [_io("x", [2, 3])], [_io("y", [2, 3])])), ["FooBar"]),
    "mismatched-shapes": (lambda d: _save(d, _model([helper.make_node("Add", ["x", "z"], ["y"])],
                                                    [_io("x", [2, 3]), _io("z", [4, 5])], [_io("y", [2, 3])])),
                          ["Add", "f32[2,3]", "f32[4,5]"]),
    "negative-dim": (lambda d: _save(d, _relu([2, -3])), ["input 'x' dim 1 is -3"]),
    "negative-initializer-dim": (lambda d: _save(d, _neg_initializer()), ["Negative dimension", "tensor name: w"]),
    "huge-input": (lambda d: _save(d, _relu([2**40, 4])), ["tensor 'x'", "16,384.0 GiB", "141 GiB"]),
    "huge-overflowing-dims": (lambda d: _save(d, _relu([2**62, 2**62])), ["tensor 'x'", "141 GiB"]),
    "huge-intermediate": (lambda d: _save(d, _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                                                    [_io("a", [200000, 1]), _io("b", [1, 200000])],
                                                    [_io("y", [200000, 200000])])),
                          ["f32[200000,200000]", "149.0 GiB", "141 GiB"]),
    "external-data-missing": (lambda d: _save(d, _external("missing.bin")), ["'w'", "missing.bin", "missing"]),
    "external-data-dotdot": (_traversal, ["'w'", "'../secret.bin'", "'..'"]),
    "external-data-absolute": (_absolute, ["'w'", "not a relative path"]),
    "external-data-symlink-out": (_symlinked, ["'w'", "outside the model's folder"]),
    "zero-stride": (lambda d: _save(d, _model([helper.make_node("MaxPool", ["x"], ["y"], name="pool",
                                                                kernel_shape=[2, 2], strides=[0, 1])],
                                              [_io("x", [1, 2, 6, 6])], [_io("y", [1, 2, 5, 5])])),
                    ["MaxPool 'pool'", "strides=[0, 1] must be positive"]),
    "no-outputs": (lambda d: _save(d, _model([helper.make_node("Relu", ["x"], ["y"])], [_io("x", [2])], [])),
                   ["no outputs"]),
    "pads-length": (lambda d: _save(d, _model([helper.make_node("Pad", ["x", "p"], ["y"], name="pad")],
                                              [_io("x", [2, 3])], [_io("y", [4, 5])],
                                              [numpy_helper.from_array(np.array([1, 1, 1], np.int64), "p")])),
                    ["Pad 'pad'", "pads has 3 values, expected 4"]),
    "resize-without-scales-or-sizes": (lambda d: _save(d, _model([helper.make_node("Resize", ["x", "", ""], ["y"],
                                                                                   name="rs")],
                                                                 [_io("x", [1, 1, 2, 2])], [_io("y", [1, 1, 4, 4])])),
                                       ["Resize 'rs'", "needs non-empty scales or sizes"]),
    "cast-to-bad-type": (lambda d: _save(d, _model([helper.make_node("Cast", ["x"], ["y"], name="c", to=-1)],
                                                   [_io("x", [2])], [_io("y", [2])])),
                         ["Cast 'c'", "to=[-1] is not an ONNX data type"]),
    "gather-index-out-of-range": (lambda d: _save(d, _model([helper.make_node("Gather", ["x", "i"], ["y"], name="g")],
                                                            [_io("x", [2, 3])], [_io("y", [1, 3])],
                                                            [numpy_helper.from_array(np.array([5], np.int64), "i")])),
                                  ["Gather 'g'", "index 5 is out of range for axis 0 of size 2"]),
    "opset-99": (lambda d: _save(d, _relu([2, 3], opset=99)), ["opset 99", "opsets 1 to"]),
    "stablehlo-syntax-error": (_raw(_BAD_MLIR.encode(), "m.mlir"), ["cannot parse StableHLO", "expected '>'"]),
    "stablehlo-huge": (_raw(_HUGE_MLIR.encode(), "m.mlir"), ["tensor 'arg0'", "141 GiB"]),
}


def _neg_initializer() -> onnx.ModelProto:
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], np.ones(6, np.float32))
    w.dims[1] = -3
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_io("x", [2, 3])], [_io("y", [2, 3])], [w])


def one_clean_line(res, *words) -> str:
    """The run failed with exactly one `aotc: error:` line on stderr holding `words`."""
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 1, (res.exit_code, res.output)
    assert len(lines) == 1 and lines[0].startswith("aotc: error: "), res.stderr
    assert "Traceback" not in res.output and "internal error" not in lines[0], lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.mark.parametrize("case", list(MODELS))
def test_compile_refuses_malformed_model_in_one_line(case, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    write, words = MODELS[case]
    path = write(folder)
    out = tmp_path / "m.engine"
    res = CliRunner().invoke(main, ["compile", str(path), "-o", str(out), "-q", "--arch", "none", "--no-host"])
    one_clean_line(res, *words)
    assert not out.exists()


NOT_ENGINES = {   # id: (file bytes, words)
    "onnx-model": (_GOOD, ["corrupt engine", "bad magic"]),
    "empty-file": (b"", ["corrupt engine", "0 bytes"]),
    "text": (b"hello, I am not an engine\n" * 10, ["bad magic"]),
    "magic-only": (b"AOTCENG\0", ["corrupt engine", "shorter than the 64-byte header"]),
    "zero-header": (b"AOTCENG\0" + bytes(56), ["engine format version 0 is not supported"]),
}


@pytest.mark.parametrize("command", ["run", "inspect"])
@pytest.mark.parametrize("case", list(NOT_ENGINES))
def test_run_and_inspect_refuse_a_non_engine_in_one_line(case, command, tmp_path):
    data, words = NOT_ENGINES[case]
    path = tmp_path / "x.engine"
    path.write_bytes(data)
    one_clean_line(CliRunner().invoke(main, [command, str(path)]), *words)


def test_running_out_of_host_memory_while_compiling_is_one_line(tmp_path, monkeypatch):
    """A converter or a pass that builds a constant beyond this machine's memory (an average
    pool's divisor over a 2^40-pixel image) gets a clean line naming the allocation."""
    import aotc.compiler

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 4.00 TiB for an array with shape (1, 1, 274877906944, 4)")
    monkeypatch.setattr(aotc.compiler, "compile_model", out_of_memory)
    path = _save(tmp_path, _relu([2, 3]))
    res = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "m.engine"), "-q"])
    one_clean_line(res, "out of host memory while compiling", "4.00 TiB")


def _artifact_with_bad_dialect_name(as_export: bool) -> bytes:
    """A StableHLO portable artifact (or jax.export bytes) whose 'builtin' dialect name holds
    a byte that is not UTF-8: MLIR's generic parser aborted the process on it."""
    jax = pytest.importorskip("jax")
    exp = jax.export.export(jax.jit(lambda x: jax.numpy.tanh(x) + 1))(jax.numpy.ones((2, 3), "float32"))
    data = bytes(exp.serialize() if as_export else exp.mlir_module_serialized)
    i = data.index(b"builtin")
    return data[:i + 1] + b"\xff" + data[i + 2:]


@pytest.mark.parametrize("suffix", [".mlirbc", ".jaxexport"])
def test_a_corrupt_stablehlo_artifact_is_one_line_not_an_abort(suffix, tmp_path):
    """Run as a user would, in a process of its own: an abort would not reach the test's assertions."""
    import subprocess
    import sys
    path = tmp_path / f"m{suffix}"
    path.write_bytes(_artifact_with_bad_dialect_name(suffix == ".jaxexport"))
    proc = subprocess.run([sys.executable, "-m", "cli.main", "compile", str(path), "-o", str(tmp_path / "m.engine"),
                           "-q", "--arch", "none", "--no-host"], capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith("aotc: error: cannot read the StableHLO portable artifact, corrupt or truncated")


def test_an_engine_whose_input_no_host_holds_is_one_line(tmp_path):
    """A hand-made engine (aotc compile refuses such a tensor) with a 16 TiB input: `aotc run`
    cannot draw random inputs for it and says so in one line."""
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            always_overcommit = f.read().strip() == "1"
    except OSError:
        always_overcommit = True
    if always_overcommit:     # numpy's 32 TiB would be granted, then filled until the OOM killer came
        pytest.skip("the kernel grants any allocation here (vm.overcommit_memory=1 or unknown)")
    from aotc.package.engine_format import write_engine
    from aotc.package.plan import TensorSpec
    from tests.package.conftest import make_plan
    plan = make_plan()
    plan.inputs[1] = TensorSpec("u", "f32", (2**40, 4))
    write_engine(plan, tmp_path / "big.engine")
    one_clean_line(CliRunner().invoke(main, ["run", str(tmp_path / "big.engine")]), "out of host memory")
