"""The Triton backend's C code under AddressSanitizer and UBSan, driven by fake_triton.c (a
stand-in for tritonserver implementing the Triton C API the backend calls): config
auto-complete and refusal, batching of consecutive requests, per-request errors,
statistics, and every request answered once and released once."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from aotc.serving import backend_build
from tests.serving.conftest import rand, reference

HERE = os.path.dirname(os.path.abspath(__file__))
FP32, FP16 = 11, 10


def _build_harness(directory, flags):
    cc = shutil.which("cc") or shutil.which("gcc")
    src = os.path.join(os.path.dirname(backend_build.__file__), "backend")
    runtime = os.path.normpath(os.path.join(src, backend_build._RUNTIME))
    exe = directory / "fake_triton"
    cmd = [cc, "-std=c99", "-g", "-Wall", "-Wextra", "-Werror", *flags, f"-I{src}", f"-I{runtime}",
           os.path.join(HERE, "fake_triton.c"),
           *[os.path.join(src, f) for f in backend_build.BACKEND_SOURCES],
           *[os.path.join(runtime, f) for f in backend_build.RUNTIME_SOURCES],
           "-o", str(exe), "-ldl", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(exe)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The stand-in Triton and the backend, under AddressSanitizer and UBSan."""
    return _build_harness(tmp_path_factory.mktemp("fake_triton"),
                          ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"])


def _model_dir(tmp_path, engine):
    d = tmp_path / "model"
    (d / "1").mkdir(parents=True)
    shutil.copyfile(engine, d / "1" / "model.engine")
    return d


def _drive(harness, tmp_path, engine, config, requests=(), auto_complete=True, env=None, wrapper=()):
    """Runs the harness; requests are lists of (name, type, array). Returns (lines, outputs by request)."""
    model = _model_dir(tmp_path, engine)
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = []
    for i, inputs in enumerate(requests):
        specs = []
        for j, (name, dtype, arr) in enumerate(inputs):
            f = tmp_path / f"in{i}_{j}.bin"
            f.write_bytes(np.ascontiguousarray(arr).tobytes())
            specs.append(f"{name}:{dtype}:{','.join(str(d) for d in arr.shape)}:{f}")
        args.append("+".join(specs))
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, FAKE_TRITON_OUT=str(out), ASAN_OPTIONS="detect_leaks=1", **(env or {}))
    proc = subprocess.run([*wrapper, harness, str(model), "m", str(tmp_path / "config.json"),
                           "1" if auto_complete else "0", *args], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "ERROR: AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr[-5000:]
    lines = proc.stdout.splitlines()
    return lines, out


def _config(lines):
    found = [json.loads(line[len("config: "):]) for line in lines if line.startswith("config: ")]
    return found[-1] if found else None


BASE = {"name": "m", "backend": "aotc", "max_batch_size": 0, "input": [], "output": []}


def test_auto_complete_fills_a_batching_config_from_the_engine(harness, tmp_path, serving_engines):
    lines, _ = _drive(harness, tmp_path, serving_engines["mlp"][0], BASE)
    cfg = _config(lines)
    assert cfg["max_batch_size"] == 32 and "dynamic_batching" in cfg
    assert cfg["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [32]}]
    assert [o["dims"] for o in cfg["output"]] == [[10]]
    assert "harness: done" in lines


def test_the_rest_of_the_config_survives_auto_complete_unchanged(harness, tmp_path, serving_engines):
    extra = {"parameters": {"note": {"string_value": "caf\u00e9 \"q\" \\ \n\t\U0001F600"}},
             "version_policy": {"specific": {"versions": ["1", "2"]}}, "optimization": {"priority": "PRIORITY_MAX"},
             "model_warmup": [], "flag": True, "none": None, "ratio": -1.5e3}
    lines, _ = _drive(harness, tmp_path, serving_engines["mlp"][0], {**BASE, **extra})
    cfg = _config(lines)
    for key, value in extra.items():
        assert cfg[key] == value, key


def test_a_malformed_config_is_an_error_naming_the_byte(harness, tmp_path, serving_engines):
    model = _model_dir(tmp_path, serving_engines["mlp"][0])
    (tmp_path / "config.json").write_text('{"name": "m", "input": [1, 2,, 3]}')
    proc = subprocess.run([harness, str(model), "m", str(tmp_path / "config.json"), "1"], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, FAKE_TRITON_OUT=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model: ERROR model 'm': cannot read its configuration: bad JSON at byte 29: unexpected character" \
        in proc.stdout.splitlines(), proc.stdout


def test_auto_complete_of_a_static_engine_keeps_max_batch_size_zero(harness, tmp_path, serving_engines):
    engine, onnx_path = serving_engines["mlp_static"]
    x = rand((4, 32), 3)
    lines, out = _drive(harness, tmp_path, engine, BASE, [[("x", FP32, x)]])
    cfg = _config(lines)
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    assert cfg["input"][0]["dims"] == [4, 32]
    assert "response 0: OK" in lines
    want = reference(onnx_path, {"x": x})
    (name, ref), = want.items()
    got = np.fromfile(out / f"r0_{name}.bin", np.float32).reshape(ref.shape)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_dims_of_a_second_dynamic_dim_are_minus_one(harness, tmp_path, serving_engines):
    lines, _ = _drive(harness, tmp_path, serving_engines["seq"][0], BASE)
    cfg = _config(lines)
    assert cfg["max_batch_size"] == 16
    assert cfg["input"][0]["dims"] == [-1]
    assert {o["name"]: o["dims"] for o in cfg["output"]} == {"y": [-1], "s": [1]}


def test_an_engine_whose_outputs_do_not_follow_the_batch_is_served_unbatched(harness, tmp_path, serving_engines):
    x = rand((3, 8), 30)
    lines, out = _drive(harness, tmp_path, serving_engines["flatten"][0], BASE, [[("x", FP32, x)]])
    cfg = _config(lines)
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    assert cfg["input"][0]["dims"] == [-1, 8] and cfg["output"][0]["dims"] == [-1]
    assert "response 0: OK" in lines
    np.testing.assert_array_equal(np.fromfile(out / "r0_y.bin", np.float32), x.reshape(-1))


def test_requests_are_batched_split_back_and_a_bad_one_fails_alone(harness, tmp_path, serving_engines):
    engine, onnx_path = serving_engines["mlp"]
    xs = [rand((2, 32), 10), rand((3, 32), 11), rand((1, 32), 12), rand((2, 32), 13), rand((4, 32), 14)]
    requests = [[("x", FP32, xs[0])], [("x", FP32, xs[1])],
                [("x", FP16, xs[2].astype(np.float16))],          # wrong dtype
                [("x", FP32, xs[3])], [("y", FP32, xs[4])],        # missing input x
                [("x", FP32, xs[4][:, :31].copy())]]               # wrong inner dim
    lines, out = _drive(harness, tmp_path, engine, BASE, requests)
    responses = [line for line in lines if line.startswith("response ")]
    assert responses[:2] == ["response 0: OK", "response 1: OK"]
    assert responses[2] == "response 2: ERROR input 'x' has the wrong data type: the model takes FP32"
    assert responses[3] == "response 3: OK"
    assert responses[4] == "response 4: ERROR request is missing input 'x'"
    assert responses[5] == "response 5: ERROR input 'x' dim 1 is 31, the model takes 32"
    assert [line for line in lines if line.startswith("batch: ")] == ["batch: 5", "batch: 2"]
    assert [line for line in lines if line.startswith("stat ")] == [
        "stat 0: success", "stat 1: success", "stat 2: failure", "stat 3: success", "stat 4: failure",
        "stat 5: failure"]
    for i in (0, 1, 3):
        ref = reference(onnx_path, {"x": xs[i]})
        (name, want), = ref.items()
        got = np.fromfile(out / f"r{i}_{name}.bin", np.float32).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_requests_with_different_inner_shapes_run_in_separate_batches(harness, tmp_path, serving_engines):
    engine, onnx_path = serving_engines["seq"]
    xs = [rand((2, 5), 20), rand((1, 5), 21), rand((3, 7), 22), rand((1, 17), 23), rand((2, 7), 24)]
    lines, out = _drive(harness, tmp_path, engine, BASE, [[("x", FP32, x)] for x in xs])
    assert [line for line in lines if line.startswith("batch: ")] == ["batch: 3", "batch: 3", "batch: 2"]
    assert "response 3: ERROR input 'x' dim 1 (seq) is 17, outside 1..16" in lines
    for i in (0, 1, 2, 4):
        for name, want in reference(onnx_path, {"x": xs[i]}).items():
            got = np.fromfile(out / f"r{i}_{name}.bin", np.float32).reshape(want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, message", [
    ({"max_batch_size": 64}, "max_batch_size 64, but the engine's batch dim 'batch' ranges 1..32"),
    ({"max_batch_size": 8, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["16"]}]},
     "input 'x' dims [16], the engine's are [32] after the batch dim"),
    ({"max_batch_size": 8, "input": [{"name": "x", "data_type": "TYPE_INT32", "dims": ["32"]}]},
     "input 'x' data_type TYPE_INT32, the engine's is TYPE_FP32"),
    ({"input": [{"name": "z", "data_type": "TYPE_FP32", "dims": ["4", "32"]}]},
     "input 'z' is not an input of the engine"),
])
def test_a_config_that_contradicts_the_engine_is_refused(harness, tmp_path, serving_engines, change, message):
    lines, _ = _drive(harness, tmp_path, serving_engines["mlp"][0], {**BASE, **change})
    errors = [line for line in lines if line.startswith("model: ERROR")]
    assert errors and "config.pbtxt contradicts" in errors[0] and message in errors[0], lines


def test_a_static_engine_refuses_a_batching_config(harness, tmp_path, serving_engines):
    lines, _ = _drive(harness, tmp_path, serving_engines["mlp_static"][0], {**BASE, "max_batch_size": 8})
    assert any("max_batch_size 8, but the engine has no dynamic batch dim" in line for line in lines), lines


def test_without_auto_complete_a_missing_output_is_refused(harness, tmp_path, serving_engines):
    cfg = {**BASE, "max_batch_size": 4, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["32"]}]}
    lines, _ = _drive(harness, tmp_path, serving_engines["mlp"][0], cfg, auto_complete=False)
    assert any("is missing (auto-complete is off)" in line for line in lines), lines
    assert _config(lines) is None


def test_a_full_matching_config_is_accepted_unchanged(harness, tmp_path, serving_engines):
    engine, _ = serving_engines["mlp"]
    lines, _ = _drive(harness, tmp_path, engine, BASE)
    full = _config(lines)
    (tmp_path / "again").mkdir()
    lines, _ = _drive(harness, tmp_path / "again", engine, full, [[("x", FP32, rand((1, 32), 5))]],
                      auto_complete=False)
    assert _config(lines) is None and "response 0: OK" in lines


def test_an_unreadable_config_or_engine_is_an_error_not_a_crash(harness, tmp_path, serving_engines):
    bad = tmp_path / "bad.engine"
    data = bytearray(open(serving_engines["mlp"][0], "rb").read())
    data[100:140] = b"\x00" * 40
    bad.write_bytes(bytes(data))
    lines, _ = _drive(harness, tmp_path, str(bad), BASE)
    assert any(line.startswith("model: ERROR") for line in lines), lines


def test_a_kind_gpu_instance_runs_batches_on_the_cuda_device(harness, tmp_path, serving_engines):
    """KIND_GPU -> a cuda context: through aotc's stand-in CUDA driver, or on the real GPU with
    AOTC_SERVE_REAL_GPU=1 (bench/serve_gpu_check.sh)."""
    import aotc
    from aotc.bench.models import small, zoo
    from aotc.testing import fakecuda
    real = os.environ.get("AOTC_SERVE_REAL_GPU") == "1"
    model, _ = zoo.with_dynamic_axes(small.mlp(batch=4), axes=("batch",))
    engine = tmp_path / "mlp_gpu.engine"
    aotc.compile(model, str(engine), arch=None if real else "sm_80", dynamic={"batch": (1, 32)})
    xs = [rand((2, 32), 40), rand((5, 32), 41)]
    env = {"FAKE_TRITON_KIND": "gpu", **({} if real else {"AOTC_LIBCUDA": fakecuda.library_path()})}
    lines, out = _drive(harness, tmp_path, str(engine), BASE, [[("x", FP32, x)] for x in xs], env=env)
    assert "log: aotc: instance 'fake_0' on cuda" in lines, lines
    assert [line for line in lines if line.startswith(("response", "batch"))] == [
        "response 0: OK", "response 1: OK", "batch: 7"], lines
    onnx_path = serving_engines["mlp"][1]
    for i, x in enumerate(xs):
        (name, want), = reference(onnx_path, {"x": x}).items()
        np.testing.assert_allclose(np.fromfile(out / f"r{i}_{name}.bin", np.float32).reshape(want.shape), want,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_batching_and_errors_are_clean_under_valgrind(tmp_path, serving_engines):
    exe = _build_harness(tmp_path, ["-O1"])
    xs = [rand((2, 32), 50), rand((3, 32), 51)]
    lines, _ = _drive(exe, tmp_path, serving_engines["mlp"][0], BASE,
                      [[("x", FP32, xs[0])], [("x", FP16, xs[0].astype(np.float16))], [("x", FP32, xs[1])]],
                      wrapper=["valgrind", "--quiet", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
                               "--error-exitcode=99"])
    assert [line for line in lines if line.startswith(("response", "batch"))] == [
        "response 0: OK", "batch: 2", "response 1: ERROR input 'x' has the wrong data type: the model takes FP32",
        "response 2: OK", "batch: 3"]
