"""The converters added for ONNX conformance, one-node models vs onnxruntime (through the interpreter).

The node suite (tests/onnx_backend) runs them through the whole path; these
cover what it cannot: Einsum and CumSum node tests are all float64, so here
they run in float32; TopK/Scatter with duplicates and negative indices.
"""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import UnsupportedError
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from tests.importers.onnx.one_node import F, I, check, make_model, rng


def K(*vals):
    return np.array(vals, np.int64)


CASES = [
    ("Einsum", [("x", F(2, 3, 4)), ("y", F(2, 4, 5))], {"equation": "bij,bjk->bik"}),
    ("Einsum", [("x", F(3, 3))], {"equation": "ii->i"}),
    ("Einsum", [("x", F(2, 3, 3))], {"equation": "...ii->...i"}),
    ("Einsum", [("x", F(3, 4)), ("y", F(4))], {"equation": "ij,j->i"}),
    ("Einsum", [("x", F(3, 4))], {"equation": "ij->"}),
    ("Einsum", [("x", F(2, 3, 4))], {"equation": "abc->cab"}),
    ("Einsum", [("x", F(5)), ("y", F(5))], {"equation": "i,i"}),
    ("CumSum", [("x", F(4, 6)), ("a", I(1))], {}),
    ("CumSum", [("x", F(4, 6)), ("a", I(0))], {"exclusive": 1, "reverse": 1}),
    ("CumSum", [("x", np.arange(10, dtype=np.int32)), ("a", I(0))], {"reverse": 1}),
    ("GatherND", [("x", F(2, 3, 4)), ("i", K(1, 2, 0, -1).reshape(2, 2))], {}),
    ("GatherND", [("x", F(2, 3, 4)), ("i", K(1, 2).reshape(2, 1))], {"batch_dims": 1}),
    ("ScatterElements", [("x", F(3, 5)), ("i", K(0, 4, -1, 4).reshape(1, 4).repeat(3, 0)), ("u", F(3, 4))],
     {"axis": 1, "reduction": "add"}),
    ("ScatterElements", [("x", F(4, 3)), ("i", K(1, 3, 0).reshape(3, 1)), ("u", F(3, 1))], {"axis": 0}),
    ("ScatterND", [("x", F(4, 3)), ("i", K(3, 0).reshape(2, 1)), ("u", F(2, 3))], {}),
    ("ScatterND", [("x", F(4, 3)), ("i", K(1, 1, 1, 1).reshape(2, 1, 2)), ("u", F(2, 1))], {"reduction": "mul"}),
    ("LpPool", [("x", F(1, 2, 6, 6))], {"kernel_shape": [3, 3], "strides": [2, 2], "p": 3}),
    ("LRN", [("x", F(2, 5, 3, 3))], {"size": 3}),
    ("Tan", [("x", F(3, 4))], {}), ("Acosh", [("x", 1.5 + np.abs(F(3, 4)))], {}),
    ("BitShift", [("x", np.array([1, 7, 200, 3], np.uint8)), ("y", np.array([1, 2, 1, 7], np.uint8))],
     {"direction": "LEFT"}),
    ("Shrink", [("x", F(3, 4))], {"lambd": 0.4, "bias": 0.1}),
    ("Resize", [("x", F(1, 1, 4, 5)), ("", None), ("s", np.array([1, 1, 1.6, 0.8], np.float32))],
     {"mode": "cubic"}),
    ("Resize", [("x", F(1, 1, 4, 5)), ("", None), ("s", np.array([1, 1, 2, 2], np.float32))],
     {"mode": "cubic", "coordinate_transformation_mode": "align_corners", "cubic_coeff_a": -0.5}),
    ("MatMulInteger", [("a", rng.integers(0, 255, (3, 4)).astype(np.uint8)),
                       ("b", rng.integers(0, 255, (4, 2)).astype(np.uint8)),
                       ("za", np.array(12, np.uint8)), ("zb", np.array(3, np.uint8))], {}),
]


@pytest.mark.parametrize("op,inputs,attrs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_new_op_matches_onnxruntime(op, inputs, attrs):
    consts = {"a", "s", "i"} if op in ("CumSum", "Resize") else set()
    inputs = [(n, a) if n else ("", None) for n, a in inputs]
    model = make_model(op, [(n, a) for n, a in inputs if n] if op != "Resize" else inputs,
                       attrs, opset={"BitShift": 17}.get(op, 18), consts=consts)
    feeds = {n: a for n, a in inputs if n and n not in consts}
    check(model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_ties_take_the_lower_index(largest):
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 5, 5, 4, 0, 1]], np.float32)
    model = make_model("TopK", [("x", x), ("k", I(4))], {"axis": 1, "largest": largest}, consts={"k"}, n_out=2)
    check(model, {"x": x})


def test_quantize_dequantize_per_axis():
    x = F(2, 3, 4)
    scale, zp = np.array([0.02, 0.05, 0.1], np.float32), np.array([10, 128, 250], np.uint8)
    q = make_model("QuantizeLinear", [("x", x), ("s", scale), ("z", zp)], {"axis": 1}, opset=19, consts={"s", "z"})
    check(q, {"x": x})
    d = make_model("DequantizeLinear", [("x", rng.integers(0, 255, (2, 3, 4)).astype(np.uint8)), ("s", scale),
                                        ("z", zp)], {"axis": 1}, opset=19, consts={"s", "z"})
    check(d, {"x": rng.integers(0, 255, (2, 3, 4)).astype(np.uint8)})


def test_nonzero_on_a_model_input_is_a_clear_error():
    x = F(3, 4)
    with pytest.raises(UnsupportedError, match="NonZero.*depends on the input's values"):
        import_onnx(make_model("NonZero", [("x", x)]))


def test_prescan_lists_every_unsupported_node_in_details():
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["h"], name="rnd"), helper.make_node("Unique", ["h"], ["y"], name="u")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    with pytest.raises(UnsupportedError) as e:
        import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert e.value.details == ["RandomUniformLike 'rnd' (opset 17): no converter for this op",
                               "Unique 'u' (opset 17): no converter for this op"]
    assert e.value.summary.startswith("2 unsupported item(s)") and "\n" not in str(e.value)


@pytest.mark.parametrize("reverse,exclusive", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod_matches_numpy(reverse, exclusive):
    """CumProd (opset 26) is newer than onnxruntime's kernels: compare with numpy instead."""
    from aotc.importers.onnx import import_onnx
    from aotc.ir.interpreter import interpret
    x = (1 + 0.5 * F(3, 5)).astype(np.float32)
    model = make_model("CumProd", [("x", x), ("a", I(1))], {"reverse": reverse, "exclusive": exclusive},
                       opset=26, consts={"a"})
    y = x[:, ::-1] if reverse else x
    want = np.cumprod(y, axis=1)
    if exclusive:
        want = np.concatenate([np.ones((3, 1), np.float32), want[:, :-1]], axis=1)
    want = want[:, ::-1] if reverse else want
    got = interpret(import_onnx(model), {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [1, 2], "dilations": [2, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1},
])
def test_maxpool_indices_match_onnxruntime(attrs):
    """MaxPool's second output: the flat index of each window's max (first one on ties)."""
    import onnxruntime as ort
    from aotc.ir.interpreter import interpret
    x = F(2, 3, 7, 8)
    x[0, 0, :2, :2] = 1.0                                   # a tie inside one window
    k, s = attrs["kernel_shape"], attrs["strides"]
    d, p = attrs.get("dilations", [1, 1]), attrs.get("pads", [0, 0, 0, 0])
    out = [2, 3] + [(x.shape[2 + i] + p[i] + p[i + 2] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)]
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    proto = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out),
         helper.make_tensor_value_info("i", TensorProto.INT64, out)]),
        opset_imports=[helper.make_opsetid("", 12)])
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = interpret(import_onnx(proto), {"x": x})
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_max_unpool_inverts_max_pool():
    """MaxUnpool(MaxPool(x)) puts each window max back where it came from, zeros elsewhere (vs onnxruntime)."""
    import onnxruntime as ort
    from aotc.ir.interpreter import interpret
    x = F(1, 2, 4, 6)
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["y", "i"], ["z"], kernel_shape=[2, 2], strides=[2, 2])]
    proto = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, list(x.shape))]),
        opset_imports=[helper.make_opsetid("", 12)])
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(interpret(import_onnx(proto), {"x": x})[0], want[0])


@pytest.mark.parametrize("elem,zp", [(TensorProto.FLOAT8E4M3FN, None), (TensorProto.FLOAT8E5M2, None),
                                     (TensorProto.INT16, -300), (TensorProto.UINT16, 40000),
                                     (TensorProto.INT4, -3), (TensorProto.UINT4, 9), (TensorProto.INT4, None),
                                     (TensorProto.INT2, 1), (TensorProto.UINT2, 2)])
def test_quantize_dequantize_float8_16_and_sub_byte_round_trip(elem, zp):
    from aotc.importers.onnx import ONNX_DTYPES
    if elem not in ONNX_DTYPES:
        pytest.skip(f"{TensorProto.DataType.Name(elem)} is not mapped by the importer in this tree (dtypes branch)")
    x = F(2, 3, 5) * 40          # float8/float4 and the 2/4-bit types saturate; the 16-bit types round
    scale = np.array([0.02, 0.05, 0.1], np.float32)
    inits = [numpy_helper.from_array(scale, "s")]
    ins = ["x", "s"]
    if zp is not None:
        inits.append(helper.make_tensor("z", elem, [3], [zp] * 3))
        ins.append("z")
    q = helper.make_node("QuantizeLinear", ins, ["q"], axis=1, **({} if zp is not None else {"output_dtype": elem}))
    d = helper.make_node("DequantizeLinear", ["q"] + ins[1:], ["y"], axis=1)
    g = helper.make_graph([q, d], "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])], inits)
    opset = {TensorProto.INT2: 25, TensorProto.UINT2: 25}.get(elem, 21)
    check(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), {"x": x})


def test_quantize_dequantize_float4_matches_the_onnx_reference():
    """float4e2m1 Q/DQ (onnxruntime has no kernel for it): against onnx's own reference evaluator."""
    from onnx.reference import ReferenceEvaluator
    x = F(2, 3, 5) * 2           # scale 0.1..0.5: beyond +-6 * scale saturates, the rest rounds to even
    scale = np.array([0.1, 0.25, 0.5], np.float32)
    q = helper.make_node("QuantizeLinear", ["x", "s"], ["q"], axis=1, output_dtype=TensorProto.FLOAT4E2M1)
    d = helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1)
    g = helper.make_graph([q, d], "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])],
                          [numpy_helper.from_array(scale, "s")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = interpret(import_onnx(model), {"x": x})[0]
    assert np.abs(x).max() > 6 * scale.min()     # some values saturate
    np.testing.assert_array_equal(got, want)


def test_dequantize_with_an_e8m0_scale_is_refused_by_name():
    """opset 28 lets Q/DQ take float8e8m0 (MX) scales; aotc refuses them at import, naming the type."""
    d = helper.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dq", output_dtype=TensorProto.FLOAT)
    g = helper.make_graph([d], "dq", [helper.make_tensor_value_info("q", TensorProto.INT8, [4]),
                                      helper.make_tensor_value_info("s", TensorProto.FLOAT8E8M0, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 28)])
    with pytest.raises(UnsupportedError, match="DequantizeLinear 'dq'.*x_scale dtype f8e8m0fnu"):
        import_onnx(model)
