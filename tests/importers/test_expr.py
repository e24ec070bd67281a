"""The importers' expression helper: operators and methods emit the IR nodes the formula says, numbers broadcast."""
import numpy as np
import pytest

from aotc.importers.expr import Ex
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.rng import fresh_rng


class _Ctx:
    """The two methods Ex needs, as both importers' contexts provide them."""

    def __init__(self, b):
        self.b = b

    def add(self, op, *inputs, **attrs):
        return self.b.add(op, *inputs, **attrs)

    def const(self, array, dtype=None):
        return self.b.constant(np.asarray(array), dtype=dtype)


def _run(build, *arrays):
    b = GraphBuilder()
    ins = [b.input(f"x{i}", a.shape) for i, a in enumerate(arrays)]
    out = build(_Ctx(b), *ins)
    graph = b.build([out.v if isinstance(out, Ex) else out], ["y"])
    return interpret(graph, list(arrays))[0], graph


def test_a_formula_matches_numpy():
    rng = fresh_rng()[0]
    x = rng.standard_normal((3, 50)).astype(np.float32)
    y = rng.standard_normal((3, 50)).astype(np.float32)

    def gelu_like(cx, a, b):
        e = Ex(cx, a)
        return (0.5 * e * (1.0 + (e * 0.7978845608).tanh()) - Ex(cx, b) / 2.0 + (-e).exp()).max(0.25).min(b)

    got, _ = _run(gelu_like, x, y)
    want = np.minimum(np.maximum(0.5 * x * (1 + np.tanh(x * 0.7978845608)) - y / 2 + np.exp(-x), 0.25), y)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reversed_operands_keep_their_order():
    x = fresh_rng()[0].uniform(1.0, 2.0, (4,)).astype(np.float32)
    got, _ = _run(lambda cx, a: (3.0 - Ex(cx, a)) / (1.0 / Ex(cx, a)), x)
    np.testing.assert_allclose(got, (3.0 - x) * x, rtol=1e-6)


def test_compare_and_where_select_per_element():
    x = fresh_rng()[0].standard_normal((5, 7)).astype(np.float32)

    def relu6(cx, a):
        e = Ex(cx, a)
        return e.where(e.cmp("LT", 6.0), 6.0).where(e.cmp("GT", 0.0), 0.0)

    got, graph = _run(relu6, x)
    np.testing.assert_array_equal(got, np.clip(x, 0, 6))
    assert sum(n.op == "select" for n in graph.nodes) == 2


def test_numbers_take_the_operand_dtype_and_scalars_stay_scalars():
    b = GraphBuilder()
    cx = _Ctx(b)
    s = b.input("s", ())
    h = b.input("h", (2, 3), "f16")
    assert (Ex(cx, s) + 1).v.shape == ()
    assert not any(n.op == "broadcast_in_dim" for n in b.nodes)     # a scalar operand needs no broadcast
    y = Ex(cx, h) * 2
    assert y.v.shape == (2, 3) and y.v.dtype.name == "f16"
    assert [n.op for n in b.nodes][-2:] == ["broadcast_in_dim", "mul"]


def test_unary_ops_are_methods_and_others_attribute_errors():
    b = GraphBuilder()
    e = Ex(_Ctx(b), b.input("x", (2,)))
    flags = Ex(_Ctx(b), b.input("m", (2,), "bool"))
    assert e.rsqrt().v.shape == (2,) and flags.un("not").v.dtype.name == "bool"
    assert [n.op for n in b.nodes] == ["rsqrt", "not"]
    with pytest.raises(AttributeError, match="not a unary IR op"):
        e.frobnicate()
