"""KernelBuilder and unravel: what every kernel family shares (parameters, views, the template fill)."""
import re

import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.ir import dtypes
from aotc.kernels.builder import KernelBuilder, acc_type, reduce_identity, slice_offset, unravel
from aotc.kernels.template import TemplateError
from tests.helpers.rng import fresh_rng


def _eval_c(lines: list[str], env: dict) -> dict:
    """Run `const int name = expr;` lines (non-negative ints: C's / and % are Python's // and %)."""
    for line in lines:
        m = re.fullmatch(r"\s*const (?:int|long long) (\w+) = (.+);", line)
        assert m, line
        env[m.group(1)] = eval(m.group(2).replace("/", "//"), {}, dict(env))
    return env


def _builder(graph, region=None) -> KernelBuilder:
    region = region or partition(graph)[0]
    return KernelBuilder(graph, region, graph.producers())


def _loop_graph(shape=(3, 50, 7)):
    b = GraphBuilder()
    x = b.input("x", shape)
    return b.build([b.add("tanh", b.add("mul", x, b.add("broadcast_in_dim", b.constant(np.float32(2.0)),
                                                          shape=shape, broadcast_dimensions=())))])


@pytest.mark.parametrize("shape", [(3, 50, 7), (783,), (2, 1, 5, 1), (1,)])
def test_unravel_declares_the_row_major_coordinates(shape):
    rng, seed = fresh_rng()
    em = _builder(_loop_graph()).emitter(indent=0)
    names = unravel(em, "i", shape, "o")
    assert len(names) == len(shape)
    for flat in rng.integers(0, int(np.prod(shape)), 20):
        env = _eval_c(em.lines, {"i": int(flat)})
        got = tuple(env[n] if n in env else int(n) for n in names)
        assert got == tuple(int(c) for c in np.unravel_index(flat, shape)), f"flat {flat} (seed {seed})"


def test_a_unit_dim_reads_as_zero():
    em = _builder(_loop_graph()).emitter(indent=2)
    assert unravel(em, "q", (4, 1, 3), "c") == ["c0", "0", "c2"]
    assert all(line.startswith("    const int c") for line in em.lines)


def test_scalar_constants_are_literals_not_parameters():
    graph = _loop_graph()
    b = _builder(graph)
    assert [v.name for v in b.params] == ["x"] and b.consts
    # an elementwise map of x may be written over x in place: neither pointer is __restrict__
    assert b.signature() == "const float *p0, float *out"


def test_a_sliced_input_is_read_through_a_view():
    b = GraphBuilder()
    x = b.input("x", (5, 3, 16))
    s = b.add("slice", x, start=(2, 1, 0), limit=(3, 3, 16), stride=(1, 1, 1))
    graph = b.build([b.add("neg", s)])
    kb = _builder(graph)
    (view,) = kb.params
    assert kb.views == {view: (x, slice_offset(graph.producers()[s]))}
    assert kb.views[view][1] == (2 * 3 * 16 + 1 * 16) * 4


def test_finish_names_the_kernel_by_its_text():
    graph = _loop_graph()
    k1 = _builder(graph).finish("loop", _loop_slots(graph), (1, 1, 1), (256, 1, 1))
    k2 = _builder(graph).finish("loop", _loop_slots(graph), (1, 1, 1), (256, 1, 1))
    other = _builder(_loop_graph((4, 4))).finish("loop", _loop_slots(_loop_graph((4, 4))), (1, 1, 1), (256, 1, 1))
    assert k1.name == k2.name and re.fullmatch(r"aotc_loop_[0-9a-f]{12}", k1.name)
    assert other.name != k1.name
    assert f"void __launch_bounds__(256) {k1.name}(" in k1.source
    assert "${" not in k1.source and "__aotc_kernel_name__" not in k1.source
    assert k1.params[-1] is graph.outputs[0] and k1.bytes == 2 * 3 * 50 * 7 * 4


def _loop_slots(graph):
    total = graph.outputs[0].type.size
    return dict(body="    out[i] = 0.0f;", total=total, block=256, vector="", scalar_start="0")


def test_finish_refuses_a_wrong_slot():
    graph = _loop_graph()
    slots = _loop_slots(graph)
    del slots["vector"]
    with pytest.raises(TemplateError, match="'loop.cu': slot 'vector' is not filled"):
        _builder(graph).finish("loop", slots, (1, 1, 1), (256, 1, 1))
    with pytest.raises(TemplateError, match="'loop.cu' has no slot 'vectr'"):
        _builder(graph).finish("loop", dict(slots, vector="", vectr=""), (1, 1, 1), (256, 1, 1))


@pytest.mark.parametrize("kind,dt,acc,start", [
    ("sum", dtypes.f32, "float", "0.0f"), ("max", dtypes.f16, "float", "(-AOTC_INF)"),
    ("min", dtypes.i64, "long long", "9223372036854775807LL"), ("max", dtypes.i8, "int", "-128"),
    ("prod", dtypes.i32, "int", "1"), ("min", dtypes.u8, "unsigned int", "255u")])
def test_reductions_accumulate_wide_from_their_identity(kind, dt, acc, start):
    assert acc_type(dt) == acc and reduce_identity(kind, dt) == start


def test_contiguous_dim_and_plain_operands_see_through_the_regions_transposes():
    from aotc.kernels.builder import contiguous_dim, plain_operand, simt_tile_slots
    from aotc.kernels.split_k import Tiling
    b = GraphBuilder()
    a = b.input("a", (8, 5, 6))                          # (b, m, k)
    wt = b.input("wt", (8, 7, 6))                        # stored (b, n, k), read transposed as (b, k, n)
    w = b.add("transpose", wt, permutation=(0, 2, 1))
    d = b.add("dot_general", a, w, lhs_batch=(0,), rhs_batch=(0,), lhs_contract=(2,), rhs_contract=(1,))
    graph = b.build([d])
    (region,) = [r for r in partition(graph) if r.anchor.op == "dot_general"]
    kb = _builder(graph, region)
    lhs, rhs = region.anchor.inputs
    assert contiguous_dim(kb, lhs) == 2 and plain_operand(kb, lhs)
    assert rhs is w                                       # the transpose is index math in the region
    assert contiguous_dim(kb, rhs) == 1 and not plain_operand(kb, rhs)
    assert simt_tile_slots(Tiling(64, 64), True, dtypes.f32)["b_kk"] == "(threadIdx.x & 15)"
    assert simt_tile_slots(Tiling(64, 64), False, dtypes.f32)["b_nn"] == "(threadIdx.x & 63)"
    narrow = simt_tile_slots(Tiling(32, 32), False, dtypes.f32)     # 64 threads: 2 k rows of 32 n a pass
    assert narrow["b_nn"] == "(threadIdx.x & 31)" and narrow["b_kk"] == "((threadIdx.x >> 5) + 2 * l)"
    assert narrow["b_loads"] == 8 and narrow["threads"] == 64
