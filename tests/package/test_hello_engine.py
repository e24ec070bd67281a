"""examples/hello_engine.c, the serving demo: built with the system cc, run on
the cpu device with many threads (one context each) against one engine, every
answer checked byte-for-byte by the program; then under valgrind. Also: the
runtime library never calls exit/abort or prints."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from aotc.package import runtime_binding as rb

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "hello_engine.c")


@pytest.fixture(scope="module")
def hello(tmp_path_factory):
    exe = tmp_path_factory.mktemp("hello_example") / "hello_engine"
    lib = rb.library_path()
    cc = shutil.which("cc") or shutil.which("gcc")
    proc = subprocess.run([cc, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror",
                           "-I", os.path.join(os.path.dirname(rb.__file__), "runtime"), EXAMPLE, lib,
                           f"-Wl,-rpath,{os.path.dirname(lib)}", "-lpthread", "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(exe)


def _dump(path, specs):
    raw, arrays, pos = path.read_bytes(), [], 0
    for spec in specs:
        arrays.append(np.frombuffer(raw[pos:pos + spec.nbytes], rb._np_dtype(spec.dtype)).reshape(spec.shape))
        pos += spec.nbytes
    assert pos == len(raw)
    return arrays


def test_many_threads_give_identical_answers(hello, engine_file, expected_fn, tmp_path):
    proc = subprocess.run([hello, str(engine_file), "8", "400", str(tmp_path / "d.bin")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 threads answered 400 of 400 requests, 0 wrong" in proc.stdout
    assert "input x: f32[10,100] 4000 B" in proc.stdout and "output z: f32[1000] 4000 B" in proc.stdout
    engine = rb.Engine(engine_file)
    x, u, y, z = _dump(tmp_path / "d.bin", engine.inputs + engine.outputs)
    assert np.abs(x).max() <= 1 and np.unique(x).size > 900     # really random inputs
    want = expected_fn(x, u)
    np.testing.assert_allclose(y, want["y"], rtol=1e-6)
    np.testing.assert_allclose(z, want["z"], rtol=1e-6)


def test_serving_a_compiled_model_matches_onnxruntime(hello, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    import aotc.compiler
    from aotc.bench.models.small import MODELS
    model, _ = MODELS["transformer_block"]()
    path = tmp_path / "tb.engine"
    aotc.compiler.compile(model, path, arch="none")
    proc = subprocess.run([hello, str(path), "4", "24", str(tmp_path / "d.bin")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "answered 24 of 24 requests, 0 wrong" in proc.stdout, \
        proc.stdout + proc.stderr
    engine = rb.Engine(path)
    x, out = _dump(tmp_path / "d.bin", engine.inputs + engine.outputs)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]) \
        .run(None, {engine.inputs[0].name: x})[0]
    assert np.max(np.abs(out - want)) <= 1e-4 * np.max(np.abs(want))


def test_errors_exit_cleanly(hello, tmp_path):
    proc = subprocess.run([hello, str(tmp_path / "missing.engine")], capture_output=True, text=True)
    assert proc.returncode == 2 and "hello_engine: NOT_FOUND: cannot open engine file" in proc.stderr
    from aotc.package.engine_format import FORMAT_VERSION
    (tmp_path / "bad.engine").write_bytes(b"AOTCENG\0" + bytes([FORMAT_VERSION]) + b"\0" * 100)
    proc = subprocess.run([hello, str(tmp_path / "bad.engine")], capture_output=True, text=True)
    assert proc.returncode == 2 and "DATA_LOSS: corrupt engine" in proc.stderr


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_threads_under_valgrind(hello, engine_file):
    proc = subprocess.run(["valgrind", "--quiet", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
                           "--error-exitcode=99", hello, str(engine_file), "3", "12"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "3 threads answered 12 of 12 requests, 0 wrong" in proc.stdout


def test_library_never_exits_or_prints():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed")
    proc = subprocess.run([nm, "-D", "--undefined-only", rb.library_path()], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    imported = {line.split()[-1].split("@")[0] for line in proc.stdout.splitlines() if line.strip()}
    banned = {"exit", "_exit", "_Exit", "abort", "printf", "puts", "putchar", "perror", "fprintf",
              "vprintf", "vfprintf", "fputs", "fputc", "__printf_chk", "__fprintf_chk", "__vfprintf_chk"}
    assert "dlopen" in imported and not imported & banned, sorted(imported & banned)
