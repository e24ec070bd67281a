"""The memory plan: no two simultaneously live buffers overlap; size vs lower bound."""
import secrets

import numpy as np

from aotc.package.memory_plan import ALIGN, Buffer, align_up, lower_bound, plan_memory


def overlaps(a0, a1, b0, b1):
    return a0 < b1 and b0 < a1


def test_random_plans_never_overlap_live_buffers():
    seed = secrets.randbelow(2**31)
    rng = np.random.default_rng(seed)
    for _ in range(50):
        bufs = []
        for i in range(int(rng.integers(1, 30))):
            first = int(rng.integers(0, 20))
            bufs.append(Buffer(i, int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
        plan = plan_memory(bufs)
        assert plan.size >= plan.lower_bound == lower_bound(bufs)
        for a in bufs:
            oa = plan.offsets[a.key]
            assert oa % ALIGN == 0 and oa + a.size <= plan.size
            for b in bufs:
                if a.key < b.key and a.first <= b.last and b.first <= a.last:
                    ob = plan.offsets[b.key]
                    assert not overlaps(oa, oa + a.size, ob, ob + b.size), f"seed {seed}: {a} {b}"


def test_disjoint_lifetimes_share_memory():
    bufs = [Buffer("a", 1000, 0, 1), Buffer("b", 1000, 2, 3), Buffer("c", 1000, 4, 5)]
    plan = plan_memory(bufs)
    assert plan.size == align_up(1000) == plan.lower_bound
    assert len(set(plan.offsets.values())) == 1


def test_chain_needs_two_buffers():
    # a -> b -> c: each step reads the previous buffer while writing the next
    bufs = [Buffer("a", 512, 0, 1), Buffer("b", 512, 1, 2), Buffer("c", 512, 2, 3)]
    plan = plan_memory(bufs)
    assert plan.size == 2 * 512 == plan.lower_bound
    assert plan.offsets["a"] == plan.offsets["c"] != plan.offsets["b"]


def test_empty_plan():
    plan = plan_memory([])
    assert plan.size == 0 and plan.lower_bound == 0 and plan.ratio == 1.0


# --------------------------------------------------------- in-place reuse --

def test_in_place_chain_shares_one_slot():
    # a -> b -> c, each an elementwise map of the previous one at its last use
    bufs = [Buffer("a", 512, 0, 1), Buffer("b", 512, 1, 2, reuses="a"), Buffer("c", 512, 2, 3, reuses="b")]
    plan = plan_memory(bufs)
    assert plan.in_place == 2 and plan.size == 512 == plan.lower_bound
    assert plan.offsets["a"] == plan.offsets["b"] == plan.offsets["c"]


def test_in_place_refused_when_unsafe():
    cases = [
        [Buffer("a", 512, 0, 2), Buffer("b", 512, 1, 3, reuses="a")],     # a still read after step 1
        [Buffer("a", 256, 0, 1), Buffer("b", 512, 1, 2, reuses="a")],     # different size
        [Buffer("a", 512, 0, 1), Buffer("b", 512, 1, 2, reuses="zz")],    # unknown buffer
    ]
    for bufs in cases:
        plan = plan_memory(bufs)
        assert plan.in_place == 0 and plan.offsets["a"] != plan.offsets["b"], bufs


def test_two_claims_on_one_buffer_get_one_slot_each():
    bufs = [Buffer("a", 512, 0, 1), Buffer("b", 512, 1, 2, reuses="a"), Buffer("c", 512, 1, 2, reuses="a")]
    plan = plan_memory(bufs)
    assert plan.in_place == 1 and plan.offsets["b"] != plan.offsets["c"]


def test_random_plans_with_reuse_never_overlap_live_buffers():
    seed = secrets.randbelow(2**31)
    rng = np.random.default_rng(seed)
    for _ in range(50):
        bufs = []
        for i in range(int(rng.integers(1, 25))):
            first = int(rng.integers(0, 15))
            last = first + int(rng.integers(0, 5))
            src = [b for b in bufs if b.last == first and b.first < first]
            reuse = src[0].key if src and rng.random() < 0.7 else None
            size = src[0].size if reuse is not None else int(rng.integers(1, 3000))
            bufs.append(Buffer(i, size, first, last, reuse))
        plan = plan_memory(bufs)
        assert plan.size >= plan.lower_bound
        for a in bufs:
            for b in bufs:
                if a.key < b.key and a.first <= b.last and b.first <= a.last:
                    oa, ob = plan.offsets[a.key], plan.offsets[b.key]
                    if overlaps(oa, oa + a.size, ob, ob + b.size):
                        # only an honoured in-place pair may share bytes
                        assert b.reuses == a.key and a.last == b.first and oa == ob, f"seed {seed}"


def _region_case(transpose=False, convert=False):
    from aotc.fusion.region import Region
    from aotc.ir.graph import GraphBuilder
    b = GraphBuilder()
    x = b.input("x", (8, 8))
    bias = b.input("bias", (8,))
    a = b.add("exp", x)                              # materialized by an earlier launch
    src = b.add("transpose", a, permutation=(1, 0)) if transpose else a
    t = b.add("add", src, b.add("broadcast_in_dim", bias, shape=(8, 8), broadcast_dimensions=(1,)))
    r = b.add("convert", b.add("tanh", t), dtype="f16") if convert else b.add("tanh", t)
    graph = b.build([r])
    prod = graph.producers()
    nodes = [n for n in graph.nodes if n is not prod[a]]
    region = Region("loop", r, nodes, inputs=[a, bias])

    class K:
        params = [a, bias, r]
    return region, K, a, r


def test_in_place_input_only_for_pure_elementwise_maps():
    from aotc.package.launch_plan import in_place_input
    region, k, a, r = _region_case()
    assert in_place_input(region, k, {a: 0, r: 1}, {a: 1, r: 2}) is a
    assert in_place_input(region, k, {a: 0, r: 1}, {a: 2, r: 2}) is None          # read later
    region, k, a, r = _region_case(transpose=True)                              # index math on a
    assert in_place_input(region, k, {a: 0, r: 1}, {a: 1, r: 2}) is None
    region, k, a, r = _region_case(convert=True)                                # f32 -> f16: sizes differ
    assert in_place_input(region, k, {a: 0, r: 1}, {a: 1, r: 2}) is None


def test_e2e_models_arena_within_5_percent_of_bound():
    import aotc.compiler
    from aotc.bench.models.small import MODELS
    for name, build in MODELS.items():
        model, _ = build()
        res = aotc.compiler.compile_model(model, arch="none", host=False)
        assert 0 < res.arena_lower_bound <= res.plan.arena_size <= 1.05 * res.arena_lower_bound, name


def test_an_arena_larger_than_a_gpu_is_refused():
    """Two 100 GiB buffers live at once: each would fit a GPU, the arena (200 GiB) does not."""
    import pytest

    from aotc.errors import ModelError
    from aotc.package.memory_plan import DEVICE_MEMORY_LIMIT
    gib = 1 << 30
    assert plan_memory([Buffer("a", 100 * gib, 0, 1), Buffer("b", 100 * gib, 2, 3)]).size == 100 * gib
    with pytest.raises(ModelError, match=r"the activation arena needs 200\.0 GiB .* limit is 141 GiB"):
        plan_memory([Buffer("a", 100 * gib, 0, 2), Buffer("b", 100 * gib, 1, 3)])
    assert plan_memory([Buffer("a", DEVICE_MEMORY_LIMIT, 0, 1)]).size == DEVICE_MEMORY_LIMIT


def test_graph_tensors_and_weights_are_checked_against_the_limit():
    """check_graph_fits names a tensor too large for a GPU (input, node output), then the weights' total."""
    import pytest

    from aotc.errors import ModelError
    from aotc.ir import dtypes
    from aotc.ir.graph import Graph, GraphBuilder, TensorType, Value
    from aotc.package.memory_plan import check_graph_fits
    b = GraphBuilder()
    x = b.input("x", (2**20, 2**20, 64))
    with pytest.raises(ModelError, match=r"tensor 'x' f32\[1048576,1048576,64\] needs 262,144\.0 GiB .*141 GiB"):
        check_graph_fits(b.build([x]))
    b = GraphBuilder()
    y = b.add("broadcast_in_dim", b.input("s", (1,)), shape=(2**36,), broadcast_dimensions=(0,), name="wide")
    with pytest.raises(ModelError, match=r"tensor 'wide' f32\[68719476736\] needs 256\.0 GiB"):
        check_graph_fits(b.build([y]))
    # the values of constants are never read: Values of 80 GiB each stand for them
    c, d = (Value(n, TensorType((20 * 2**30,), dtypes.f32)) for n in ("w1", "w2"))
    check_graph_fits(Graph([], [c], [], {c: None}))
    with pytest.raises(ModelError, match=r"the weights \(all constants together\) needs 160\.0 GiB"):
        check_graph_fits(Graph([], [c, d], [], {c: None, d: None}))
