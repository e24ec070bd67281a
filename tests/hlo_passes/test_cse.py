import numpy as np

from aotc.hlo_passes import cse, dce
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder

from ._graphs import assert_same_fresh, assert_unchanged, counts, scalar_constant, snapshot


def _dup_graph():
    b = GraphBuilder()
    x = b.input("x", (3, 5))
    c1 = scalar_constant(b, 2.0, "c1")
    c2 = scalar_constant(b, 2.0, "c2")           # same bytes as c1: merged
    e1 = b.add("exp", x)
    e2 = b.add("exp", x)                          # same op and input: merged
    t1 = b.add("transpose", x, permutation=(1, 0))
    t2 = b.add("transpose", x, permutation=(1, 0))
    s1 = b.add("mul", e1, b.add("broadcast_in_dim", c1, shape=(3, 5), broadcast_dimensions=()))
    s2 = b.add("mul", e2, b.add("broadcast_in_dim", c2, shape=(3, 5), broadcast_dimensions=()))
    y = b.add("add", s1, s2)                      # after merging: add(s, s)
    return b.build([y, b.add("neg", t1), b.add("neg", t2)])


def test_merges_duplicate_nodes_and_constants():
    g = _dup_graph()
    snap = snapshot(g)
    out = dce.run(cse.run(g))
    verify(out)
    assert_unchanged(g, snap)
    assert counts(g) == {"exp": 2, "transpose": 2, "broadcast_in_dim": 2, "mul": 2, "add": 1, "neg": 2}
    # the two neg nodes are both graph outputs: never aliased (each output keeps its own buffer)
    assert counts(out) == {"exp": 1, "transpose": 1, "broadcast_in_dim": 1, "mul": 1, "add": 1, "neg": 2}
    assert len(out.constants) == 1
    add = next(n for n in out.nodes if n.op == "add")
    assert add.inputs[0] is add.inputs[1]
    assert out.outputs[1] is not out.outputs[2]
    assert [n.inputs[0] for n in out.nodes if n.op == "neg"] == [out.nodes[1].output] * 2   # one transpose
    assert out.signature_output_names() == g.signature_output_names()
    assert_same_fresh(g, out)


def test_must_not_fire_on_different_attrs_inputs_or_values():
    b = GraphBuilder()
    x = b.input("x", (4, 4))
    y = b.input("y", (4, 4))
    a = b.add("transpose", x, permutation=(1, 0))
    c = b.add("reduce", x, axes=(0,), kind="sum")
    d = b.add("reduce", x, axes=(0,), kind="max")            # different attribute
    e = b.add("exp", x)
    f = b.add("exp", y)                                       # different input
    k1 = b.constant(np.array([0.0, 1.0], np.float32), "k1")
    k2 = b.constant(np.array([-0.0, 1.0], np.float32), "k2")  # -0.0 is not 0.0 bytewise
    g = b.build([a, c, d, e, f, k1, k2])
    out = cse.run(g)
    assert [n for n in out.nodes] == list(g.nodes)
    assert set(out.constants) == set(g.constants)
    assert_same_fresh(g, out)


def test_output_is_not_aliased_to_a_constant():
    b = GraphBuilder()
    x = b.input("x", (2,))
    k1 = b.constant(np.array([1.0, 2.0], np.float32), "k1")
    k2 = b.constant(np.array([1.0, 2.0], np.float32), "k2")
    g = b.build([b.add("add", x, k1), k2])
    out = cse.run(g)
    assert out.outputs[1] is k2 and k2 in out.constants     # k2 is an output: kept as it is
