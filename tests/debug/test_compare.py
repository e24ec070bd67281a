"""compare: the debug build is the production engine plus stores; a wrong kernel and an fp16 overflow are located."""
import numpy as np
import pytest

import aotc.compiler
from aotc.debug import compare as C
from aotc.debug.onnx_model import import_with_tensor_names
from aotc.errors import AotcError
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.debug._models import break_kernel_of, mlp, overflow
from tests.helpers.rng import fresh_rng

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_debug_build_is_the_production_kernels_plus_stores(precision):
    rng, seed = fresh_rng()
    graph, _ = import_with_tensor_names(mlp())
    prod = aotc.compiler.compile(graph, arch="none", precision=precision)
    dbg = aotc.compiler.compile(graph, arch="none", precision=precision, debug_outputs=True)
    sources = {k.source for k in dbg.kernels}
    assert all(k.source in sources for k in prod.kernels)
    n = len(prod.plan.launches)
    assert [launch.kernel for launch in dbg.plan.launches[:n]] == [launch.kernel for launch in prod.plan.launches]
    assert all(not r.nodes for r in dbg.regions[n:])                   # what comes after: copies only
    entries = dbg.plan.manifest["debug_outputs"]
    names = [o.name for o in dbg.plan.outputs]
    assert entries and names[:1] == ["y"] and [e["output"] for e in entries] == names[1:]
    for e in entries:
        assert dbg.regions[e["kernel"]].root.name == e["value"] or \
            e["value"] in [v.name for v in dbg.regions[e["kernel"]].extra_roots]
        # the IR names of its compute nodes: ONNX node names, and the passes' conversions (x.f16)
        assert set(e["nodes"]) & {"fc1", "bias1", "relu1", "fc2", "bias2", "tanh2", "scale3", "probs"}
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    want = Engine(engine_bytes(prod.plan)).create_context().run(x)
    got = Engine(engine_bytes(dbg.plan)).create_context().run(x)
    assert np.array_equal(want["y"], got["y"]), f"production answer changed (seed {seed})"
    assert "debug_outputs" not in prod.plan.manifest


@pytest.fixture(scope="module")
def mlp_session():
    return C.Session(mlp(), seed=5)


def test_correct_engine_is_within_tolerance(mlp_session):
    report = C.run_compare(mlp_session, "fp32")
    d = report.main
    assert d.device == "cpu" and d.first_bad is None and d.passes
    assert [k.index for k in d.kernels] == list(range(len(d.kernels)))
    held = [n for k in d.kernels for n in k.onnx_nodes]
    assert sorted(held) == sorted(["fc1", "bias1", "relu1", "fc2", "bias2", "tanh2", "scale3", "probs"])
    assert all(k.error is not None and k.error.max_rel_err < 1e-5 for k in d.kernels)
    assert all(t.reference == "onnxruntime" for t in d.tensors)
    assert d.kernels[-1].outputs == ["y"]


@pytest.mark.parametrize("node", ["bias1", "bias2"])
def test_a_wrong_kernel_is_located_exactly(mlp_session, monkeypatch, node):
    break_kernel_of(monkeypatch, node)
    d = C.run_compare(mlp_session, "fp32").main
    holder = next(k for k in d.kernels if node in k.onnx_nodes)
    assert d.first_bad is holder
    assert all(not k.error.fails(d.rtol) for k in d.kernels[:holder.index])
    assert holder.error.max_rel_err > 1e-3 and not d.passes


def test_fp16_overflow_is_located():
    session = C.Session(overflow(), seed=2)
    assert C.run_compare(session, "fp32").main.passes
    d = C.run_compare(session, "fp16").main
    bad = d.first_bad
    assert bad is not None and "square" in bad.onnx_nodes and bad.error.inf > 0
    assert d.output_error.nonfinite > 0 and not d.passes


def test_fused_values_without_an_onnx_tensor_use_the_interpreter(mlp_session):
    result = mlp_session.compile("fp16")
    named = [v for n in result.graph_optimized.nodes for v in n.outputs]
    inner = next(v for v in named if C.om.twin_of(v.name).base not in mlp_session.tensor_of and v.name in
                 mlp_session.interpreted())
    label, kind, ref = C._resolve(mlp_session, inner, "fp16")
    assert kind == "interpreter" and label == inner.name and ref.shape == inner.shape and ref.dtype == np.float32


def test_inputs_from_npz_and_precision_errors(tmp_path):
    rng, _ = fresh_rng()
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    s = C.Session(mlp(), inputs=tmp_path / "in.npz")
    assert np.array_equal(s.feeds["x"], x)
    with pytest.raises(AotcError, match="int8 engines do not exist"):
        C.run_compare(s, "int8")
    with pytest.raises(AotcError, match="unknown precision"):
        C.run_compare(s, "fp8")


def test_cuda_is_asked_for_only_with_a_gpu(mlp_session):
    if C.cuda_arch() is None:
        with pytest.raises(AotcError, match="no CUDA driver or GPU"):
            C.run_compare(mlp_session, "fp32", devices=["cuda"])
    else:       # untested here: needs a GPU
        assert [d.device for d in C.run_compare(mlp_session, "fp32").devices] == ["cpu", "cuda"]


def test_json_shape(mlp_session):
    d = C.run_compare(mlp_session, "fp32").as_dict()
    assert {"kernels", "first_bad"} <= set(d) and d["first_bad"] is None
    assert all(set(k) == {"index", "name", "onnx_nodes", "outputs", "max_abs_err", "max_rel_err", "nonfinite"}
               for k in d["kernels"])
    assert set(d["kernels"][0]["nonfinite"]) == {"nan", "inf"}


def test_symbolic_dims_take_the_shapes_of_the_given_inputs():
    rng, _ = fresh_rng()
    model = mlp()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    x = rng.standard_normal((3, 16)).astype(np.float32)
    s = C.Session(model, inputs={"x": x})
    assert s.graph.inputs[0].shape == (3, 16)
    assert C.run_compare(s, "fp32").main.passes
    with pytest.raises(AotcError, match="without a range"):
        C.Session(model)


@pytest.mark.slow
@pytest.mark.parametrize("builder", ["bert_encoder", "resnet_bottleneck"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_real_architectures_keep_their_production_answer(builder, precision):
    """Attention, norm rows, NHWC convs, merged GEMMs: same kernels, same order, bitwise the same outputs,
    and every kernel within the default tolerance of its reference."""
    from aotc.bench.models import small as models
    model, feeds = getattr(models, builder)()
    graph, _ = import_with_tensor_names(model)
    prod = aotc.compiler.compile(graph, arch="none", precision=precision)
    dbg = aotc.compiler.compile(graph, arch="none", precision=precision, debug_outputs=True)
    n = len(prod.plan.launches)
    assert [launch.kernel for launch in dbg.plan.launches[:n]] == [launch.kernel for launch in prod.plan.launches]
    want = Engine(engine_bytes(prod.plan)).create_context().run(feeds)
    got = Engine(engine_bytes(dbg.plan)).create_context().run(feeds)
    assert all(np.array_equal(want[k], got[k]) for k in want)
    d = C.run_compare(C.Session(model, inputs=feeds), precision).main
    assert d.first_bad is None and d.passes
    assert sum(t.reference == "onnxruntime" for t in d.tensors) > len(d.tensors) / 2
