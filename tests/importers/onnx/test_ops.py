"""The converters of aotc/importers/onnx/ops.py (elementwise, activations, casts), one-node models vs onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from aotc.errors import UnsupportedError
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from tests.importers.onnx.one_node import C, F, P, make_model, run_case

X = F(2, 3, 4)
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
    C("Dropout", [("x", X)], n_out=2),
    C("IsNaN", [("x", np.array([1.0, np.nan, np.inf], np.float32))]),
    C("IsInf", [("x", np.array([1.0, np.nan, np.inf, -np.inf], np.float32))], {"detect_negative": 0}),
]


@pytest.mark.parametrize("op,inputs,attrs,opset,consts,n_out", CASES)
def test_one_node(op, inputs, attrs, opset, consts, n_out):
    run_case(op, inputs, attrs, opset, consts, n_out)


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
