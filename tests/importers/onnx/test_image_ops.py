"""Col2Im, GridSample, RoiAlign, DeformConv (aotc/importers/onnx/image_ops.py) vs onnxruntime: importer +
interpreter, engines.

Random inputs per run (the seed is in every failure message). Grids reach
past [-1, 1] so that every padding mode has taps outside the image, and rois
past the image's borders. RoiAlign runs at opset 16 (onnxruntime has no
RoiAlign-22; the two only differ in types). DeformConv offsets move taps past
the image and is checked against the ONNX reference too. The node suite covers the
ONNX-generated cases end to end.
"""
import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

import aotc.compiler
from aotc.errors import UnsupportedError
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.helpers.rng import fresh_rng, random_array
from tests.importers.onnx.one_node import check, make_model


def compare(model, feeds, seed, rtol=1e-4, atol=1e-5):
    """Importer + interpreter vs onnxruntime, with the seed in the failure message."""
    try:
        check(model, feeds, rtol=rtol, atol=atol)
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from None


def onnxruntime_outputs(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _n_blocks(image, block, at):
    nd = len(image)
    d, p, s = at.get("dilations", [1] * nd), at.get("pads", [0] * 2 * nd), at.get("strides", [1] * nd)
    return int(np.prod([(image[i] + p[i] + p[i + nd] - d[i] * (block[i] - 1) - 1) // s[i] + 1 for i in range(nd)]))


@pytest.mark.parametrize("image,block,attrs", [
    ((5, 5), (1, 5), {}),
    ((6, 7), (2, 3), {"dilations": [2, 1]}),
    ((7, 6), (3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((3, 4, 5), (1, 2, 3), {"pads": [0, 1, 1, 0, 0, 1], "strides": [1, 2, 1]}),
])
def test_col2im_matches_onnxruntime(image, block, attrs):
    rng, seed = fresh_rng()
    x = random_array(rng, (2, 3 * int(np.prod(block)), _n_blocks(image, block, attrs)))
    model = make_model("Col2Im", [("x", x), ("i", np.array(image, np.int64)), ("b", np.array(block, np.int64))],
                       attrs, opset=18, consts={"i", "b"})
    compare(model, {"x": x}, seed)


def test_col2im_needs_constant_shapes():
    x = np.ones((1, 4, 4), np.float32)
    model = make_model("Col2Im", [("x", x), ("i", np.array([3, 3], np.int64)), ("b", np.array([2, 2], np.int64))],
                       opset=18, consts={"b"})
    with pytest.raises(UnsupportedError, match="image_shape must be computable at import time"):
        import_onnx(model)


def _grid_case(rng, space, mode, padding, align, opset=22, out=(5, 4)):
    x = random_array(rng, (2, 3, *space))
    grid = rng.uniform(-1.4, 1.4, (2, *out, len(space))).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    return make_model("GridSample", [("x", x), ("g", grid)], attrs, opset=opset), {"x": x, "g": grid}


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["linear", "nearest", "cubic"], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_2d_matches_onnxruntime(mode, padding, align):
    rng, seed = fresh_rng()
    model, feeds = _grid_case(rng, (4, 6), mode, padding, align)
    compare(model, feeds, seed)


@pytest.mark.parametrize("mode,padding,align", [("linear", "zeros", 0), ("linear", "reflection", 1),
                                                ("nearest", "border", 0), ("nearest", "zeros", 1)])
def test_grid_sample_3d_matches_onnxruntime(mode, padding, align):
    rng, seed = fresh_rng()
    model, feeds = _grid_case(rng, (3, 4, 5), mode, padding, align, out=(2, 3, 4))
    compare(model, feeds, seed)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
def test_grid_sample_opset16_mode_names(mode):
    rng, seed = fresh_rng()
    model, feeds = _grid_case(rng, (5, 3), mode, "border", 0, opset=16)
    compare(model, feeds, seed)


def test_grid_sample_rejects_unknown_mode():
    rng, _ = fresh_rng()
    model, _ = _grid_case(rng, (4, 4), "linear", "zeros", 0)
    next(a for a in model.graph.node[0].attribute if a.name == "mode").s = b"area"
    with pytest.raises(UnsupportedError, match="mode='area'"):
        import_onnx(model)


def test_grid_sample_engine_on_cpu_device_matches_onnxruntime():
    rng, seed = fresh_rng()
    model, feeds = _grid_case(rng, (7, 9), "cubic", "reflection", 0, out=(6, 5))
    want = onnxruntime_outputs(model, feeds)
    result = aotc.compiler.compile_model(model, arch="none", host=True)
    outs = Engine(engine_bytes(result.plan)).create_context("cpu").run(feeds)
    np.testing.assert_allclose(outs["y0"], want[0], rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


def _roi_case(rng, attrs, opset=16, n_rois=5, const_rois=False, space=(9, 11)):
    """X (2, 3, *space) and rois that reach past the image, so the border rules are exercised."""
    h, w = space
    x = random_array(rng, (2, 3, h, w))
    scale = attrs.get("spatial_scale", 1.0)
    lo = rng.uniform(-2.0, [w - 2, h - 2], (n_rois, 2))
    hi = lo + rng.uniform(0.3, [w * 0.8, h * 0.8], (n_rois, 2))
    rois = (np.concatenate([lo, hi], axis=1) / scale).astype(np.float32)
    batch = rng.integers(0, 2, n_rois).astype(np.int64)
    ins = [("x", x), ("rois", rois), ("b", batch)]
    model = make_model("RoiAlign", ins, attrs, opset=opset, consts={"rois"} if const_rois else ())
    feeds = {k: v for k, v in ins if not (const_rois and k == "rois")}
    return model, feeds


@pytest.mark.parametrize("mode,coords,ratio", list(itertools.product(
    ["avg", "max"], ["half_pixel", "output_half_pixel"], [1, 2, 3])))
def test_roi_align_matches_onnxruntime(mode, coords, ratio):
    rng, seed = fresh_rng()
    attrs = {"mode": mode, "coordinate_transformation_mode": coords, "sampling_ratio": ratio,
             "output_height": 3, "output_width": 4, "spatial_scale": 0.5}
    model, feeds = _roi_case(rng, attrs)
    compare(model, feeds, seed)


def test_roi_align_opset10_is_output_half_pixel():
    rng, seed = fresh_rng()
    model, feeds = _roi_case(rng, {"sampling_ratio": 2, "output_height": 2, "output_width": 5}, opset=10)
    compare(model, feeds, seed)


@pytest.mark.parametrize("mode,coords", [("avg", "half_pixel"), ("max", "half_pixel"), ("avg", "output_half_pixel"),
                                         ("max", "output_half_pixel")])
def test_roi_align_adaptive_sampling_with_constant_rois(mode, coords):
    """sampling_ratio=0: each roi its own ceil(size / output) grid; an empty (reversed) roi gives zeros."""
    rng, seed = fresh_rng()
    attrs = {"mode": mode, "coordinate_transformation_mode": coords, "output_height": 2, "output_width": 3}
    model, feeds = _roi_case(rng, attrs, n_rois=6, const_rois=True)
    rois = next(i for i in model.graph.initializer if i.name == "rois")
    box = np.frombuffer(rois.raw_data, np.float32).reshape(6, 4).copy()
    box[0] = [6.0, 5.0, 1.0, 2.0]                     # reversed: no samples with half_pixel
    rois.raw_data = box.tobytes()
    compare(model, feeds, seed)


def test_roi_align_adaptive_sampling_needs_constant_rois():
    rng, _ = fresh_rng()
    model, _ = _roi_case(rng, {"output_height": 2, "output_width": 2})
    with pytest.raises(UnsupportedError, match="sampling_ratio=0 .* needs rois computable at import time"):
        import_onnx(model)


def test_roi_align_rejects_unknown_mode():
    rng, _ = fresh_rng()
    model, _ = _roi_case(rng, {"sampling_ratio": 2})
    model.graph.node[0].attribute.append(onnx.helper.make_attribute("mode", "median"))
    with pytest.raises(UnsupportedError, match="mode='median'"):
        import_onnx(model)


@pytest.mark.parametrize("mode,ratio", [("avg", 2), ("max", 0)])
def test_roi_align_engine_on_cpu_device_matches_onnxruntime(mode, ratio):
    rng, seed = fresh_rng()
    attrs = {"mode": mode, "sampling_ratio": ratio, "output_height": 4, "output_width": 3, "spatial_scale": 0.25}
    model, feeds = _roi_case(rng, attrs, n_rois=7, space=(13, 10), const_rois=ratio == 0)
    want = onnxruntime_outputs(model, feeds)
    result = aotc.compiler.compile_model(model, arch="none", host=True)
    outs = Engine(engine_bytes(result.plan)).create_context("cpu").run(feeds)
    np.testing.assert_allclose(outs["y0"], want[0], rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


def _deform_case(rng, attrs, space=(7, 8), channels=4, out_channels=6, kernel=(3, 2), with_bias=True,
                 with_mask=True, opset=22):
    """Random X, W, offsets (up to +-4 pixels, so taps land outside the image), optional bias and mask."""
    nd = len(space)
    d, p, s = attrs.get("dilations", [1] * nd), attrs.get("pads", [0] * 2 * nd), attrs.get("strides", [1] * nd)
    out = [(space[i] + p[i] + p[i + nd] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    n_k, og = int(np.prod(kernel)), attrs.get("offset_group", 1)
    ins = [("x", random_array(rng, (2, channels, *space))),
           ("w", random_array(rng, (out_channels, channels // attrs.get("group", 1), *kernel))),
           ("o", random_array(rng, (2, og * n_k * nd, *out), low=-4.0, high=4.0)),
           ("b", random_array(rng, (out_channels,))) if with_bias else ("", None)]
    if with_mask:
        ins.append(("m", random_array(rng, (2, og * n_k, *out), low=-0.5, high=1.5)))
    model = make_model("DeformConv", ins, {"kernel_shape": list(kernel), **attrs}, opset=opset)
    return model, {k: v for k, v in ins if k}


@pytest.mark.parametrize("attrs,with_bias,with_mask", [
    ({}, True, True),
    ({}, False, False),
    ({"pads": [1, 0, 2, 1], "strides": [2, 1]}, True, False),
    ({"dilations": [2, 1], "strides": [1, 2], "pads": [2, 1, 1, 1]}, False, True),
    ({"group": 2}, True, True),
    ({"offset_group": 2}, False, True),
    ({"group": 2, "offset_group": 4, "pads": [1, 1, 1, 1], "dilations": [1, 2]}, True, True),
])
def test_deform_conv_matches_onnxruntime_and_reference(attrs, with_bias, with_mask):
    rng, seed = fresh_rng()
    model, feeds = _deform_case(rng, attrs, with_bias=with_bias, with_mask=with_mask)
    compare(model, feeds, seed)
    got = interpret(import_onnx(model), feeds)[0]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


def test_deform_conv_opset19_without_kernel_shape():
    rng, seed = fresh_rng()
    model, feeds = _deform_case(rng, {"group": 2}, opset=19)
    attrs = model.graph.node[0].attribute
    attrs.remove(next(a for a in attrs if a.name == "kernel_shape"))     # kernel_shape comes from W
    compare(model, feeds, seed)


def test_deform_conv_rejects_3d():
    rng, _ = fresh_rng()
    model, _ = _deform_case(rng, {}, space=(4, 5, 6), kernel=(2, 2, 2))
    with pytest.raises(UnsupportedError, match="3-D DeformConv"):
        import_onnx(model)


def test_deform_conv_engine_on_cpu_device_matches_onnxruntime():
    rng, seed = fresh_rng()
    model, feeds = _deform_case(rng, {"group": 2, "offset_group": 2, "pads": [1, 1, 0, 1], "strides": [2, 1]},
                                space=(9, 7))
    want = onnxruntime_outputs(model, feeds)
    result = aotc.compiler.compile_model(model, arch="none", host=True)
    outs = Engine(engine_bytes(result.plan)).create_context("cpu").run(feeds)
    np.testing.assert_allclose(outs["y0"], want[0], rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")
