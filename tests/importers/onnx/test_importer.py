"""ONNX importer tests: one-node models vs onnxruntime, a PyTorch-style shape chain, errors."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import ModelError, UnsupportedError
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret

rng = np.random.default_rng(1234)


def F(*shape):
    """Random f32 normal values (never exactly zero in practice)."""
    return rng.standard_normal(shape).astype(np.float32)


def P(*shape):
    """Random positive f32 values."""
    return rng.uniform(0.5, 2.0, shape).astype(np.float32)


def I(*vals):
    return np.array(vals, np.int64)


def make_model(op, inputs, attrs=None, opset=17, consts=(), n_out=1, domain=""):
    """One-node model; `inputs` is [(name, array)], '' names an omitted optional input."""
    vis, inits = [], []
    for name, a in inputs:
        if not name:
            continue
        if name in consts:
            inits.append(numpy_helper.from_array(a, name))
        else:
            vis.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, [n for n, _ in inputs], outs, name=f"{op.lower()}_0", domain=domain, **(attrs or {}))
    g = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m)


def check(model, feeds, rtol=1e-5, atol=1e-5):
    graph = import_onnx(model)
    verify(graph)
    got = interpret(graph, feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert graph.output_names == [o.name for o in model.graph.output]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def C(op, inputs, attrs=None, opset=17, consts=(), n_out=1, id=None):
    return pytest.param(op, inputs, attrs, opset, consts, n_out, id=id or op)


X = F(2, 3, 4)
IMG = F(2, 4, 7, 6)
CASES = [
    *[C(op, [("a", F(2, 3, 4)), ("b", F(3, 1))]) for op in ("Add", "Sub", "Mul", "Max", "Min")],
    C("Div", [("a", F(2, 3, 4)), ("b", P(4))]),
    C("Div", [("a", np.array([7, -7, 9], np.int64)), ("b", np.array([2, 2, -4], np.int64))], id="Div-int"),
    C("Pow", [("a", P(2, 3)), ("b", F(3))]),
    C("Mod", [("a", np.array([7, -7, 9, -3], np.int64)), ("b", np.array([3, 3, -4, -2], np.int64))]),
    C("Mod", [("a", F(5)), ("b", P(5))], {"fmod": 1}, id="Mod-fmod"),
    C("Sum", [("a", F(2, 3)), ("b", F(3)), ("c", F(1, 3))]),
    C("Mean", [("a", F(2, 3)), ("b", F(3))]),
    C("Max", [("a", F(2, 3)), ("b", F(3)), ("c", F(2, 1))], id="Max-3"),
    *[C(op, [("x", P(2, 5))]) for op in ("Sqrt", "Log", "Reciprocal")],
    *[C(op, [("x", F(2, 5))]) for op in ("Exp", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Erf", "Floor",
                                         "Ceil", "Sin", "Cos", "Sign", "Softplus", "Softsign", "Round",
                                         "Identity", "HardSwish")],
    C("Mish", [("x", F(2, 5))], opset=18),
    C("LeakyRelu", [("x", F(3, 4))], {"alpha": 0.2}),
    C("Elu", [("x", F(3, 4))], {"alpha": 0.7}),
    C("Selu", [("x", F(3, 4))]),
    C("Celu", [("x", F(3, 4))], {"alpha": 1.5}),
    C("ThresholdedRelu", [("x", F(3, 4))], {"alpha": 0.3}),
    C("HardSigmoid", [("x", F(3, 4))], {"alpha": 0.3, "beta": 0.4}),
    C("PRelu", [("x", F(2, 3, 4)), ("s", F(3, 1))]),
    C("Gelu", [("x", F(3, 7))], opset=20),
    C("Gelu", [("x", F(3, 7))], {"approximate": "tanh"}, opset=20, id="Gelu-tanh"),
    C("Clip", [("x", F(3, 4)), ("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.6, np.float32))]),
    C("Clip", [("x", F(3, 4)), ("", None), ("hi", np.array(0.6, np.float32))], id="Clip-max-only"),
    C("Clip", [("x", F(3, 4))], {"min": -0.3, "max": 0.2}, opset=6, id="Clip-attrs"),
    C("Cast", [("x", F(3, 4) * 5)], {"to": TensorProto.INT32}),
    C("Cast", [("x", F(3, 4))], {"to": TensorProto.FLOAT16}, id="Cast-f16"),
    *[C(op, [("a", F(2, 3)), ("b", F(3))]) for op in ("Less", "Greater", "LessOrEqual", "GreaterOrEqual")],
    C("Equal", [("a", np.array([1, 2, 3], np.int64)), ("b", np.array([1, 5, 3], np.int64))]),
    C("Not", [("a", np.array([True, False]))]),
    *[C(op, [("a", np.array([True, False, True])), ("b", np.array([True, True, False]))]) for op in ("And", "Or", "Xor")],
    C("Where", [("c", F(2, 3) > 0), ("a", F(3)), ("b", F(2, 1))]),
    # matmul family
    C("MatMul", [("a", F(2, 3, 4)), ("b", F(4, 5))]),
    C("MatMul", [("a", F(2, 1, 3, 4)), ("b", F(3, 4, 5))], id="MatMul-batch-bcast"),
    C("MatMul", [("a", F(4)), ("b", F(2, 4, 5))], id="MatMul-1d-lhs"),
    C("MatMul", [("a", F(3, 4)), ("b", F(4))], id="MatMul-1d-rhs"),
    C("MatMul", [("a", F(4)), ("b", F(4))], id="MatMul-1d-both"),
    C("Gemm", [("a", F(3, 4)), ("b", F(4, 5)), ("c", F(5))]),
    C("Gemm", [("a", F(4, 3)), ("b", F(5, 4)), ("c", F(3, 1))],
      {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, id="Gemm-trans"),
    C("Gemm", [("a", F(3, 4)), ("b", F(4, 5))], opset=13, id="Gemm-noC"),
    # conv / pool
    C("Conv", [("x", IMG), ("w", F(6, 4, 3, 3)), ("b", F(6))], {"pads": [1, 1, 1, 1]}, consts=("w", "b")),
    C("Conv", [("x", IMG), ("w", F(8, 2, 3, 2))], {"strides": [2, 1], "dilations": [1, 2], "group": 2,
                                                  "pads": [0, 1, 2, 0]}, id="Conv-group-stride-dil"),
    C("Conv", [("x", IMG), ("w", F(4, 1, 3, 3))], {"auto_pad": "SAME_UPPER", "strides": [2, 2], "group": 4},
      id="Conv-same-upper-dw"),
    C("Conv", [("x", IMG), ("w", F(3, 4, 2, 3))], {"auto_pad": "SAME_LOWER"}, id="Conv-same-lower"),
    C("Conv", [("x", F(2, 3, 9)), ("w", F(5, 3, 3)), ("b", F(5))], {"pads": [2, 1]}, id="Conv-1d"),
    C("Conv", [("x", F(1, 2, 4, 5, 3)), ("w", F(3, 2, 2, 3, 2))], {"auto_pad": "VALID"}, id="Conv-3d"),
    C("ConvTranspose", [("x", F(1, 4, 5, 4)), ("w", F(4, 3, 3, 3)), ("b", F(3))],
      {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 0]}),
    C("ConvTranspose", [("x", F(1, 4, 5)), ("w", F(4, 2, 3))], {"group": 2, "dilations": [2], "pads": [5, 1]},
      id="ConvTranspose-group-crop"),
    C("MaxPool", [("x", IMG)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    C("MaxPool", [("x", IMG)], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, id="MaxPool-ceil"),
    C("MaxPool", [("x", IMG)], {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 0, 1, 2]},
      id="MaxPool-dil"),
    C("MaxPool", [("x", F(2, 3, 9))], {"kernel_shape": [3], "strides": [2]}, id="MaxPool-1d"),
    C("AveragePool", [("x", IMG)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    C("AveragePool", [("x", IMG)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
      id="AveragePool-incl"),
    C("AveragePool", [("x", IMG)], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0],
                                    "ceil_mode": 1, "count_include_pad": 1}, id="AveragePool-ceil-incl"),
    C("AveragePool", [("x", IMG)], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0],
                                    "ceil_mode": 1}, id="AveragePool-ceil"),
    C("AveragePool", [("x", IMG)], {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}, id="AveragePool-same"),
    C("GlobalAveragePool", [("x", IMG)]),
    C("GlobalMaxPool", [("x", IMG)]),
    # normalization, softmax
    C("BatchNormalization", [("x", IMG), ("s", F(4)), ("b", F(4)), ("m", F(4)), ("v", P(4))], {"epsilon": 1e-3},
      consts=("s", "b", "m", "v")),
    C("BatchNormalization", [("x", IMG), ("s", F(4)), ("b", F(4)), ("m", F(4)), ("v", P(4))],
      id="BatchNormalization-dynamic"),
    C("InstanceNormalization", [("x", IMG), ("s", F(4)), ("b", F(4))]),
    C("LayerNormalization", [("x", F(2, 3, 8)), ("s", F(8)), ("b", F(8))]),
    C("LayerNormalization", [("x", F(2, 3, 8)), ("s", F(3, 8))], {"axis": 1, "epsilon": 1e-3}, id="LayerNorm-axis1"),
    C("Softmax", [("x", F(2, 3, 5))]),
    C("Softmax", [("x", F(2, 3, 5))], {"axis": 1}, id="Softmax-axis1"),
    C("Softmax", [("x", F(2, 3, 5))], {"axis": 1}, opset=11, id="Softmax-opset11-flatten"),
    C("LogSoftmax", [("x", F(2, 3, 5) * 10)]),
    C("LogSoftmax", [("x", F(2, 3, 5))], opset=11, id="LogSoftmax-opset11"),
    # reductions
    *[C(op, [("x", F(2, 3, 4)), ("ax", I(1, -1))], opset=18, consts=("ax",))
      for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                 "ReduceSumSquare", "ReduceLogSumExp")],
    C("ReduceLogSum", [("x", P(2, 3, 4))], {"keepdims": 0}, opset=18),
    C("ReduceSum", [("x", F(2, 3, 4)), ("ax", I(0))], {"keepdims": 0}, consts=("ax",)),
    C("ReduceSum", [("x", F(2, 3, 4))], {"keepdims": 0}, id="ReduceSum-all"),
    C("ReduceSum", [("x", F(2, 3, 4))], {"noop_with_empty_axes": 1}, id="ReduceSum-noop"),
    C("ReduceSum", [("x", F(2, 3, 4))], {"axes": [2]}, opset=11, id="ReduceSum-attr"),
    C("ReduceMean", [("x", F(2, 3, 4))], {"axes": [-1], "keepdims": 0}, opset=13, id="ReduceMean-attr"),
    C("ArgMax", [("x", F(3, 5))], {"axis": 1}),
    C("ArgMin", [("x", np.array([[1, 0, 0, 2], [3, 3, 1, 1]], np.float32))], {"keepdims": 0, "select_last_index": 1}),
    # shape and data movement
    C("Reshape", [("x", X), ("s", I(0, -1))], consts=("s",)),
    C("Reshape", [("x", X), ("s", I(4, 0, 2))], {"allowzero": 0}, consts=("s",), id="Reshape-zero"),
    C("Transpose", [("x", X)], {"perm": [1, 2, 0]}),
    C("Transpose", [("x", X)], id="Transpose-default"),
    C("Flatten", [("x", IMG)], {"axis": 2}),
    C("Flatten", [("x", IMG)], {"axis": -1}, id="Flatten-neg"),
    C("Squeeze", [("x", F(1, 3, 1, 2)), ("ax", I(-2))], consts=("ax",)),
    C("Squeeze", [("x", F(1, 3, 1, 2))], id="Squeeze-all"),
    C("Squeeze", [("x", F(1, 3, 1, 2))], {"axes": [0]}, opset=11, id="Squeeze-attr"),
    C("Unsqueeze", [("x", F(3, 2)), ("ax", I(0, -1))], consts=("ax",)),
    C("Unsqueeze", [("x", F(3, 2))], {"axes": [1]}, opset=11, id="Unsqueeze-attr"),
    C("Concat", [("a", F(2, 3)), ("b", F(2, 1)), ("c", F(2, 2))], {"axis": -1}),
    C("Slice", [("x", F(5, 6, 4)), ("s", I(1, -4)), ("e", I(4, 100)), ("a", I(0, 1)), ("k", I(2, 1))],
      consts=("s", "e", "a", "k")),
    C("Slice", [("x", F(5, 6)), ("s", I(-1, 4)), ("e", I(-100, 0)), ("a", I(0, 1)), ("k", I(-2, -3))],
      consts=("s", "e", "a", "k"), id="Slice-negative-steps"),
    C("Slice", [("x", F(5, 6))], {"starts": [1], "ends": [-1], "axes": [1]}, opset=9, id="Slice-attrs"),
    C("Gather", [("x", F(5, 4)), ("i", np.array([[0, -1], [3, 2]], np.int64))], {"axis": 0}),
    C("Gather", [("x", F(3, 5, 2)), ("i", np.array([4, 0, -2], np.int32))], {"axis": -2}, id="Gather-axis-neg"),
    C("Gather", [("x", F(3, 5)), ("i", np.array(2, np.int64))], {"axis": 1}, consts=("i",), id="Gather-scalar"),
    C("Shape", [("x", X)], {"start": 1}),
    C("Size", [("x", X)]),
    C("Expand", [("x", F(3, 1)), ("s", I(2, 1, 4))], consts=("s",)),
    C("Tile", [("x", F(2, 3)), ("r", I(2, 3))], consts=("r",)),
    C("Split", [("x", F(2, 7)), ("s", I(3, 4))], {"axis": 1}, consts=("s",), n_out=2),
    C("Split", [("x", F(6, 2))], opset=13, n_out=3, id="Split-equal"),
    C("Split", [("x", F(7, 2))], {"num_outputs": 3}, opset=18, n_out=3, id="Split-num-outputs"),
    C("Split", [("x", F(2, 6))], {"axis": 1, "split": [1, 5]}, opset=11, n_out=2, id="Split-attr"),
    C("Pad", [("x", F(3, 4)), ("p", I(1, 2, 0, 1)), ("v", np.array(0.5, np.float32))], consts=("p",)),
    C("Pad", [("x", F(3, 4)), ("p", I(1, -1, -1, 2))], consts=("p",), id="Pad-negative"),
    C("Pad", [("x", F(3, 4)), ("p", I(2, 1, 1, 3))], {"mode": "reflect"}, consts=("p",), id="Pad-reflect"),
    C("Pad", [("x", F(3, 4)), ("p", I(2, 1, 1, 3))], {"mode": "edge"}, consts=("p",), id="Pad-edge"),
    C("Pad", [("x", F(3, 4)), ("p", I(1, 2)), ("", None), ("a", I(-1))], {"mode": "wrap"}, opset=19,
      consts=("p", "a"), id="Pad-wrap-axes"),
    C("DepthToSpace", [("x", F(1, 8, 2, 3))], {"blocksize": 2}),
    C("DepthToSpace", [("x", F(1, 8, 2, 3))], {"blocksize": 2, "mode": "CRD"}, id="DepthToSpace-CRD"),
    C("SpaceToDepth", [("x", F(1, 2, 4, 6))], {"blocksize": 2}),
    C("Dropout", [("x", X)], n_out=2),
    C("GatherElements", [("x", F(3, 4)), ("i", np.array([[0, -1, 2, 1], [3, 0, 0, 1]], np.int64))], {"axis": 1}),
    C("Trilu", [("x", F(2, 4, 5)), ("k", I(1))], consts=("k",)),
    C("Trilu", [("x", F(4, 5)), ("k", I(-1))], {"upper": 0}, id="Trilu-lower-dynamic-k"),
    C("OneHot", [("i", np.array([[1, -1], [0, 2]], np.int64)), ("d", I(3)), ("v", np.array([0.5, 2.0], np.float32))],
      {"axis": 1}, consts=("d",)),
    C("IsNaN", [("x", np.array([1.0, np.nan, np.inf], np.float32))]),
    C("IsInf", [("x", np.array([1.0, np.nan, np.inf, -np.inf], np.float32))], {"detect_negative": 0}),
    C("Hardmax", [("x", F(2, 3, 5))], {"axis": 1}),
    C("LpNormalization", [("x", F(2, 3, 5))], {"axis": 1, "p": 1}),
    C("LpNormalization", [("x", F(2, 3, 5))], id="LpNormalization-l2"),
    C("LayerNormalization", [("x", F(2, 3, 8)), ("s", F(8))], n_out=3, id="LayerNorm-3-outputs"),
    C("ReduceMax", [("x", F(2, 3) > 0), ("ax", I(1))], consts=("ax",), opset=20, id="ReduceMax-bool"),
    *[C("Resize", [("x", F(1, 2, 4, 5)), ("", None), ("s", np.array([1, 1, 2.0, 1.5], np.float32))],
        {"mode": mode, "coordinate_transformation_mode": ct}, consts=("s",), opset=13, id=f"Resize-{mode}-{ct}")
      for mode in ("nearest", "linear") for ct in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")],
    C("Resize", [("x", F(1, 2, 6, 8)), ("", None), ("", None), ("z", I(1, 2, 4, 3))],
      {"mode": "linear"}, consts=("z",), opset=13, id="Resize-linear-sizes-down"),
    C("Resize", [("x", F(1, 2, 4, 5)), ("", None), ("s", np.array([1, 1, 2.0, 3.0], np.float32))],
      {"nearest_mode": "floor"}, consts=("s",), opset=13, id="Resize-nearest-floor"),
    C("ConstantOfShape", [("s", I(2, 3))], {"value": numpy_helper.from_array(np.array([1.5], np.float32))},
      consts=("s",)),
    C("Range", [("a", np.array(1.0, np.float32)), ("b", np.array(4.0, np.float32)), ("c", np.array(0.7, np.float32))],
      consts=("a", "b", "c")),
]


@pytest.mark.parametrize("op,inputs,attrs,opset,consts,n_out", CASES)
def test_one_node(op, inputs, attrs, opset, consts, n_out):
    model = make_model(op, inputs, attrs, opset, consts, n_out)
    check(model, {n: a for n, a in inputs if n and n not in consts})


@pytest.mark.parametrize("attrs", [{"value": numpy_helper.from_array(F(2, 3))}, {"value_float": 1.5},
                                   {"value_floats": [1.0, 2.5]}, {"value_int": 3}, {"value_ints": [4, 5]}])
def test_constant(attrs):
    check(make_model("Constant", [], attrs), {})


def test_pytorch_shape_chain():
    """x.view(x.size(0), -1) as PyTorch exports it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Constant", [], ["zero"], name="c0", value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Gather", ["shp", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="fc"),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(F(24, 5), "w")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = import_onnx(model)
    assert [v.name for v in graph.inputs] == ["x"]
    check(model, {"x": F(2, 3, 4, 2)})


def test_input_shapes_override_and_bytes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"input 'x' dim 0 is symbolic \('batch'\)"):
        import_onnx(model)
    graph = import_onnx(model.SerializeToString(), input_shapes={"x": (4, 3)})
    assert graph.inputs[0].shape == (4, 3) and graph.outputs[0].shape == (4, 3)
    with pytest.raises(ModelError, match="'nope'"):
        import_onnx(model, input_shapes={"nope": (1, 3)})


def test_unsupported_nodes_listed_in_one_error():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="ok"),
             helper.make_node("RandomUniformLike", ["r"], ["h"], name="rnd"),
             helper.make_node("MyOp", ["h"], ["y"], name="custom", domain="my.domain")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])
    with pytest.raises(UnsupportedError) as e:
        import_onnx(model)
    msg = str(e.value)
    assert "\n" not in msg
    assert "2 unsupported" in msg
    assert "RandomUniformLike 'rnd' (opset 17)" in msg and "my.domain::MyOp 'custom' (opset 1)" in msg
    assert "Supported ONNX ops:" in msg and "Conv" in msg


def test_unsupported_attribute_and_dtype():
    c = [onnx.numpy_helper.from_array(np.ones(1, np.float32), n) for n in ("s", "b", "m", "v")]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["p"], name="bn", training_mode=1),
             helper.make_node("Cast", ["p"], ["y"], name="to_double", to=TensorProto.DOUBLE)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 1, 4, 4])], c)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match="BatchNormalization 'bn'.*training_mode.*Cast 'to_double'.*DOUBLE"):
        import_onnx(model)


def test_dynamic_static_value_is_named():
    model = make_model("Reshape", [("x", F(2, 6)), ("s", I(3, 4))])
    with pytest.raises(UnsupportedError, match=r"Reshape 'reshape_0' \(opset 17\): shape .*model input 's'"):
        import_onnx(model)


def test_checker_failure_is_model_error():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.graph.node[0].input[0] = "missing"
    with pytest.raises(ModelError, match="checker"):
        import_onnx(model)


def test_double_input_rejected():
    model = make_model("Relu", [("x", np.ones((2,), np.float64))])
    with pytest.raises(UnsupportedError, match="input 'x' has dtype DOUBLE"):
        import_onnx(model)


def test_model_local_functions_are_inlined():
    """Dynamo-style export: modules as local functions (nested, with an attribute reference)."""
    leaky = helper.make_node("LeakyRelu", ["t"], ["y"], name="act")
    leaky.attribute.append(onnx.AttributeProto(name="alpha", ref_attr_name="slope", type=onnx.AttributeProto.FLOAT))
    act = helper.make_function("pkg.torch.nn", "Act", ["t"], ["y"], [leaky],
                               [helper.make_opsetid("", 17)], attributes=["slope"])
    linear = helper.make_function(
        "pkg.torch.nn", "Linear", ["x", "w"], ["y"],
        [helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
         helper.make_node("Act", ["t"], ["y"], name="call_act", domain="pkg.torch.nn", slope=0.2)],
        [helper.make_opsetid("", 17), helper.make_opsetid("pkg.torch.nn", 1)])
    nodes = [helper.make_node("Linear", ["x", "w"], ["h"], name="l0", domain="pkg.torch.nn"),
             helper.make_node("Softmax", ["h"], ["y"], name="sm", axis=-1)]
    g = helper.make_graph(nodes, "fn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
                          [numpy_helper.from_array(F(4, 5), "w")])
    model = helper.make_model(g, functions=[act, linear],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("pkg.torch.nn", 1)])
    check(model, {"x": F(3, 4)})          # negative inputs to LeakyRelu: the referenced slope 0.2 matters


@pytest.mark.parametrize("src,dst", [(np.uint8, np.int8), (np.int8, np.uint8), (np.int32, np.float32),
                                     (np.float32, np.int32), (np.uint8, np.bool_)])
def test_bitcast_reinterprets_bits(src, dst):
    """BitCast-26 against numpy's view (any nonzero byte reads as true for bool)."""
    rng = np.random.default_rng()
    raw = rng.integers(0, 256, (3, 8), dtype=np.uint8)
    if np.dtype(src).itemsize == 4:
        raw = rng.integers(0, 2**32, (3, 8), dtype=np.uint64).astype(np.uint32)
    x = raw.view(src)
    if src == np.int32 and dst == np.float32:
        x = np.where(np.isfinite(x.view(np.float32)), x, 7).astype(np.int32)   # keep NaN payloads out
    model = make_model("BitCast", [("x", x)], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, opset=26)
    (got,) = interpret(import_onnx(model), {"x": x})
    want = x != 0 if dst == np.bool_ else x.view(dst)
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got.view(np.uint8) if dst != np.bool_ else got,
                                  want.view(np.uint8) if dst != np.bool_ else want)


def test_bitcast_between_half_types_is_refused():
    model = make_model("BitCast", [("x", np.ones((4,), np.float16))], {"to": TensorProto.BFLOAT16}, opset=26)
    with pytest.raises(UnsupportedError, match="BitCast"):
        import_onnx(model)
