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
