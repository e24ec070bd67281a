"""The flash-attention kernel family on the host emulation vs the interpreter.

Query/key counts break the 8-row and 32-key tiles; head dims are not
multiples of 32; Q/K/V arrive through transposes (prologue index math); an
additive mask and a scale form the score chain; outputs are poisoned.
"""
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.kernels import codegen
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_codegen import _softmax, check


def attention_graph(b, h, sq, sk, dh, dv, causal=False):
    g = GraphBuilder()
    q = g.input("q", (b, sq, h, dh))                  # (B, S, H, D) as projections produce it
    k = g.input("k", (b, h, dh, sk))                  # already transposed for Q.K
    v = g.input("v", (b, sk, h, dv))
    qt = g.add("transpose", q, permutation=(0, 2, 1, 3))
    vt = g.add("transpose", v, permutation=(0, 2, 1, 3))
    s = g.add("dot_general", qt, k, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,))
    scale = g.add("broadcast_in_dim", g.constant(np.float32(1 / np.sqrt(dh))), shape=s.shape,
                  broadcast_dimensions=())
    x = g.add("mul", s, scale)
    if causal:
        mask = np.where(np.tril(np.ones((sq, sk))) > 0, 0.0, -1e9).astype(np.float32)
        x = g.add("add", x, g.add("broadcast_in_dim", g.constant(mask), shape=s.shape, broadcast_dimensions=(2, 3)))
    p = _softmax(g, x, (3,))
    o = g.add("dot_general", p, vt, lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contract=(3,), rhs_contract=(2,))
    out = g.add("reshape", g.add("transpose", o, permutation=(0, 2, 1, 3)), shape=(b, sq, h * dv))
    return g.build([g.add("tanh", out)])


@pytest.mark.parametrize("b,h,sq,sk,dh,dv,causal", [
    (1, 2, 50, 50, 16, 16, True),
    (2, 3, 3, 783, 24, 40, False),
    (1, 1, 17, 33, 64, 64, True),
    (1, 2, 8, 8, 128, 8, False),
])
def test_attention_is_one_kernel_and_matches(b, h, sq, sk, dh, dv, causal):
    rng, seed = fresh_rng()
    graph = attention_graph(b, h, sq, sk, dh, dv, causal)
    regions = partition(graph)
    assert [r.kind for r in regions] == ["attention"]       # the heads' transpose back and tanh: its epilogue
    inputs = [random_array(rng, (b, sq, h, dh)), random_array(rng, (b, h, dh, sk)),
              random_array(rng, (b, sk, h, dv))]
    check(graph, inputs, seed, rtol=1e-4, atol=2e-5)


def test_attention_kernel_compiles_for_the_gpu():
    graph = attention_graph(1, 2, 50, 50, 64, 64, True)
    kernels = [codegen.generate(graph, r) for r in partition(graph)]
    cubin = compile_device(codegen.module_source(kernels), "sm_90")
    assert cubin[:4] == b"\x7fELF"


def test_attention_not_matched_when_probabilities_are_used_elsewhere():
    g = GraphBuilder()
    q = g.input("q", (1, 4, 8))
    k = g.input("k", (1, 8, 4))
    v = g.input("v", (1, 4, 8))
    s = g.add("dot_general", q, k, lhs_batch=(0,), rhs_batch=(0,), lhs_contract=(2,), rhs_contract=(1,))
    p = _softmax(g, s, (2,))
    o = g.add("dot_general", p, v, lhs_batch=(0,), rhs_batch=(0,), lhs_contract=(2,), rhs_contract=(1,))
    graph = g.build([o, p])                       # attention probabilities are an output too
    assert "attention" not in [r.kind for r in partition(graph)]
