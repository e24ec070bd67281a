"""The int8 attention kernel (templates/attention_int8_mma.cu) on the host emulation vs the interpreter.

Graphs are built in IR as the Q/DQ passes leave a quantized attention: i8/u8 Q, K, V; Q·K with
out_dtype='i32'; a float score chain (dequantize, 1/sqrt(d), an additive mask from a (B, S_k)
input); softmax; QuantizeLinear of the probabilities (scale 1/255 or 1/127, round half even,
zero point, clamp, convert); P·V with i32 sums; a dequantize/requantize epilogue and the heads'
transpose back. With zero points on Q, K, P and V the score chain and the epilogue read the
correction sums (sum_d Q, sum_d K, sum_j V, sum_j q(P)) as the quantize pass writes them. The i8
output equals the interpreter's except where a score or probability lands within an ulp of a rounding
tie (expf and the row sum's order are not numpy's: a GPU's expf is not either), which may move that
row's outputs by one quantum: `assert_int8_matches` finds the ties in the interpreter's unrounded
values and asks for an exact match everywhere else. Query and key counts break the 64-row (16 per
warp) and 32-key tiles, batch x heads > 1, head dims are not multiples of 32 (padded for mma);
inputs are fresh random draws and outputs poisoned (run_on_host).
"""
import numpy as np
import pytest

from aotc.fusion.regions import explain, partition
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from aotc.kernels.kernel_math import kernel_math
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.rng import fresh_rng
from tests.helpers.host_run import run_on_host
from tests.kernels.test_codegen import _softmax

NP = {"i8": np.int8, "u8": np.uint8}
RANGE = {"i8": (-128, 127), "u8": (0, 255)}


TIE = 2e-6      # relative distance to a rounding tie that expf's last ulp and the row sum's order can cross


def near_tie(unrounded):
    """Values within TIE of a round-half-even tie: the kernel may round them the other way."""
    v = unrounded.astype(np.float64)
    return np.abs(np.abs(v - np.floor(v)) - 0.5) <= TIE * np.maximum(np.abs(v), 1)


def tie_bound(traced, shape):
    """How far each output may be off: 0 away from ties, 1 at an output's own tie, 2 in a row whose
    score or probability sits on a tie (see assert_int8_matches)."""
    _, *chain, unrounded_out = traced
    rows = np.zeros(unrounded_out.shape[:3], bool)                      # (B, H, S_q)
    for v in chain:
        rows |= near_tie(v).any(axis=3)
    rows = np.broadcast_to(rows[..., None], unrounded_out.shape)
    bound = np.where(rows, 2, near_tie(unrounded_out).astype(np.int32))
    return bound.transpose(0, 2, 1, 3).reshape(shape)                   # as the heads' transpose back


def assert_int8_matches(got, traced, seed):
    """`got` equals the interpreter's output, `traced` = interpret(int8_attention_graph(..., trace=True)),
    but where a rounding tie decides. The kernel's expf and row sums are not numpy's (a GPU's are not
    either), so a score or probability within an ulp of a QuantizeLinear tie may round the other way.
    One probability quantum moves its row's outputs by up to 127 (1/127) 0.05 / 0.04 = 1.25 output
    quanta, so at most 2; an output within an ulp of a tie may move itself by one. Everywhere else
    the match is exact, so a wrong max, sum, mask, scale or rounding mode shows (3000 seeds for each
    case below: 0 failures, where a flat 1-in-200 rule failed 10 times)."""
    want = traced[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    bound = tie_bound(traced, got.shape)
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert (diff <= bound).all(), \
        f"seed {seed}: {np.count_nonzero(diff)} of {diff.size} off, at most {diff.max()}; " \
        f"{np.count_nonzero(diff > bound)} beyond what a rounding tie explains"


def _scalar(g, value, shape):
    return g.add("broadcast_in_dim", g.constant(np.float32(value)), shape=shape, broadcast_dimensions=())


def _quantize(g, x, scale, zero, dtype, trace=None):
    """QuantizeLinear as the importer lowers it: round_even(x / scale) + zero, clamped, converted.
    `trace` collects the value before rounding (x / scale) for the tie check."""
    lo, hi = RANGE[dtype]
    unrounded = g.add("mul", x, _scalar(g, 1 / scale, x.shape))
    if trace is not None:
        trace.append(unrounded)
    y = g.add("add", g.add("round_even", unrounded), _scalar(g, zero, x.shape))
    return g.add("convert", g.add("clamp", _scalar(g, lo, x.shape), y, _scalar(g, hi, x.shape)), dtype=dtype)


def _zero_point_terms(g, y, pq, v, zp, zv):
    """y - zp * colsum_j(V) - zv * rowsum_j(q(P)) + S_k * zp * zv: the quantize pass's correction of
    sum_j (q(P) - zp)(V - zv) read from the exact sum sum_j q(P) V."""
    shape = y.shape
    colsum = g.add("reduce", g.add("convert", v, dtype="i32"), kind="sum", axes=(1,))            # (B, H, D_v)
    rowsum = g.add("reduce", g.add("convert", pq, dtype="i32"), kind="sum", axes=(3,))           # (B, H, S_q)
    col = g.add("convert", g.add("broadcast_in_dim", colsum, shape=shape, broadcast_dimensions=(0, 1, 3)), dtype="f32")
    row = g.add("convert", g.add("broadcast_in_dim", rowsum, shape=shape, broadcast_dimensions=(0, 1, 2)), dtype="f32")
    y = g.add("sub", y, g.add("mul", col, _scalar(g, zp, shape)))
    y = g.add("sub", y, g.add("mul", row, _scalar(g, zv, shape)))
    return g.add("add", y, _scalar(g, pq.shape[3] * zp * zv, shape))


def _qk_zero_point_terms(g, x, q, k, zq, zk):
    """x - zk * sum_d Q[i] - zq * sum_d K[j] + D * zq * zk, the sums read per row and per key through
    transposes, as the quantize pass writes them."""
    shape, dh = x.shape, q.shape[3]
    qt = g.add("transpose", g.add("convert", q, dtype="i32"), permutation=(0, 2, 1, 3))
    qsum = g.add("reduce", qt, kind="sum", axes=(3,))                                          # (B, H, S_q)
    kt = g.add("transpose", g.add("convert", k, dtype="i32"), permutation=(0, 2, 3, 1))       # (B, H, D, S_k)
    ksum = g.add("reduce", kt, kind="sum", axes=(2,))                                           # (B, H, S_k)
    qrow = g.add("convert", g.add("broadcast_in_dim", qsum, shape=shape, broadcast_dimensions=(0, 1, 2)), dtype="f32")
    kcol = g.add("convert", g.add("broadcast_in_dim", ksum, shape=shape, broadcast_dimensions=(0, 1, 3)), dtype="f32")
    x = g.add("sub", x, g.add("mul", qrow, _scalar(g, zk, shape)))
    x = g.add("sub", x, g.add("mul", kcol, _scalar(g, zq, shape)))
    return g.add("add", x, _scalar(g, dh * zq * zk, shape))


def int8_attention_graph(b, h, sq, sk, dh, dv, *, p_dtype="i8", mask=True, p_used_elsewhere=False,
                         zero_points=False, qkv="i8", trace=False):
    """The quantized attention graph, its input shapes and whether it has a mask. With `trace` the
    graph also outputs, after its own outputs, each QuantizeLinear's value before rounding: the
    scores' (with zero points), the probabilities' (B, H, S_q, S_k) and the result's (B, H, S_q, D_v)."""
    g = GraphBuilder()
    traced = [] if trace else None
    q = g.input("q", (b, sq, h, dh), qkv)           # (B, S, H, D) as the projections' requantize writes it
    k = g.input("k", (b, sk, h, dh), qkv)
    v = g.input("v", (b, sk, h, dv), qkv)
    inputs = [q, k, v]
    s = g.add("dot_general", q, k, lhs_batch=(0, 2), rhs_batch=(0, 2), lhs_contract=(3,), rhs_contract=(3,),
              out_dtype="i32")                                       # (B, H, S_q, S_k)
    x = g.add("convert", s, dtype="f32")
    if zero_points:                                  # Q and K zero points: S - z_k sum_d Q - z_q sum_d K + ...
        x = _qk_zero_point_terms(g, x, q, k, zq=-5, zk=2)
    x = g.add("mul", x, _scalar(g, 0.01 * 0.02 / np.sqrt(dh), s.shape))
    if zero_points:                                  # onnxruntime's Q/DQ of the scores: row-constant terms matter
        x = g.add("mul", g.add("sub", g.add("convert", _quantize(g, x, 0.03, 10, "i8", traced), dtype="f32"),
                               _scalar(g, 10, s.shape)), _scalar(g, 0.03, s.shape))
    if mask:
        m = g.input("mask", (b, sk), "f32")
        inputs.append(m)
        add = g.add("mul", g.add("sub", _scalar(g, 1.0, m.shape), m), _scalar(g, -10000.0, m.shape))
        x = g.add("add", x, g.add("broadcast_in_dim", add, shape=s.shape, broadcast_dimensions=(0, 3)))
    p = _softmax(g, x, (3,))
    scale, zero = (1 / 255, 0) if p_dtype == "u8" else (1 / 127, 0)
    if zero_points:                                  # onnxruntime's asymmetric activations
        scale, zero = (1 / 255, -128) if p_dtype == "i8" else (1 / 255, 0)
    pq = _quantize(g, p, scale, zero, p_dtype, traced)
    o = g.add("dot_general", pq, v, lhs_batch=(0, 1), rhs_batch=(0, 2), lhs_contract=(3,), rhs_contract=(1,),
              out_dtype="i32")                                       # (B, H, S_q, D_v)
    y = g.add("convert", o, dtype="f32")
    if zero_points:
        y = _zero_point_terms(g, y, pq, v, zero, 3)
    y = g.add("mul", y, _scalar(g, scale * 0.05, o.shape))
    out = g.add("transpose", _quantize(g, y, 0.04, -3, "i8", traced), permutation=(0, 2, 1, 3))
    outs = [g.add("reshape", out, shape=(b, sq, h * dv))]
    if p_used_elsewhere == "output":
        outs.append(pq)
    elif p_used_elsewhere:
        outs.append(g.add("convert", pq, dtype="f32"))
    return g.build(outs + (traced or [])), [v.shape for v in inputs], mask


def _inputs(rng, shapes, mask, qkv="i8"):
    lo, hi = RANGE[qkv]
    ins = [rng.integers(lo, hi + 1, s).astype(NP[qkv]) for s in shapes[:3]]
    if mask:
        ins.append((rng.random(shapes[3]) < 0.8).astype(np.float32))     # mostly 1 (attend), some 0 (masked)
    return ins


@pytest.mark.parametrize("b,h,sq,sk,dh,dv,p_dtype,mask", [
    (2, 4, 50, 50, 16, 16, "i8", True),        # BERT-like: several heads, seq not a tile multiple
    (1, 3, 3, 783, 24, 40, "u8", True),        # many key tiles, a partial last one
    (2, 1, 17, 33, 64, 64, "i8", False),
    (1, 2, 8, 8, 128, 8, "u8", False),
])
@pytest.mark.parametrize("zero_points", [False, True], ids=["sym", "zp"])
def test_int8_attention_is_one_kernel_and_matches_the_interpreter(b, h, sq, sk, dh, dv, p_dtype, mask, zero_points):
    rng, seed = fresh_rng()
    graph, shapes, mask = int8_attention_graph(b, h, sq, sk, dh, dv, p_dtype=p_dtype, mask=mask,
                                               zero_points=zero_points)
    traced, _, _ = int8_attention_graph(b, h, sq, sk, dh, dv, p_dtype=p_dtype, mask=mask,
                                        zero_points=zero_points, trace=True)
    kinds = [r.kind for r in partition(graph)]
    assert kinds == ["attention"], kinds           # zero-point sums of Q, K, V, P too: summed in the kernel
    ins = _inputs(rng, shapes, mask)
    (got,), kernels, _ = run_on_host(graph, ins)
    assert_int8_matches(got, interpret(traced, ins), seed)
    (attention,) = [k for k in kernels if k.region.kind == "attention"]
    assert attention.name.startswith("aotc_attention_int8_") and kernel_math(attention) == "int8"


def test_uint8_queries_keys_and_values():
    """onnxruntime's QUInt8 activations: u8 Q, K, V (loaded as unsigned), u8 probabilities."""
    rng, seed = fresh_rng()
    graph, shapes, mask = int8_attention_graph(2, 2, 19, 40, 16, 24, p_dtype="u8", qkv="u8")
    traced, _, _ = int8_attention_graph(2, 2, 19, 40, 16, 24, p_dtype="u8", qkv="u8", trace=True)
    assert [r.kind for r in partition(graph)] == ["attention"]
    ins = _inputs(rng, shapes, mask, "u8")
    (got,), _, _ = run_on_host(graph, ins)
    assert_int8_matches(got, interpret(traced, ins), seed)


def test_the_tie_check_fails_on_one_output_off_away_from_a_tie():
    rng, seed = fresh_rng()
    graph, shapes, mask = int8_attention_graph(2, 4, 50, 50, 16, 16, trace=True)
    traced = interpret(graph, _inputs(rng, shapes, mask))
    want = traced[0]
    assert_int8_matches(want.copy(), traced, seed)
    exact = np.argwhere(tie_bound(traced, want.shape) == 0)
    assert len(exact) > 0.9 * want.size, seed                     # ties are rare: the check is strong
    got = want.copy()
    got[tuple(exact[rng.integers(len(exact))])] ^= 1              # one quantum, either way, no overflow
    with pytest.raises(AssertionError, match="1 beyond what a rounding tie explains"):
        assert_int8_matches(got, traced, seed)


def test_the_quantized_probabilities_are_spread():
    """The interpreter check is only as strong as P·V's inputs are varied: the quantized probabilities
    must take many values (not all 0 or saturated), so a wrong max, sum or rounding shows."""
    rng, seed = fresh_rng()
    graph, shapes, mask = int8_attention_graph(2, 4, 50, 50, 16, 16, p_used_elsewhere="output")
    pq = interpret(graph, _inputs(rng, shapes, mask))[1]
    assert len(np.unique(pq)) > 20 and np.mean(pq > 0) > 0.5, seed


@pytest.mark.parametrize("use,why", [
    ("output", "'{}' is a graph output"),
    ("user", "the quantized probabilities are read outside P·V (beyond the row sums of a zero-point correction)"),
])
def test_probabilities_used_elsewhere_stay_on_the_gemm_path_and_explain_says_why(use, why):
    graph, _, _ = int8_attention_graph(1, 2, 8, 8, 16, 16, p_used_elsewhere=use)
    regions = partition(graph)
    assert "attention" not in [r.kind for r in regions]
    reasons = [w for r in regions for w in explain(r)["why_not_larger"] if "attention" in w]
    pq = next(n for n in graph.nodes if n.op == "dot_general" and n.inputs[0].dtype.name == "i8"
              and n.inputs[0].shape == (1, 2, 8, 8)).inputs[0]
    assert reasons == ["int8 attention not fused: " + why.format(pq.name)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_int8_attention_kernel_compiles_for_the_gpu(arch):
    graph, _, _ = int8_attention_graph(2, 4, 64, 64, 16, 16)
    kernels = [codegen.generate(graph, r) for r in partition(graph)]
    cubin = compile_device(codegen.module_source(kernels), arch)
    assert cubin[:4] == b"\x7fELF"


def test_int8_attention_with_dynamic_batch_and_sequence():
    """One build run at several (batch, seq): sizes the kernel takes as arguments, tiles broken."""
    from aotc.ir.dims import DimRange, dim_ranges, sym
    ranges = {"batch": DimRange(1, 4), "seq": DimRange(1, 90)}
    rng, seed = fresh_rng()
    with dim_ranges(ranges):
        graph, _, _ = int8_attention_graph(sym("batch"), 2, sym("seq"), sym("seq"), 16, 8)
        traced, _, _ = int8_attention_graph(sym("batch"), 2, sym("seq"), sym("seq"), 16, 8, trace=True)
        graph.dims = traced.dims = ranges
        assert [r.kind for r in partition(graph)] == ["attention"]
        sets = [_inputs(rng, [(b, s, 2, 16), (b, s, 2, 16), (b, s, 2, 8), (b, s)], True)
                for b, s in ((1, 1), (3, 33), (4, 90), (2, 7))]
        results, _, _ = run_on_host(graph, None, shapes=sets)
    for ins, got in zip(sets, results):
        assert_int8_matches(got[0], interpret(traced, ins), seed)
