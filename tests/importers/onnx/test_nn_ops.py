"""The converters of aotc/importers/onnx/nn_ops.py (matmul, conv, pooling, normalization, softmax,
reductions), one-node models vs onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from tests.importers.onnx.one_node import C, F, I, P, run_case

IMG = F(2, 4, 7, 6)
CASES = [
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
    C("Hardmax", [("x", F(2, 3, 5))], {"axis": 1}),
    C("LpNormalization", [("x", F(2, 3, 5))], {"axis": 1, "p": 1}),
    C("LpNormalization", [("x", F(2, 3, 5))], id="LpNormalization-l2"),
    C("LayerNormalization", [("x", F(2, 3, 8)), ("s", F(8))], n_out=3, id="LayerNorm-3-outputs"),
    C("ReduceMax", [("x", F(2, 3) > 0), ("ax", I(1))], consts=("ax",), opset=20, id="ReduceMax-bool"),
]


@pytest.mark.parametrize("op,inputs,attrs,opset,consts,n_out", CASES)
def test_one_node(op, inputs, attrs, opset, consts, n_out):
    run_case(op, inputs, attrs, opset, consts, n_out)
