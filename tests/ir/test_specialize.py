"""Binding dims from input shapes and specializing a dynamic graph (aotc/ir/specialize.py)."""
import numpy as np
import pytest

from aotc.errors import InputError
from aotc.ir.dims import DimRange, sym
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.ir.specialize import bind_dims, specialize

B, S = sym("batch"), sym("seq")


def _graph():
    b = GraphBuilder("g")
    x = b.input("x", (B, S, 4))
    m = b.input("m", (B, S), "f32")
    y = b.add("reshape", x, shape=(B * S, 4))
    y = b.add("reshape", b.add("tanh", y), shape=(B, S, 4))
    s = b.add("reduce", y, axes=(2,), kind="sum")
    g = b.build([b.add("add", s, m)])
    g.dims = {"batch": DimRange(1, 8), "seq": DimRange(2, 16, 2)}
    return g


def test_interpreter_runs_at_the_given_shapes():
    g = _graph()
    rng = np.random.default_rng(0)
    for bs, ss in ((1, 2), (3, 6), (8, 16)):
        x, m = rng.standard_normal((bs, ss, 4)).astype(np.float32), rng.standard_normal((bs, ss)).astype(np.float32)
        (out,) = interpret(g, {"x": x, "m": m})
        np.testing.assert_allclose(out, np.tanh(x).sum(-1) + m, rtol=1e-6)


def test_specialize_replaces_types_and_attributes():
    g = specialize(_graph(), {"batch": 3, "seq": 4})
    assert g.inputs[0].shape == (3, 4, 4) and g.outputs[0].shape == (3, 4)
    assert g.nodes[0].attrs["shape"] == (12, 4) and not g.dims and not g.is_dynamic


def test_bind_dims_names_every_inconsistency():
    g = _graph()
    assert bind_dims(g, {"x": (2, 4, 4), "m": (2, 4)}) == {"batch": 2, "seq": 4}
    with pytest.raises(InputError, match=r"input 'm' dim 0 \(batch\) is 3 but input 'x' gives batch = 2"):
        bind_dims(g, {"x": (2, 4, 4), "m": (3, 4)})
    with pytest.raises(InputError, match=r"input 'x' dim 0 \(batch\) is 9, outside 1\.\.8"):
        bind_dims(g, {"x": (9, 4, 4)})
    with pytest.raises(InputError, match=r"dim 1 \(seq\) is 5, outside 2\.\.16 \(multiple of 2\)"):
        bind_dims(g, {"x": (1, 5, 4)})
    with pytest.raises(InputError, match="expected rank 3"):
        bind_dims(g, {"x": (1, 4)})
    with pytest.raises(InputError, match=r"input 'x' dim 2 is 5, expected 4"):
        bind_dims(g, {"x": (1, 4, 5)})
