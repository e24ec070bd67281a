"""The attention pattern finder: structure only; the kernel's head-size limit is a fusion rule."""
from aotc.fusion.regions import partition
from aotc.fusion.rules.attention import MAX_HEAD_DIM, attention_fits
from aotc.patterns.attention import find_attention, free_dim
from tests.kernels.test_codegen_attention import attention_graph


def test_finds_the_pattern_with_its_sizes():
    graph = attention_graph(2, 3, 5, 7, 16, 24)
    (match,) = find_attention(graph).values()
    assert (match.batch_shape, match.sq, match.sk, match.dh, match.dv) == ((2, 3), 5, 7, 16, 24)
    assert match.qk in match.nodes and match.pv in match.nodes
    assert free_dim(match.qk, "lhs") == 2 and free_dim(match.pv, "rhs") == 3


def test_a_head_too_large_for_the_kernel_is_still_attention():
    """Passes see the pattern whatever the head size; fusion leaves it to the GEMM kernels past the limit."""
    graph = attention_graph(1, 2, 8, 8, MAX_HEAD_DIM + 8, 8)
    (match,) = find_attention(graph).values()
    assert not attention_fits(match)
    assert find_attention(graph, attention_fits) == {}
    kinds = [r.kind for r in partition(graph)]
    assert "attention" not in kinds and kinds.count("dot") == 2
    (fits,) = find_attention(attention_graph(1, 2, 8, 8, MAX_HEAD_DIM, 8), attention_fits).values()
    assert attention_fits(fits)


def test_an_integer_attention_matches_with_its_quantized_probabilities():
    from tests.kernels.test_codegen_attention_int8 import int8_attention_graph
    graph, _, _ = int8_attention_graph(2, 3, 5, 7, 16, 24)
    (match,) = find_attention(graph).values()
    assert match.quantized and match.p_row_sum is None
    assert graph.producers()[match.probs].op == "div"                       # P, before QuantizeLinear
    pq = match.pv.inputs[0]
    assert pq.dtype.name == "i8" and graph.producers()[pq] in match.nodes    # q(P) is computed in the kernel


def test_float_attention_is_not_quantized():
    (match,) = find_attention(attention_graph(2, 3, 5, 7, 16, 24)).values()
    assert not match.quantized and match.probs is None


def test_zero_point_row_sums_of_the_probabilities_join_the_match():
    from tests.kernels.test_codegen_attention_int8 import int8_attention_graph
    graph, _, _ = int8_attention_graph(1, 2, 8, 9, 16, 16, zero_points=True)
    (match,) = find_attention(graph).values()
    reduce = graph.producers()[match.p_row_sum]
    assert reduce.op == "reduce" and reduce in match.nodes
    assert graph.producers()[reduce.inputs[0]].inputs[0] is match.pv.inputs[0]


def test_an_integer_attention_with_a_large_head_says_why():
    from aotc.fusion.rules.attention import attention_refusal
    from aotc.patterns.attention import refusals
    from tests.kernels.test_codegen_attention_int8 import int8_attention_graph
    graph, _, _ = int8_attention_graph(1, 2, 8, 8, MAX_HEAD_DIM + 8, 8)
    (match,) = find_attention(graph).values()
    why = f"int8 attention not fused: head dims {MAX_HEAD_DIM + 8}/8 exceed {MAX_HEAD_DIM}"
    assert attention_refusal(match) == why and refusals(graph, attention_refusal) == {match.pv: why}
    assert "attention" not in [r.kind for r in partition(graph)]


def test_an_fp8_attention_stays_on_the_fp8_gemms_and_says_why():
    """ModelOpt's fp8 BERT: e4m3 Q, K, V and probabilities, f32 sums. The attention kernel is integer only."""
    import numpy as np
    from aotc.fusion.regions import explain
    from aotc.ir.graph import GraphBuilder
    from tests.kernels.test_codegen import _softmax
    g = GraphBuilder()
    q, k, v = (g.input(n, (1, 2, 8, 16), "f8e4m3fn") for n in "qkv")
    s = g.add("dot_general", q, k, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(3,),
              out_dtype="f32")
    scale = g.add("broadcast_in_dim", g.constant(np.float32(0.25)), shape=s.shape, broadcast_dimensions=())
    p = _softmax(g, g.add("mul", s, scale), (3,))
    pq = g.add("convert", p, dtype="f8e4m3fn")
    o = g.add("dot_general", pq, v, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,),
              out_dtype="f32")
    graph = g.build([o])
    regions = partition(graph)
    assert "attention" not in [r.kind for r in regions]
    reasons = [w for r in regions for w in explain(r)["why_not_larger"] if "attention" in w]
    assert reasons == ["fp8 attention not fused: the attention kernel takes i8/u8 Q, K, V and P; "
                       "fp8 runs in the fp8 GEMMs"]
