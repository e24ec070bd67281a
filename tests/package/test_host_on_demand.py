"""An engine compiled without its host library runs on the cpu device all the same: aotc's Python
binding builds the library from the kernel source the engine carries, once, and the C runtime alone
still says what is missing."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aotc
from aotc.errors import AotcError, RuntimeFailure
from aotc.kernels.host_compile import have_host_compiler
from aotc.package import host_on_demand as H
from aotc.package import runtime_binding as rb
from aotc.package.engine_format import read_engine, read_manifest

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")


def _model() -> onnx.ModelProto:
    """y = relu(x * w + b) over (3, 50): an elementwise kernel with weights."""
    rng = np.random.default_rng(19)
    w = helper.make_tensor("w", TensorProto.FLOAT, [50], rng.standard_normal(50).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [50], rng.standard_normal(50).astype(np.float32))
    nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    graph = helper.make_graph(nodes, "on_demand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 50])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 50])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """(engine file without a host library, the same engine with one embedded, the model)."""
    d = tmp_path_factory.mktemp("on_demand")
    model = _model()
    lazy, embedded = d / "lazy.engine", d / "embedded.engine"
    r = aotc.compile(model, lazy, arch="none", host=False)
    assert r.summary()["host_library"] == "on first cpu run" and not r.plan.host_lib
    r = aotc.compile(model, embedded, arch="none", host=True)
    assert r.summary()["host_library"] == "embedded" and r.plan.host_lib
    return lazy, embedded, model


def _reference(model, x):
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return np.maximum(x * init["w"] + init["b"], 0)


def test_engine_without_host_library_runs_on_cpu(engines):
    lazy, embedded, model = engines
    assert read_manifest(lazy.read_bytes())["host_lib"] is False
    x = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
    for source in (lazy, lazy.read_bytes()):        # from a path and from bytes
        got = rb.Engine(source).create_context("cpu").run({"x": x})["y"]
        np.testing.assert_allclose(got, _reference(model, x), rtol=1e-6, atol=1e-6)
    want = rb.Engine(embedded).create_context("cpu").run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def test_the_built_library_is_the_one_compile_embeds(engines):
    """Same source, names and flags: the on-demand build is the compile-time build (one cache entry)."""
    lazy, embedded, _ = engines
    assert H.host_library(read_engine(lazy.read_bytes()).manifest) == read_engine(embedded.read_bytes()).host_lib
    image = H.with_host_build(lazy.read_bytes())
    assert read_engine(image).host_lib == read_engine(embedded.read_bytes()).host_lib
    assert H.with_host_build(embedded.read_bytes()) == embedded.read_bytes()


def test_one_build_per_engine_object(engines, monkeypatch):
    lazy, _, _ = engines
    engine = rb.Engine(lazy)
    calls = []
    real = H.with_host_build
    monkeypatch.setattr(H, "with_host_build", lambda data: calls.append(1) or real(data))
    x = np.random.default_rng(1).standard_normal((3, 50)).astype(np.float32)
    outs = [engine.create_context("cpu").run({"x": x})["y"] for _ in range(3)]
    assert len(calls) == 1 and all(np.array_equal(o, outs[0]) for o in outs)


def test_the_c_runtime_alone_still_needs_the_library(engines):
    lazy, _, _ = engines
    ok, why = rb.check_engine(lazy, "cpu")
    assert not ok and "no host build" in why and "--host" in why


def test_an_engine_without_kernel_source_says_so(engines):
    lazy, _, _ = engines
    plan = read_engine(lazy.read_bytes())
    plan.manifest = {k: v for k, v in plan.manifest.items() if k != "kernel_source"}
    assert not H.has_kernel_source(plan.manifest)
    with pytest.raises(AotcError, match="carries no kernel source"):
        H.host_library(plan.manifest)
    from aotc.package.engine_format import engine_bytes
    with pytest.raises(RuntimeFailure, match="no host build"):
        rb.Engine(engine_bytes(plan)).create_context("cpu")
    plan.manifest["kernel_source"] = "not base64 zlib!"
    with pytest.raises(AotcError, match="kernel source is corrupt"):
        H.host_library(plan.manifest)


def test_inspect_says_the_host_library_comes_on_first_cpu_run(engines):
    from aotc.package.inspect import describe_engine, format_description
    lazy, embedded, _ = engines
    info = describe_engine(lazy.read_bytes())
    assert info["host_library"] == "on first cpu run" and info["runnable"]["cpu"]["ok"]
    assert "--host" in info["runnable"]["cpu"]["why"]
    assert "host (built on first cpu run)" in format_description(info, "lazy.engine")
    assert describe_engine(embedded.read_bytes())["host_library"] == "embedded"


def test_a_copy_for_the_c_runtime_alone_gets_the_library(engines, tmp_path):
    lazy, embedded, _ = engines
    H.copy_with_host_build(lazy, tmp_path / "a.engine")
    assert rb.check_engine(tmp_path / "a.engine", "cpu")[0]
    assert read_engine((tmp_path / "a.engine").read_bytes()).host_lib == read_engine(embedded.read_bytes()).host_lib
    H.copy_with_host_build(embedded, tmp_path / "b.engine")
    assert (tmp_path / "b.engine").read_bytes() == embedded.read_bytes()


def test_an_engine_file_gone_before_its_first_cpu_run_is_one_error(engines, tmp_path):
    lazy, _, _ = engines
    moved = tmp_path / "moved.engine"
    moved.write_bytes(lazy.read_bytes())
    engine = rb.Engine(moved)
    moved.unlink()
    with pytest.raises(RuntimeFailure, match="cannot read engine file .* to build its host library"):
        engine.create_context("cpu")
