import numpy as np

from aotc.hlo_passes import dce
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder

from ._graphs import assert_same_results, assert_unchanged, counts, snapshot, shape_chain


def _with_dead_code():
    b = GraphBuilder()
    x = b.input("x", (4, 5))
    unused_in = b.input("unused", (3,))
    c = b.constant(np.full((4, 5), 2.0, np.float32), "c")
    dead_c = b.constant(np.arange(3, dtype=np.float32), "dead_c")
    y = b.add("mul", x, c)
    z = b.add("exp", y)
    b.add("neg", y)                              # dead: read by no one
    d2 = b.add("add", unused_in, dead_c)         # dead chain of two
    b.add("tanh", d2)
    return b.build([z, y]), unused_in


def test_removes_dead_nodes_and_constants():
    g, unused_in = _with_dead_code()
    out = dce.run(g)
    verify(out)
    assert counts(g) == {"mul": 1, "exp": 1, "neg": 1, "add": 1, "tanh": 1}
    assert counts(out) == {"mul": 1, "exp": 1}
    assert [v.name for v in out.constants] == ["c"]
    assert unused_in in out.inputs                # the signature stays
    assert all(a is b for a, b in zip(out.nodes, g.nodes[:2]))


def test_does_not_remove_used_nodes():
    g = shape_chain()
    out = dce.run(g)
    assert [n for n in out.nodes] == g.nodes
    assert list(out.constants) == list(g.constants)


def test_keeps_constant_that_is_a_graph_output():
    b = GraphBuilder()
    x = b.input("x", (2,))
    c = b.constant(np.array([3.0, 4.0], np.float32))
    y = b.add("neg", x)
    out = dce.run(b.build([y, c]))
    assert c in out.constants and out.outputs == [y, c]


def test_same_results_and_input_unchanged():
    g, _ = _with_dead_code()
    snap = snapshot(g)
    out = dce.run(g)
    assert_unchanged(g, snap)
    assert_same_results(g, out)
