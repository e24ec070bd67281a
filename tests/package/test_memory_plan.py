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
