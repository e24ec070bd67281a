"""Graph construction, use lists and the interpreter."""
import numpy as np
import pytest

from aotc.errors import InputError, VerifyError
from aotc.ir import dtypes
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret


def small_graph():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    c = b.constant(np.float32(2.0), "two")
    cb = b.add("broadcast_in_dim", c, shape=(2, 3), broadcast_dimensions=())
    y = b.add("mul", x, cb)
    s = b.add("reduce", y, kind="sum", axes=(1,))
    return b.build([s, y]), x, y


def test_builder_infers_types_and_names_are_unique():
    g, x, y = small_graph()
    assert y.type.shape == (2, 3) and y.dtype is dtypes.f32
    names = [v.name for n in g.nodes for v in n.outputs] + [v.name for v in g.inputs]
    assert len(names) == len(set(names))
    assert g.users()[y][0].op == "reduce" and g.producers()[y].op == "mul"
    assert "reduce" in str(g) and g.count("mul") == 1


def test_scalar_constants_stay_scalar():
    b = GraphBuilder()
    c = b.constant(np.float32(1.5))
    assert c.shape == () and b.constants[c].shape == ()


def test_builder_rejects_bad_node():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(VerifyError, match="transpose"):
        b.add("transpose", x, permutation=(0,))


def test_interpret_runs_graph_and_checks_inputs():
    g, _, _ = small_graph()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    s, y = interpret(g, {"x": x})
    np.testing.assert_allclose(y, 2 * x)
    np.testing.assert_allclose(s, (2 * x).sum(1), rtol=1e-6)
    with pytest.raises(InputError, match="input 'x'"):
        interpret(g, {"x": x.T.copy()})
    with pytest.raises(InputError, match="missing input 'x'"):
        interpret(g, {})
