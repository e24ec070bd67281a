"""RNN, GRU and LSTM (aotc/importers/onnx/rnn_ops.py) vs onnxruntime: importer + interpreter, and one engine.

Random weights and inputs per run (the seed is in every failure message).
onnxruntime refuses layout=1, so those cases compare with its layout-0 run
on transposed data. The node suite covers the ONNX-generated cases end to end.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import aotc.compiler
from aotc.errors import UnsupportedError
from aotc.fusion.region import GatedPayload
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.helpers.rng import fresh_rng, random_array

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def make_case(rng, op, steps=4, batch=3, inp=5, hidden=6, attrs=None, layout=0, lens=None,
              optional=("B", "h0", "c0"), outs=("Y", "Y_h", "Y_c"), opset=22):
    """(model, feeds) for one recurrent node; `optional` names the optional inputs to feed."""
    attrs = dict(attrs or {})
    ndir = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[op]
    state = (ndir, batch, hidden) if layout == 0 else (batch, ndir, hidden)
    arrays = {"X": random_array(rng, (steps, batch, inp) if layout == 0 else (batch, steps, inp)),
              "W": random_array(rng, (ndir, g * hidden, inp)) * 0.5,
              "R": random_array(rng, (ndir, g * hidden, hidden)) * 0.5,
              "B": random_array(rng, (ndir, 2 * g * hidden)),
              "L": None if lens is None else np.array(lens, np.int32),
              "h0": random_array(rng, state), "c0": random_array(rng, state),
              "P": random_array(rng, (ndir, 3 * hidden))}
    slots = ["X", "W", "R", "B", "L", "h0"] + (["c0", "P"] if op == "LSTM" else [])
    names = [n if n in ("X", "W", "R") or (n == "L" and lens is not None) or n in optional else "" for n in slots]
    while not names[-1]:
        names.pop()
    feeds = {n: arrays[n] for n in names if n}
    outs = [o for o in outs if op == "LSTM" or o != "Y_c"]
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(op, names, outs, hidden_size=hidden, **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in feeds.items()]
    graph = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model), feeds


def onnxruntime_outputs(model, feeds):
    """onnxruntime's outputs; a layout=1 model runs as its layout-0 twin on transposed data."""
    node = model.graph.node[0]
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if layout:
        twin = onnx.ModelProto()
        twin.CopyFrom(model)
        n = twin.graph.node[0]
        keep = [a for a in n.attribute if a.name != "layout"]
        del n.attribute[:]
        n.attribute.extend(keep)
        feeds = {k: v.transpose(1, 0, 2) if k in ("X", "h0", "c0") else v for k, v in feeds.items()}
        for vi in twin.graph.input:
            vi.CopyFrom(helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, feeds[vi.name].shape))
        for vi in twin.graph.output:
            vi.CopyFrom(onnx.ValueInfoProto(name=vi.name))
        model = twin
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    if layout:
        outs = [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2) for o in outs]
    return outs


def check(model, feeds, seed, rtol=1e-4, atol=1e-5):
    graph = import_onnx(model)
    verify(graph)
    got = interpret(graph, feeds)
    want = onnxruntime_outputs(model, feeds)
    for name, g, w in zip(graph.output_names, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, seed)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{name} (seed {seed})")
    return graph


ALL_OPS = ["RNN", "GRU", "LSTM"]


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_match_onnxruntime(op, direction):
    rng, seed = fresh_rng()
    check(*make_case(rng, op, attrs={"direction": direction}), seed)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens_mask_outputs_and_keep_last_valid_state(op, direction):
    rng, seed = fresh_rng()
    model, feeds = make_case(rng, op, steps=5, batch=4, lens=[5, 2, 0, 3], attrs={"direction": direction})
    check(model, feeds, seed)
    y = interpret(import_onnx(model), feeds)[0]
    assert not y[2:, :, 1].any() and not y[:, :, 2].any() and y[:2, :, 1].all()


@pytest.mark.parametrize("op", ALL_OPS)
def test_batch_first_layout(op):
    rng, seed = fresh_rng()
    check(*make_case(rng, op, layout=1, lens=[4, 1, 3], attrs={"direction": "bidirectional"}), seed)


@pytest.mark.parametrize("op", ALL_OPS)
def test_without_optional_inputs_and_with_clip(op):
    rng, seed = fresh_rng()
    check(*make_case(rng, op, optional=()), seed)
    check(*make_case(rng, op, attrs={"clip": 0.6}, optional=("B",)), seed)


@pytest.mark.parametrize("op,opset", [("RNN", 7), ("GRU", 7), ("LSTM", 7), ("LSTM", 14)])
def test_older_opsets(op, opset):
    rng, seed = fresh_rng()
    check(*make_case(rng, op, opset=opset, attrs={"direction": "bidirectional"}), seed)


def test_gru_linear_before_reset():
    rng, seed = fresh_rng()
    check(*make_case(rng, "GRU", lens=[4, 3, 1], attrs={"linear_before_reset": 1, "direction": "bidirectional"}), seed)


def test_lstm_peepholes_and_input_forget():
    rng, seed = fresh_rng()
    both = ("B", "h0", "c0", "P")
    check(*make_case(rng, "LSTM", optional=both, lens=[2, 4, 3], attrs={"direction": "bidirectional"}), seed)
    check(*make_case(rng, "LSTM", optional=both, attrs={"input_forget": 1, "clip": 1.5}), seed)


@pytest.mark.parametrize("op,attrs", [
    ("RNN", {"activations": ["Relu"]}),
    ("RNN", {"activations": ["Affine", "LeakyRelu"], "activation_alpha": [0.5, 0.2], "activation_beta": [0.1],
             "direction": "bidirectional"}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign", "Sigmoid", "ScaledTanh"], "activation_alpha": [0.3, 1.3],
             "activation_beta": [0.4, 0.6], "direction": "bidirectional"}),
    ("LSTM", {"activations": ["HardSigmoid", "Elu", "Softplus"], "activation_alpha": [0.25, 0.8]}),
    ("LSTM", {"activations": ["Sigmoid", "ThresholdedRelu", "Tanh"], "activation_alpha": [0.1]}),
], ids=["rnn-relu", "rnn-affine-leaky", "gru-hardsig-softsign-scaledtanh", "lstm-elu-softplus", "lstm-thresholded"])
def test_non_default_activations(op, attrs):
    rng, seed = fresh_rng()
    check(*make_case(rng, op, attrs=attrs), seed, rtol=2e-4)


@pytest.mark.parametrize("op", ALL_OPS)
def test_input_projection_is_one_matmul(op):
    """One dot_general projects every step's input; each step adds only its recurrent one(s)."""
    rng, _ = fresh_rng()
    steps = 5
    graph = import_onnx(make_case(rng, op, steps=steps)[0])
    dots = sum(n.op == "dot_general" for n in graph.nodes)
    per_step = 2 if op == "GRU" else 1     # GRU multiplies r * H before its h-gate recurrence
    assert dots == 1 + per_step * steps


def test_full_constant_lengths_add_no_masking():
    rng, _ = fresh_rng()
    model, _ = make_case(rng, "LSTM", steps=3, lens=[3, 3, 3])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([3, 3, 3], np.int32), "L"))
    kept = [i for i in model.graph.input if i.name != "L"]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    assert not any(n.op == "select" for n in import_onnx(model).nodes)


@pytest.mark.parametrize("direction,attrs,what", [
    ("forward", {"activations": ["Gelu"]}, "activation 'gelu'"),
    ("forward", {"activations": ["Tanh", "Tanh"]}, "2 activations given"),
    ("bidirectional", {"activations": ["Relu"]}, r"RNN with 2 direction\(s\) takes 2"),
    ("forward", {"direction": "sideways"}, "direction 'sideways'"),
])
def test_unsupported_attributes_are_reported_before_conversion(direction, attrs, what):
    rng, _ = fresh_rng()
    model, _ = make_case(rng, "RNN", attrs={"direction": direction})
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in attrs.items()])
    with pytest.raises(UnsupportedError, match=what):
        import_onnx(model)


def test_lstm_engine_on_cpu_device_matches_onnxruntime():
    rng, seed = fresh_rng()
    model, feeds = make_case(rng, "LSTM", steps=6, batch=3, inp=7, hidden=5, lens=[6, 2, 4],
                             optional=("B", "h0", "c0", "P"), attrs={"direction": "bidirectional"})
    want = onnxruntime_outputs(model, feeds)
    result = aotc.compiler.compile_model(model, arch="none", host=True)
    engine = Engine(engine_bytes(result.plan))
    outs = engine.create_context("cpu").run(feeds)
    for name, w in zip(["Y", "Y_h", "Y_c"], want):
        np.testing.assert_allclose(outs[name], w, rtol=1e-4, atol=1e-5, err_msg=f"{name} (seed {seed})")


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_engine_on_cpu_device_matches_onnxruntime(lbr):
    """Both GRU forms through fusion and the kernels: linear_before_reset=1 (PyTorch's export) is one
    GEMM with three gate blocks a step, 0 two GEMMs."""
    rng, seed = fresh_rng()
    model, feeds = make_case(rng, "GRU", steps=6, batch=3, inp=7, hidden=5, lens=[6, 2, 4], optional=("B", "h0"),
                             attrs={"direction": "bidirectional", "linear_before_reset": lbr})
    want = onnxruntime_outputs(model, feeds)
    result = aotc.compiler.compile_model(model, arch="none", host=True)
    engine = Engine(engine_bytes(result.plan))
    outs = engine.create_context("cpu").run(feeds)
    for name, w in zip(["Y", "Y_h"], want):
        np.testing.assert_allclose(outs[name], w, rtol=1e-4, atol=1e-5, err_msg=f"{name} (seed {seed})")
    assert any(r.payload_as(GatedPayload) for r in result.regions)
