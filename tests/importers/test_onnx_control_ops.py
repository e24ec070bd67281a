"""If with a condition known at import time folds to the taken branch; otherwise a clear error."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aotc.errors import UnsupportedError
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from tests.helpers.rng import fresh_rng, random_array


def if_model(cond_from_input: bool, cond_value: bool = True):
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3, 4])])
    nodes, inits, inputs = [], [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])]
    if cond_from_input:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    else:                          # computed from a static shape, as exporters do
        nodes += [helper.make_node("Shape", ["x"], ["s"]),
                  helper.make_node("ReduceSum", ["s"], ["n"], keepdims=0),
                  helper.make_node("Equal", ["n", "seven"], ["c"])]
        inits.append(onnx.numpy_helper.from_array(np.array(7 if cond_value else 8, np.int64), "seven"))
    nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="branch"))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("cond", [True, False])
def test_constant_condition_inlines_the_taken_branch(cond):
    rng, seed = fresh_rng()
    g = import_onnx(if_model(False, cond))
    assert not any(n.op == "If" for n in g.nodes)
    x = random_array(rng, (3, 4))
    want = x * x if cond else -x
    np.testing.assert_allclose(interpret(g, {"x": x})[0], want, rtol=1e-6, err_msg=f"seed {seed}")


def test_input_dependent_condition_is_a_clear_error():
    with pytest.raises(UnsupportedError, match="If 'branch'.*condition depends on a model input"):
        import_onnx(if_model(True))
