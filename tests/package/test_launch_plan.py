"""Launch plan: buffer references for split-K workspaces, counters and slice views; launch descriptions."""
import numpy as np
import pytest

from aotc.compiler import generate_kernels
from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.package.launch_plan import build_launches


def plan(graph, split_k=True):
    """(kernels, launches, weights, memory) as the compiler gets them: kernels generated, then handed over."""
    regions, kernels, writes = generate_kernels(graph, partition(graph), split_k)
    return (kernels, *build_launches(graph, regions, kernels, writes))


def test_split_k_launch_gets_a_workspace_and_the_zeroed_counters():
    b = GraphBuilder()
    x, w = b.input("x", (4, 2048)), b.input("w", (2048, 64))
    d = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    graph = b.build([b.add("tanh", d)])
    kernels, launches, _, memory = plan(graph)
    (k,), (launch,) = kernels, launches
    assert k.splits == 16 and "[split-K x16]" in launch.region
    ws, counters = launch.args[-2:]
    assert ws.kind == counters.kind == "arena"
    assert ws.offset + k.workspace <= memory.size - memory.zeroed            # the workspace is not the tail
    assert counters.offset == memory.size - memory.zeroed and memory.zeroed >= 4 * k.counters
    _, unsplit, _, plain = plan(graph, split_k=False)
    assert len(unsplit[0].args) == 3 and plain.zeroed == 0


def test_slice_views_point_into_their_source():
    b = GraphBuilder()
    x = b.input("x", (6, 5))
    rows = b.add("slice", x, start=(2, 1), limit=(4, 5), stride=(1, 2))
    graph = b.build([b.add("exp", rows)])
    kernels, launches, _, _ = plan(graph)
    (launch,) = launches
    assert launch.args[0].kind == "input" and launch.args[0].offset == (2 * 5 + 1) * 4
    assert "slice view" in launch.region and kernels[0].views


def test_every_region_needs_its_kernel():
    b = GraphBuilder()
    x = b.input("x", (6, 5))
    graph = b.build([b.add("exp", b.add("tanh", x))])
    regions, kernels, writes = generate_kernels(graph, partition(graph))
    with pytest.raises(ValueError, match="1 kernels for 2 regions"):
        build_launches(graph, regions + regions, kernels, writes)


def test_an_input_read_transposed_is_not_overwritten_in_place():
    """y = x^T + x, x an intermediate last read here: writing y over x would clobber x^T's later reads."""
    from aotc.ir.interpreter import interpret
    from tests.helpers.host_run import run_on_host
    from tests.helpers.rng import fresh_rng, random_array
    dims = dict(lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    b = GraphBuilder()
    a, w, w2 = b.input("a", (64, 32)), b.input("w", (32, 64)), b.input("w2", (64, 8))
    x = b.add("dot_general", a, w, **dims)
    z = b.add("reduce", x, kind="sum", axes=(1,))       # runs before y's loop: that loop is x's last reader
    y = b.add("add", b.add("transpose", x, permutation=(1, 0)), x)
    graph = b.build([z, b.add("dot_general", y, w2, **dims)])
    kernels, _, _, memory = plan(graph)
    assert [k.region.kind for k in kernels] == ["dot", "reduction", "loop", "dot"]
    assert memory.offsets[x] != memory.offsets[y]
    rng, seed = fresh_rng()
    ins = [random_array(rng, s) for s in ((64, 32), (32, 64), (64, 8))]
    got, _, _ = run_on_host(graph, ins)
    for g, want in zip(got, interpret(graph, ins)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}")
