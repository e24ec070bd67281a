"""Import-time evaluation: constant chains evaluate, input-dependent ones name the input."""
import numpy as np

from aotc.importers.static_values import StaticValues
from aotc.ir.graph import GraphBuilder


def test_constant_chain_evaluates_and_input_dependence_names_the_input():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    shape = b.constant(np.array([2, 3], np.int64))
    doubled = b.add("add", shape, shape)
    first = b.add("slice", doubled, start=(0,), limit=(1,), stride=(1,))
    dep = b.add("exp", x)
    values = StaticValues(b)
    got, leaf = values.evaluate(first)
    assert leaf is None and got.tolist() == [4]
    assert values.evaluate(first)[0] is got                 # memoized
    got, leaf = values.evaluate(b.add("neg", dep))
    assert got is None and leaf is x
