"""A loop kernel whose output may be written over an input declares neither pointer `__restrict__`.

Two restrict pointers to one buffer are undefined behaviour, and NVRTC may read
a `const __restrict__` input through the non-coherent path (ld.global.nc),
which need not see the kernel's own stores. The launch plan only writes in
place over an input the kernel declared may alias (aliasing.may_alias_output).
"""
from __future__ import annotations

import re

import numpy as np

from aotc.fusion.region import Region
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from aotc.kernels.aliasing import may_alias_output
from aotc.kernels.nvrtc_compile import compile_device
from aotc.compiler import generate_kernels
from aotc.package.launch_plan import build_launches
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array


def _three_regions(transpose: bool = False):
    """exp(x) -> tanh(a + bias) -> row sums, as three regions; the middle one may run in place over a."""
    b = GraphBuilder()
    x, bias = b.input("x", (16, 16)), b.input("bias", (16,))
    a = b.add("exp", x)
    src = b.add("transpose", a, permutation=(1, 0)) if transpose else a
    t = b.add("add", src, b.add("broadcast_in_dim", bias, shape=(16, 16), broadcast_dimensions=(1,)))
    r = b.add("tanh", t)
    o = b.add("reduce", r, kind="sum", axes=(1,))
    graph = b.build([o])
    prod = graph.producers()
    first = Region("loop", a, [prod[a]], inputs=[x])
    middle = Region("loop", r, [n for n in graph.nodes if n not in (prod[a], prod[o])], inputs=[a, bias])
    last = Region("reduction", o, [prod[o]], anchor=prod[o], inputs=[r])
    return graph, [first, middle, last], a, bias


def _declaration(source: str, kernel_name: str) -> str:
    return re.search(rf"{kernel_name}\(([^)]*)\)", source).group(1)


def _plan(graph, regions):
    regions, kernels, writes = generate_kernels(graph, regions)
    launches, _, memory = build_launches(graph, regions, kernels, writes)
    return launches, memory


def test_in_place_kernel_has_no_restrict_on_the_aliased_pair():
    graph, regions, a, bias = _three_regions()
    kernel = codegen.generate(graph, regions[1])
    assert may_alias_output(regions[1], kernel.params[:-1]) == [a]
    decl = _declaration(kernel.source, kernel.name)
    names = {v: f"p{i}" for i, v in enumerate(kernel.params[:-1])}
    assert f"const float *{names[a]}" in decl and "__restrict__ out" not in decl, decl
    assert f"const float *__restrict__ {names[bias]}" in decl, "a non-aliased input keeps restrict"
    assert "__ldg" not in kernel.source
    # the plan does write it in place, and the GPU build still compiles
    _, memory = _plan(graph, regions)
    assert memory.in_place == 1
    assert compile_device(codegen.module_source([kernel]), "sm_80")[:4] == b"\x7fELF"


def test_in_place_kernel_computes_the_right_values():
    rng, seed = fresh_rng()
    graph, regions, _, _ = _three_regions()
    feeds = [random_array(rng, (16, 16), np.float32, -2, 2), random_array(rng, (16,), np.float32, -1, 1)]
    got, _, _ = run_on_host(graph, feeds, regions=regions, runs=2)
    np.testing.assert_allclose(got[0], interpret(graph, feeds)[0], rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")


def test_kernel_that_cannot_run_in_place_keeps_restrict():
    """A transposed read of a: element i of out needs element j of a, so they never alias."""
    graph, regions, _, _ = _three_regions(transpose=True)
    kernel = codegen.generate(graph, regions[1])
    assert may_alias_output(regions[1], kernel.params[:-1]) == []
    decl = _declaration(kernel.source, kernel.name)
    assert decl.count("__restrict__") == len(kernel.params), decl
    _, memory = _plan(graph, regions)
    assert memory.in_place == 0
