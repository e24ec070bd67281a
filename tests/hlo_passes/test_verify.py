import numpy as np
import pytest

from aotc.errors import VerifyError
from aotc.hlo_passes.verify import verify
from aotc.ir import dtypes
from aotc.ir.graph import Graph, GraphBuilder, Node, TensorType, Value

from ._graphs import shape_chain


def _small():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    c = b.constant(np.ones((2, 3), np.float32), "c")
    y = b.add("add", x, c, name="sum")
    z = b.add("exp", y, name="e")
    return b.build([z])


def test_valid_graphs_pass():
    verify(_small())
    verify(shape_chain())


def test_wrong_stored_output_type():
    g = _small()
    n = g.nodes[1]
    bad = Value("e", TensorType((3, 2), dtypes.f32))
    g.nodes[1] = Node(n.op, n.inputs, (bad,), n.attrs, n.name)
    g.outputs = [bad]
    with pytest.raises(VerifyError) as e:
        verify(g)
    msg = str(e.value)
    assert "'e'" in msg and "(exp)" in msg and "f32[2,3]" in msg and "f32[3,2]" in msg


def test_out_of_order_node():
    g = _small()
    g.nodes.reverse()
    with pytest.raises(VerifyError, match=r"node 'e' \(exp\).*later node"):
        verify(g)


def test_undefined_input():
    g = _small()
    ghost = Value("ghost", TensorType((2, 3), dtypes.f32))
    n = g.nodes[0]
    g.nodes[0] = Node(n.op, (n.inputs[0], ghost), n.outputs, n.attrs, n.name)
    with pytest.raises(VerifyError, match=r"node 'sum' \(add\) with inputs \(%x:f32\[2,3\], "
                                          r"%ghost:f32\[2,3\]\).*%ghost is not defined"):
        verify(g)


def test_bad_constant_dtype():
    g = _small()
    (c,) = g.constants
    g.constants[c] = np.ones((2, 3), np.float64)
    with pytest.raises(VerifyError, match=r"constant %c.*float64.*f32"):
        verify(g)


def test_bad_constant_shape():
    g = _small()
    (c,) = g.constants
    g.constants[c] = np.ones((3, 2), np.float32)
    with pytest.raises(VerifyError, match=r"constant %c"):
        verify(g)


def test_rule_failure_names_node_op_and_inputs():
    g = _small()
    x = g.inputs[0]
    other = Value("w", TensorType((3, 2), dtypes.f32))
    g.inputs.append(other)
    n = g.nodes[0]
    g.nodes[0] = Node("add", (x, other), n.outputs, {}, n.name)
    with pytest.raises(VerifyError, match=r"'sum' \(add\) with inputs \(f32\[2,3\], f32\[3,2\]\).*shapes differ"):
        verify(g)


def test_unknown_op():
    g = _small()
    n = g.nodes[1]
    g.nodes[1] = Node("frobnicate", n.inputs, n.outputs, {}, n.name)
    with pytest.raises(VerifyError, match=r"'e' \(frobnicate\).*unknown primitive op"):
        verify(g)


def test_missing_attribute():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.add("reshape", x, shape=(6,), name="r")
    g = b.build([y])
    g.nodes[0] = Node("reshape", (x,), (y,), {}, "r")
    with pytest.raises(VerifyError, match=r"'r' \(reshape\).*attributes"):
        verify(g)


def test_value_defined_twice():
    g = _small()
    g.nodes.append(g.nodes[1])
    with pytest.raises(VerifyError, match=r"'e' \(exp\).*already defined"):
        verify(g)


def test_signature_rules():
    g = _small()
    g2 = Graph(g.inputs + [Value("x", TensorType((1,), dtypes.f32))], g.outputs, g.nodes, g.constants)
    with pytest.raises(VerifyError, match="input name 'x'"):
        verify(g2)
    x = g.inputs[0]
    g3 = Graph(g.inputs, g.outputs, g.nodes, {**g.constants, x: np.ones((2, 3), np.float32)})
    with pytest.raises(VerifyError, match="both a graph input and a constant"):
        verify(g3)
    g4 = Graph(g.inputs, [Value("nowhere", TensorType((1,), dtypes.f32))], g.nodes, g.constants)
    with pytest.raises(VerifyError, match="output %nowhere is not defined"):
        verify(g4)
