"""Resize (aotc/importers/onnx/resize.py) with antialias=1 vs onnxruntime: importer + interpreter, and one engine.

The one-node cases first: nearest and linear modes under each coordinate transformation,
sizes instead of scales. Random inputs per run (the seed is in every failure message). Downscales are
chosen so the stretched filter has few taps (gathers) and many taps (the
dense weight-matrix path past MAX_TAPS); the node suite covers the ONNX cases.
"""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import aotc.compiler
from aotc.importers.onnx import resize as onnx_resize
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.helpers.rng import fresh_rng, random_array
from tests.importers.onnx.one_node import C, F, I, make_model, run_case


CASES = [
    *[C("Resize", [("x", F(1, 2, 4, 5)), ("", None), ("s", np.array([1, 1, 2.0, 1.5], np.float32))],
        {"mode": mode, "coordinate_transformation_mode": ct}, consts=("s",), opset=13, id=f"Resize-{mode}-{ct}")
      for mode in ("nearest", "linear") for ct in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")],
    C("Resize", [("x", F(1, 2, 6, 8)), ("", None), ("", None), ("z", I(1, 2, 4, 3))],
      {"mode": "linear"}, consts=("z",), opset=13, id="Resize-linear-sizes-down"),
    C("Resize", [("x", F(1, 2, 4, 5)), ("", None), ("s", np.array([1, 1, 2.0, 3.0], np.float32))],
      {"nearest_mode": "floor"}, consts=("s",), opset=13, id="Resize-nearest-floor"),
]


@pytest.mark.parametrize("op,inputs,attrs,opset,consts,n_out", CASES)
def test_one_node(op, inputs, attrs, opset, consts, n_out):
    run_case(op, inputs, attrs, opset, consts, n_out)


def _resize_model(rng, shape, attrs, scales=None, sizes=None, axes=None, dtype=np.float32):
    x = random_array(rng, shape, dtype)
    inputs = [("x", x), ("", None)]
    if scales is not None:
        inputs.append(("s", np.asarray(scales, np.float32)))
    else:
        inputs += [("", None), ("z", np.asarray(sizes, np.int64))]
    attrs = dict(attrs, antialias=1, **({"axes": axes} if axes is not None else {}))
    model = make_model("Resize", inputs, attrs, opset=19)
    del model.graph.input[1:]          # scales / sizes become constants, as a static compiler needs
    for name, a in inputs[2:]:
        if name:
            model.graph.initializer.append(numpy_helper.from_array(a, name))
    return model, {"x": x}


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


CASES = [
    pytest.param({"mode": "linear"}, dict(scales=[1, 1, 0.6, 0.8]), (2, 3, 10, 9), id="linear-scales"),
    pytest.param({"mode": "cubic"}, dict(scales=[1, 1, 0.5, 0.7]), (1, 2, 12, 11), id="cubic-scales"),
    pytest.param({"mode": "linear"}, dict(sizes=[1, 2, 3, 5]), (1, 2, 17, 23), id="linear-sizes-wide"),
    pytest.param({"mode": "cubic", "cubic_coeff_a": -0.5}, dict(sizes=[2, 1, 4, 6]), (2, 1, 19, 13),
                 id="cubic-sizes-wide"),
    pytest.param({"mode": "cubic", "exclude_outside": 1}, dict(scales=[1, 1, 0.4, 0.6]), (1, 3, 10, 10),
                 id="cubic-exclude-outside"),
    pytest.param({"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                 dict(sizes=[1, 1, 4, 3]), (1, 1, 9, 8), id="linear-align-corners"),
    pytest.param({"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
                 dict(scales=[0.5, 2.0], axes=[2, 3]), (1, 2, 8, 3), id="linear-down-and-up-axes"),
    pytest.param({"mode": "cubic", "keep_aspect_ratio_policy": "not_larger"}, dict(sizes=[5, 5], axes=[2, 3]),
                 (1, 1, 12, 9), id="cubic-not-larger"),
]


@pytest.mark.parametrize("attrs,kw,shape", CASES)
def test_antialiased_resize_matches_onnxruntime(attrs, kw, shape):
    rng, seed = fresh_rng()
    model, feeds = _resize_model(rng, shape, attrs, **kw)
    got = interpret(import_onnx(model), feeds)[0]
    want = _ort(model, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


def test_strong_downscale_uses_one_dot_general_per_axis():
    rng, _ = fresh_rng()
    model, _ = _resize_model(rng, (1, 1, 40, 30), {"mode": "cubic"}, sizes=[1, 1, 4, 30])
    ops = [n.op for n in import_onnx(model).nodes]
    # 40 -> 4: the cubic filter stretched 10x spans 40 taps, far past MAX_TAPS; the untouched last axis costs nothing
    assert 40 > onnx_resize.MAX_TAPS
    assert ops.count("dot_general") == 1 and "gather" not in ops


def test_mild_downscale_stays_gathers():
    rng, _ = fresh_rng()
    model, _ = _resize_model(rng, (1, 1, 10, 10), {"mode": "linear"}, scales=[1, 1, 0.8, 1])
    ops = [n.op for n in import_onnx(model).nodes]
    assert "dot_general" not in ops and ops.count("gather") == 4     # width 2 - 2 * floor(1 - 1/0.8) = 4


def test_antialiased_resize_engine_on_cpu_device_matches_onnxruntime():
    rng, seed = fresh_rng()
    model, feeds = _resize_model(rng, (2, 3, 21, 14), {"mode": "cubic"}, sizes=[2, 3, 5, 9])
    want = _ort(model, feeds)[0]
    result = aotc.compiler.compile_model(model, arch="none", host=True)
    outs = Engine(engine_bytes(result.plan)).create_context("cpu").run(feeds)
    np.testing.assert_allclose(outs["y0"], want, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset10_is_upsample(mode):
    """Resize-10 takes (X, scales) and means Upsample: asymmetric coordinates, floor rounding."""
    rng, seed = fresh_rng()
    x = random_array(rng, (1, 2, 3, 5))
    model = make_model("Resize", [("x", x), ("s", np.array([1, 1, 2, 1.5], np.float32))], {"mode": mode}, opset=10)
    del model.graph.input[1:]
    model.graph.initializer.append(numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "s"))
    (want,) = _ort(model, {"x": x})
    (got,) = interpret(import_onnx(model), {"x": x})
    assert got.shape == want.shape == (1, 2, 6, 7)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")
