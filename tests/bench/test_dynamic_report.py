"""bench/dynamic_report.py: the cost of what a dynamic engine runs at one shape, against a static engine there."""
import aotc
from aotc.bench.models.small import mlp
from aotc.bench.models.zoo import with_dynamic_axes
from aotc.compiler import load_graph
from aotc.ir import dims as D
from aotc.ir.specialize import specialize
from bench.dynamic_report import dynamic_cost, main


def test_dynamic_cost_matches_a_static_engine_at_the_same_shape():
    model, _ = with_dynamic_axes(mlp(batch=3), axes=("batch",))
    ranges = {"batch": (1, 64)}
    dyn = aotc.compile(model, arch="none", host=False, dynamic=ranges)
    graph = load_graph(model, dynamic=ranges)
    for b in (1, 5, 64):
        nbytes, flops, launches = dynamic_cost(dyn.plan, {"batch": b})
        with D.dim_ranges(graph.dims):
            fixed = specialize(graph, {"batch": b})
        fixed.dims = {}
        static = aotc.compile(fixed, arch="none", host=False).plan
        assert launches == len(static.launches)
        assert abs(flops - sum(ln.flops for ln in static.launches)) <= 0.02 * flops   # static folds a few
        # never above the static engine by more than 10% (it can be below: a static engine folds a bias's
        # broadcast into an activation-sized constant and reads that)
        assert nbytes <= 1.10 * sum(ln.bytes for ln in static.launches)
    small, big = dynamic_cost(dyn.plan, {"batch": 1}), dynamic_cost(dyn.plan, {"batch": 64})
    assert small[0] < big[0] and small[1] * 64 == big[1]      # sizes really follow the shape


def test_unknown_model_is_refused(capsys):
    assert main(["nope"]) == 2 and "unknown model" in capsys.readouterr().err
