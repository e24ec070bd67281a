"""DFT, STFT and MelWeightMatrix (aotc/importers/onnx/signal_ops.py) vs onnxruntime, and one engine.

Importer + interpreter in float32 on fresh random signals (the seed is in
every failure message); the node suite covers the ONNX-generated cases end
to end. IRFFT with an explicit dft_length whose one-sided size differs from
the input's bin count is compared with the ONNX reference evaluator instead:
onnxruntime does not truncate/pad the bins the way the reference
(numpy.fft.irfft) does there, and aotc follows the reference.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import aotc.compiler
from aotc.errors import ModelError, UnsupportedError
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.helpers.rng import fresh_rng, random_array


def make_model(nodes, inputs: dict, consts: dict, outputs=("y",), opset=17, out_rank=None):
    """A model from nodes; `inputs` become graph inputs, `consts` initializers.

    Outputs are typed by shape inference, or declared f32 of `out_rank` unknown dims.
    """
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()]
    outs = [onnx.ValueInfoProto(name=o) if out_rank is None else
            helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, [None] * out_rank) for o in outputs]
    g = helper.make_graph(nodes, "g", vis, outs, initializer=inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def node(op, names, **attrs):
    """One node; None in `names` is an omitted optional input (trailing ones dropped)."""
    names = list(names)
    while names and names[-1] is None:
        names.pop()
    return helper.make_node(op, [n or "" for n in names], ["y"], name=op.lower(), **attrs)


def check(model, feeds, seed, oracle="onnxruntime"):
    graph = import_onnx(model)
    verify(graph)
    got = interpret(graph, feeds)[0]
    if oracle == "onnxruntime":
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)[0]
    else:
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, got.shape, want.dtype, want.shape)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"seed {seed}")


def dft_case(rng, shape, opset, axis, n=None, inverse=0, onesided=0):
    x = random_array(rng, shape)
    consts = {} if n is None else {"n": np.array(n, np.int64)}
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        if axis is not None:
            consts["axis"] = np.array(axis, np.int64)
        names = ["x", "n" if n is not None else None, "axis" if axis is not None else None]
    else:
        if axis is not None:
            attrs["axis"] = axis
        names = ["x", "n" if n is not None else None]
    return make_model([node("DFT", names, **attrs)], {"x": x}, consts, opset=opset), {"x": x}


DFT_CASES = [   # (input shape, axis, dft_length, inverse, onesided)
    ((2, 6, 5, 1), 1, None, 0, 0),
    ((2, 6, 5, 2), 1, None, 0, 0),
    ((3, 7, 2), 0, None, 0, 0),          # the batch axis is a valid axis too
    ((2, 3, 8, 1), -2, None, 0, 0),
    ((4, 5, 3, 6, 2), 2, None, 0, 0),    # an inner axis: k moves back into place
    ((2, 9, 1), 1, 4, 0, 0),             # dft_length shorter: truncate
    ((2, 6, 3, 2), 1, 11, 0, 0),         # dft_length longer: zero-pad
    ((2, 6, 5, 1), 1, None, 0, 1),       # rfft
    ((2, 7, 1), 1, 10, 0, 1),
    ((2, 5, 3, 2), -3, None, 1, 0),      # inverse
    ((2, 8, 1), 1, 5, 1, 0),             # inverse of real input, truncated
    ((2, 6, 3, 2), 1, None, 1, 1),       # irfft: 2 * (6 - 1) samples
    ((3, 5, 2), 1, 8, 1, 1),             # irfft, dft_length matching the bins
    ((3, 5, 2), 1, 9, 1, 1),             # odd length: no Nyquist bin
]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("shape,axis,n,inverse,onesided", DFT_CASES)
def test_dft_matches_onnxruntime(shape, axis, n, inverse, onesided, opset):
    rng, seed = fresh_rng()
    model, feeds = dft_case(rng, shape, opset, axis, n, inverse, onesided)
    check(model, feeds, seed)


@pytest.mark.parametrize("shape,n", [((2, 7, 2), 6), ((2, 3, 2), 10), ((2, 4, 3, 2), 5)])
def test_irfft_with_other_length_follows_the_onnx_reference(shape, n):
    rng, seed = fresh_rng()
    model, feeds = dft_case(rng, shape, 20, 1, n, inverse=1, onesided=1)
    check(model, feeds, seed, oracle="reference")


def test_dft_default_axis_differs_by_opset():
    """Opset 17's default axis is 1; opset 20's is -2 (the last signal axis)."""
    rng, seed = fresh_rng()
    for opset, spectrum in ((17, (2, 2, 4, 2)), (20, (2, 3, 3, 2))):
        model, feeds = dft_case(rng, (2, 3, 4, 1), opset, None, onesided=1)
        assert import_onnx(model).outputs[0].shape == spectrum
        check(model, feeds, seed)


STFT_CASES = [   # (signal length, channels, frame_step, frame_length, window, onesided)
    (64, 1, 8, 16, False, 1),
    (50, 1, 7, 12, True, 1),
    (50, 1, 7, 12, True, 0),
    (33, 1, 5, None, True, 1),        # frame_length from the window
    (20, 1, 3, 20, False, 0),         # one frame
    (41, 2, 6, 10, True, 0),          # complex signal
]


@pytest.mark.parametrize("length,c,step,frame_len,window,onesided", STFT_CASES)
def test_stft_matches_onnxruntime(length, c, step, frame_len, window, onesided):
    rng, seed = fresh_rng()
    x = random_array(rng, (2, length, c))
    consts = {"step": np.array(step, np.int64)}
    if frame_len is not None:
        consts["len"] = np.array(frame_len, np.int64)
    feeds = {"x": x}
    if window:
        feeds["w"] = random_array(rng, (frame_len or 9,), low=0.1, high=1.0)   # a data input
    names = ["x", "step", "w" if window else None, "len" if frame_len is not None else None]
    model = make_model([node("STFT", names, onesided=onesided)], feeds, consts)
    check(model, feeds, seed)


def mel_model(n_mel, n_dft, rate, lo, hi, **attrs):
    consts = {"m": np.array(n_mel, np.int64), "n": np.array(n_dft, np.int64), "r": np.array(rate, np.int64),
              "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    return make_model([node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], **attrs)], {}, consts)


def test_mel_weight_matrix_matches_onnxruntime():
    rng, seed = fresh_rng()
    for _ in range(12):
        rate = int(rng.integers(4000, 48000))
        params = (int(rng.integers(1, 40)), int(rng.integers(16, 1024)), rate,
                  rng.uniform(0, rate / 8), rng.uniform(rate / 4, rate / 2))
        model = mel_model(*params)
        got = interpret(import_onnx(model), {})[0]
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=f"{params} (seed {seed})")
        assert got.max() == 1.0     # every triangle peaks at 1


def test_mel_weight_matrix_edges_on_a_bin_boundary_land_where_onnxruntime_puts_them():
    """The last center here is 308.9999... in the ONNX reference's log1p/expm1 form and 309 in
    onnxruntime's log10/pow form (which aotc follows): one bin apart, the triangles differ by 0.023."""
    model = mel_model(12, 966, 33853, 1466.0993391282911, 14516.240425752116)
    got = interpret(import_onnx(model), {})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_mel_weight_matrix_output_datatype():
    model = mel_model(8, 64, 16000, 0.0, 8000.0, output_datatype=onnx.TensorProto.FLOAT16)
    got = interpret(import_onnx(model), {})[0]
    want = ReferenceEvaluator(model).run(None, {})[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_mel_weight_matrix_with_edges_beyond_the_spectrum_is_a_model_error():
    with pytest.raises(ModelError, match="outside the 9 bins"):
        import_onnx(mel_model(4, 16, 8000, 0.0, 7000.0))


@pytest.mark.parametrize("what", ["dft_length", "axis"])
def test_dft_shape_inputs_must_be_constants(what):
    rng, _ = fresh_rng()
    x = random_array(rng, (2, 6, 1))
    inputs = {"x": x, what: np.array(4 if what == "dft_length" else 1, np.int64)}
    names = ["x", "dft_length" if what == "dft_length" else None, "axis" if what == "axis" else None]
    with pytest.raises(UnsupportedError, match=f"{what} must be computable at import time") as e:
        import_onnx(make_model([node("DFT", names)], inputs, {}, opset=20))
    assert e.value.static_input == what


def test_stft_and_mel_shape_inputs_must_be_constants():
    rng, _ = fresh_rng()
    x = random_array(rng, (1, 32, 1))
    model = make_model([node("STFT", ["x", "step", None, "len"])], {"x": x, "step": np.array(4, np.int64)},
                       {"len": np.array(8, np.int64)}, out_rank=4)
    with pytest.raises(UnsupportedError, match="frame_step must be computable"):
        import_onnx(model)
    mel = make_model([node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"])], {"m": np.array(4, np.int64)},
                     {"n": np.array(16, np.int64), "r": np.array(8000, np.int64),
                      "lo": np.array(0, np.float32), "hi": np.array(4000, np.float32)}, out_rank=2)
    with pytest.raises(UnsupportedError, match="num_mel_bins must be computable"):
        import_onnx(mel)


@pytest.mark.parametrize("c,inverse,kind", [(2, 0, "real"), (1, 1, "complex")])
def test_onesided_with_the_wrong_input_kind_is_a_model_error(c, inverse, kind):
    """The spec allows RFFT of real input and IRFFT of complex input only (onnxruntime refuses both)."""
    rng, _ = fresh_rng()
    x = random_array(rng, (2, 6, c))
    model = make_model([node("DFT", ["x"], inverse=inverse, onesided=1)], {"x": x}, {}, out_rank=3)
    with pytest.raises(ModelError, match=f"needs {kind} input"):
        import_onnx(model)


def test_bad_flag_and_huge_dft_are_unsupported():
    rng, _ = fresh_rng()
    x = random_array(rng, (1, 4, 1))
    with pytest.raises(UnsupportedError, match=r"inverse=2 \(supported: 0 or 1\)"):
        import_onnx(make_model([node("DFT", ["x"], inverse=2)], {"x": x}, {}))
    long = random_array(rng, (1, 3000, 1))    # a 3000 x 3000 complex matrix: over the cap
    huge = make_model([node("DFT", ["x"])], {"x": long}, {})
    with pytest.raises(UnsupportedError, match="dense matrix product"):
        import_onnx(huge)


def test_log_mel_spectrogram_engine_on_cpu_device_matches_onnxruntime():
    """STFT -> power -> MelWeightMatrix -> log, compiled and run on the `cpu` device."""
    rng, seed = fresh_rng()
    n_fft, step = 32, 8
    feeds = {"x": random_array(rng, (2, 200, 1)), "w": random_array(rng, (n_fft,), low=0.2, high=1.0)}
    consts = {"step": np.array(step, np.int64), "m": np.array(6, np.int64), "n": np.array(n_fft, np.int64),
              "r": np.array(16000, np.int64), "lo": np.array(100.0, np.float32),
              "hi": np.array(7000.0, np.float32), "ax": np.array([-1], np.int64), "eps": np.array(1e-3, np.float32)}
    # onesided explicit: onnx 1.23's shape inference takes a missing one as 0 (the spec's default is 1)
    nodes = [helper.make_node("STFT", ["x", "step", "w"], ["spec"], onesided=1),
             helper.make_node("ReduceSumSquare", ["spec", "ax"], ["power"], keepdims=0),
             helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["mel"]),
             helper.make_node("MatMul", ["power", "mel"], ["mp"]),
             helper.make_node("Add", ["mp", "eps"], ["mpe"]),
             helper.make_node("Log", ["mpe"], ["y"]),
             helper.make_node("DFT", ["spec", "", "ax2"], ["z"], inverse=1)]
    consts["ax2"] = np.array(2, np.int64)
    model = make_model(nodes, feeds, consts, outputs=("y", "z"), opset=20)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    engine = Engine(engine_bytes(aotc.compiler.compile_model(model, arch="none", host=True).plan))
    outs = engine.create_context("cpu").run(feeds)
    for name, w in zip(("y", "z"), want):
        np.testing.assert_allclose(outs[name], w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()),
                                   err_msg=f"{name} (seed {seed})")


def test_stft_without_onesided_attribute_is_one_sided():
    """The spec's default onesided=1 holds even though onnx's shape inference assumes 0 (the importer
    writes the default into the node before inference)."""
    rng, seed = fresh_rng()
    x = random_array(rng, (2, 40, 1))
    g = helper.make_graph([helper.make_node("STFT", ["x", "step", "", "len"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None] * 4)],
                          initializer=[numpy_helper.from_array(np.array(6, np.int64), "step"),
                                       numpy_helper.from_array(np.array(10, np.int64), "len")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    got = interpret(import_onnx(model), {"x": x})[0]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.shape == want.shape == (2, 6, 6, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()), err_msg=f"seed {seed}")
