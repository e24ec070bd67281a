import numpy as np
import pytest

from aotc.errors import VerifyError
from aotc.hlo_passes import infer_shapes
from aotc.hlo_passes.verify import verify
from aotc.ir import dtypes
from aotc.ir.graph import Graph, GraphBuilder, Node, TensorType, Value
from aotc.ir.interpreter import interpret

from ._graphs import scalar_constant, assert_same_results, assert_unchanged, counts, random_inputs, shape_chain, snapshot


def _chain(shape=(2, 3)):
    b = GraphBuilder()
    x = b.input("x", shape)
    c = scalar_constant(b, 0.5, "half")
    h = b.add("broadcast_in_dim", c, shape=shape, broadcast_dimensions=())
    y = b.add("mul", x, h, name="scaled")
    z = b.add("exp", y, name="e")
    r = b.add("reduce", z, axes=(1,), kind="sum", name="r")
    return b, b.build([r, z])


def _loosen(g: Graph) -> Graph:
    """The same program with 'scaled' and everything after it typed f32[1] (as a sloppy importer might)."""
    remap = {}
    nodes = []
    for n in g.nodes:
        ins = tuple(remap.get(v, v) for v in n.inputs)
        if n.name in ("scaled", "e", "r"):
            for v in n.outputs:
                remap[v] = Value(v.name, TensorType((1,), dtypes.f32))
        nodes.append(Node(n.op, ins, tuple(remap.get(v, v) for v in n.outputs), n.attrs, n.name))
    return Graph(list(g.inputs), [remap.get(v, v) for v in g.outputs], nodes, dict(g.constants))


def test_fixes_loose_types():
    _, good = _chain()
    loose = _loosen(good)
    with pytest.raises(VerifyError):
        verify(loose)
    out = infer_shapes.run(loose)
    verify(out)
    assert counts(out) == counts(good)
    assert [v.type for v in out.outputs] == [v.type for v in good.outputs]
    assert [v.name for v in out.outputs] == ["r", "e"]
    assert out.nodes[0] is loose.nodes[0]             # the broadcast was right: same Node
    assert out.nodes[1] is not loose.nodes[1]
    assert out.nodes[2].inputs[0] is out.nodes[1].output   # uses are remapped
    feeds = random_inputs(good, 7)
    for w, o in zip(interpret(good, feeds), interpret(out, feeds)):
        np.testing.assert_allclose(o, w, rtol=1e-6)


def test_does_not_fire_on_consistent_graph():
    for g in (_chain()[1], shape_chain()):
        out = infer_shapes.run(g)
        assert out is not g
        assert all(a is b for a, b in zip(out.nodes, g.nodes)) and len(out.nodes) == len(g.nodes)
        assert out.outputs == g.outputs and out.inputs == g.inputs
        assert list(out.constants) == list(g.constants)


def test_input_shape_override():
    _, g = _chain((2, 3))
    # the broadcast's shape attribute still says (2, 3): the failing rule names the node
    with pytest.raises(VerifyError, match=r"'scaled' \(mul\) with inputs \(f32\[5,3\], f32\[2,3\]\)"):
        infer_shapes.with_input_shapes(g, {"x": (5, 3)})
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.add("tanh", x)
    z = b.add("reduce", y, axes=(0,), kind="max")
    g2 = b.build([z])
    out2 = infer_shapes.with_input_shapes(g2, {"x": (7, 3)})
    verify(out2)
    assert out2.inputs[0].shape == (7, 3) and out2.outputs[0].shape == (3,)
    feeds = random_inputs(out2, 3)
    np.testing.assert_allclose(interpret(out2, feeds)[0], np.tanh(feeds["x"]).max(axis=0), rtol=1e-6)
    with pytest.raises(Exception, match="no graph input named"):
        infer_shapes.with_input_shapes(g2, {"y": (1,)})


def test_override_contradicting_an_attribute_raises():
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    y = b.add("reshape", x, shape=(12,), name="flat")
    g = b.build([y])
    with pytest.raises(VerifyError, match=r"'flat' \(reshape\).*cannot reshape"):
        infer_shapes.with_input_shapes(g, {"x": (3, 6)})


def test_same_results_and_input_unchanged():
    _, g = _chain()
    loose = _loosen(g)
    for graph in (g, loose):
        snap = snapshot(graph)
        out = infer_shapes.run(graph)
        assert_unchanged(graph, snap)
    assert_same_results(g, infer_shapes.run(g))
    assert_same_results(g, infer_shapes.run(loose))
