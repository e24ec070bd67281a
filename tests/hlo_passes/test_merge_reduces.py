"""merge-reduces: Qwen3's per-head Q and K statistics, column windows of one QKV result, become one reduction."""
from aotc.hlo_passes import merge_reduces
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder

from ._graphs import assert_same_fresh, assert_unchanged, counts, scalar_constant, snapshot


def _head_stats(b, x, start, heads, dh, op="pow"):
    """RMSNorm statistics per head of X[..., start:start + heads*dh] (sum of squares over dh)."""
    lead = x.shape[:-1]
    w = b.add("slice", x, start=(0,) * len(lead) + (start,), limit=tuple(lead) + (start + heads * dh,),
              stride=(1,) * (len(lead) + 1))
    v = b.add("reshape", w, shape=tuple(lead) + (heads, dh))
    two = b.add("broadcast_in_dim", scalar_constant(b, 2.0, "two"), shape=v.shape, broadcast_dimensions=())
    sq = b.add("pow", v, two) if op == "pow" else b.add("mul", v, v)
    return b.add("reduce", sq, axes=(len(lead) + 1,), kind="sum")


def test_q_and_k_statistics_of_one_projection_become_one_reduction():
    b = GraphBuilder()
    x = b.input("qkv", (2, 5, 4 * 8 + 2 * 8 + 2 * 8))
    q = _head_stats(b, x, 0, 4, 8)
    k = _head_stats(b, x, 32, 2, 8)
    g = b.build([b.add("sqrt", q), b.add("exp", k)])
    snap = snapshot(g)
    out = merge_reduces.run(g)
    verify(out)
    assert_unchanged(g, snap)
    assert out.outputs == g.outputs
    reduces = [n for n in out.nodes if n.op == "reduce"]
    live = [n for n in reduces if any(v in {i for m in out.nodes for i in m.inputs} for v in n.outputs)]
    (joint,) = live
    assert joint.outputs[0].shape == (2, 5, 6)
    assert_same_fresh(g, out, rtol=1e-6)


def test_windows_that_do_not_touch_or_differ_stay_apart():
    b = GraphBuilder()
    x = b.input("qkv", (1, 3, 64))
    gap = [_head_stats(b, x, 0, 2, 8), _head_stats(b, x, 24, 2, 8)]          # 16..24 between them
    y = b.input("y", (1, 3, 64))
    other = [_head_stats(b, y, 0, 2, 8), _head_stats(b, y, 16, 2, 8, op="mul")]   # x**2 vs x*x
    z = b.input("z", (1, 3, 64))
    sizes = [_head_stats(b, z, 0, 2, 8), _head_stats(b, z, 16, 1, 16)]        # head sizes 8 and 16
    g = b.build([b.add("add", gap[0], gap[1]), b.add("add", other[0], other[1]),
                 b.add("add", sizes[0], b.add("broadcast_in_dim", sizes[1], shape=(1, 3, 2),
                                                broadcast_dimensions=(0, 1, 2)))])
    out = merge_reduces.run(g)
    assert [n.op for n in out.nodes] == [n.op for n in g.nodes]
    assert counts(out)["reduce"] == 6


def test_qwen3_attention_keeps_one_statistics_kernel_per_layer():
    """After the pipeline, the joint statistics are one reduction region; the norms themselves run in the
    attention kernel's prologue."""
    from aotc.fusion.regions import partition
    from aotc.hlo_passes.pipeline import run_pipeline
    b = GraphBuilder()
    x = b.input("qkv", (1, 6, 48))
    q = _head_stats(b, x, 0, 2, 8)
    k = _head_stats(b, x, 16, 2, 8)
    g = b.build([b.add("add", q, k)])
    opt, _ = run_pipeline(g)
    assert sum(1 for r in partition(opt) if r.kind == "reduction") == 1
    assert_same_fresh(g, opt, rtol=1e-6)
