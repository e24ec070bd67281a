"""EfficientNet, UNet, YOLO head, LLaMA, Whisper encoder, T5 layer and a BiLSTM tagger end to end.

Each model (aotc/bench/models/zoo.py) is compiled with the default options, as
the CLI does (sm_80 + sm_90 cubins, PTX, host build), run through the C
runtime on the `cpu` device with fresh random inputs, and every output is
compared with onnxruntime.
"""
import numpy as np
import pytest

import aotc.compiler
from aotc.package.runtime_binding import Engine
from aotc.bench.models.zoo import ZOO_MODELS
from tests.helpers.rng import fresh_rng

ort = pytest.importorskip("onnxruntime")

# variants of an architecture the quick run already covers, and the heaviest builds
SLOW = {"efficientnet_swish_op", "unet", "llama_where_mask", "llama_opset23", "llama_dynamic_axes",
        "whisper_encoder_gelu_op", "t5_layer_constant_nodes"}


def rel_error(got, want):
    """max |got - want| / max |want|: relative to the output's scale."""
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in ZOO_MODELS])
def test_zoo_model_matches_onnxruntime(name, tmp_path):
    model, make_feeds = ZOO_MODELS[name]()
    rng, seed = fresh_rng()
    feeds = make_feeds(rng)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    path = tmp_path / f"{name}.engine"
    symbolic = {i.name for i in model.graph.input if any(d.dim_param for d in i.type.tensor_type.shape.dim)}
    # dynamic axes are fixed by the user (the CLI's --input-shape), to the shapes the inputs have
    aotc.compiler.compile(model, path, input_shapes={n: feeds[n].shape for n in symbolic} or None)
    engine = Engine(str(path))
    outs = engine.create_context(device="cpu").run(feeds)
    assert [o.name for o in engine.outputs] == [o.name for o in model.graph.output]
    for spec, w in zip(engine.outputs, want):
        got = outs[spec.name]
        assert got.shape == w.shape and np.isfinite(got).all(), (name, spec.name, got.shape, w.shape, seed)
        err = rel_error(got, w)
        assert err <= 1e-4, f"{name}/{spec.name}: rel error {err:.2e} (AOTC_TEST_SEED={seed})"


# one flash-attention kernel per layer, whatever the mask (Trilu, Range + Where, padding + relative bias)
ATTENTION_LAYERS = {"llama": 2, "llama_where_mask": 2, "llama_local_functions": 2, "whisper_encoder": 1,
                    "t5_layer": 1}


@pytest.mark.parametrize("name", sorted(ATTENTION_LAYERS))
def test_attention_fuses_into_one_kernel_per_layer(name):
    model, _ = ZOO_MODELS[name]()
    result = aotc.compiler.compile_model(model, arch="none", host=False)
    kinds = [r.kind for r in result.regions]
    assert kinds.count("attention") == ATTENTION_LAYERS[name], kinds
    s = result.summary()
    assert s["nodes_optimized"] < s["nodes_imported"], s      # the shape arithmetic folds away


@pytest.mark.parametrize("causal", [0, 1])
def test_onnx_attention_op_is_one_flash_kernel(causal, tmp_path):
    """The opset-23 Attention op, imported through its function body (sqrt(scale) on Q and K, a
    constant-false NaN guard around the softmax), becomes one attention kernel and matches onnxruntime."""
    import onnx
    from onnx import TensorProto, helper
    shape = [2, 4, 19, 8]
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=causal)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape) for x in "qkv"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    onnx.checker.check_model(model)
    rng, seed = fresh_rng()
    feeds = {x: rng.standard_normal(shape).astype(np.float32) for x in "qkv"}
    result = aotc.compiler.compile(model, tmp_path / "a.engine", arch="none")
    assert [r.kind for r in result.regions] == ["attention"]
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = Engine(str(tmp_path / "a.engine")).create_context(device="cpu").run(feeds)["y"]
    assert rel_error(got, want) <= 1e-5, f"AOTC_TEST_SEED={seed}"
