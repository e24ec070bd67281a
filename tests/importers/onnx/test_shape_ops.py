"""The converters of aotc/importers/onnx/shape_ops.py (constants, shapes, data movement), one-node models
vs onnxruntime, and a PyTorch-style shape chain evaluated at import time."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.importers.onnx import import_onnx
from tests.importers.onnx.one_node import C, F, I, check, make_model, run_case

X = F(2, 3, 4)
IMG = F(2, 4, 7, 6)
CASES = [
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
    C("GatherElements", [("x", F(3, 4)), ("i", np.array([[0, -1, 2, 1], [3, 0, 0, 1]], np.int64))], {"axis": 1}),
    C("Trilu", [("x", F(2, 4, 5)), ("k", I(1))], consts=("k",)),
    C("Trilu", [("x", F(4, 5)), ("k", I(-1))], {"upper": 0}, id="Trilu-lower-dynamic-k"),
    C("OneHot", [("i", np.array([[1, -1], [0, 2]], np.int64)), ("d", I(3)), ("v", np.array([0.5, 2.0], np.float32))],
      {"axis": 1}, consts=("d",)),
    C("ConstantOfShape", [("s", I(2, 3))], {"value": numpy_helper.from_array(np.array([1.5], np.float32))},
      consts=("s",)),
    C("Range", [("a", np.array(1.0, np.float32)), ("b", np.array(4.0, np.float32)), ("c", np.array(0.7, np.float32))],
      consts=("a", "b", "c")),
]


@pytest.mark.parametrize("op,inputs,attrs,opset,consts,n_out", CASES)
def test_one_node(op, inputs, attrs, opset, consts, n_out):
    run_case(op, inputs, attrs, opset, consts, n_out)


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
