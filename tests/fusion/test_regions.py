"""Fusion decisions, asserted by counts, plus the partition checker."""
import numpy as np
import pytest

from aotc.errors import VerifyError
from aotc.fusion.region import GatedPayload, Region
from aotc.fusion.regions import check_partition, partition
from aotc.ir.graph import GraphBuilder


def kinds(regions):
    return [r.kind for r in regions]


def test_elementwise_chain_is_one_loop():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    y = b.add("tanh", b.add("exp", b.add("neg", x)))
    g = b.build([b.add("mul", y, x)])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["loop"] and len(regions[0].nodes) == 4


def test_gemm_absorbs_bias_and_activation_epilogue():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    w = b.constant(np.ones((8, 5), np.float32))
    bias = b.constant(np.ones(5, np.float32))
    d = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    out = b.add("tanh", b.add("add", d, b.add("broadcast_in_dim", bias, shape=(4, 5), broadcast_dimensions=(1,))))
    g = b.build([out])
    regions = partition(g)
    assert kinds(regions) == ["dot"]
    assert [n.op for n in regions[0].epilogue] == ["add", "tanh"]


def test_anchor_used_twice_is_not_an_epilogue():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    r = b.add("reduce", x, kind="sum", axes=(1,))
    g = b.build([b.add("exp", r), b.add("log", r)])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["reduction", "loop", "loop"]
    assert any("used outside the region" in why for reg in regions for why in reg.reasons)


def test_graph_output_is_not_fused_away():
    b = GraphBuilder()
    x = b.input("x", (4,))
    y = b.add("exp", x)
    g = b.build([y, b.add("log", y)])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["loop", "loop"]
    assert any("graph output" in why for reg in regions for why in reg.reasons)


def test_gemm_prologue_takes_index_math_but_not_compute():
    """N = 70 spans two block columns, so each lhs element is loaded twice: exp stays in its own kernel."""
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    wt = b.input("wt", (70, 8))
    w = b.add("transpose", wt, permutation=(1, 0))
    xe = b.add("exp", x)
    d = b.add("dot_general", xe, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    g = b.build([d])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["loop", "dot"]
    assert {n.op for n in regions[1].nodes} == {"transpose", "dot_general"}


def test_gemm_prologue_takes_a_cast():
    """An fp16 engine's f32 input converts inside the first GEMM/conv's loads, not in a kernel of its own."""
    b = GraphBuilder()
    x, w = b.input("x", (4, 8)), b.input("w", (8, 5), "f16")
    d = b.add("dot_general", b.add("convert", x, dtype="f16"), w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,),
              rhs_contract=(0,))
    g = b.build([d])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["dot"] and regions[0].inputs == [x, w]


def test_requantize_to_int8_stays_with_its_producer():
    """Q(x) = convert(clamp(round(x / s))) before an int8 GEMM: the loop computing it stores 8 bits (not the
    f32 clamp for the GEMM to cast on load)."""
    b = GraphBuilder()
    x, w = b.input("x", (4, 8)), b.input("w", (8, 5), "i8")
    s = b.add("broadcast_in_dim", b.constant(np.array([0.1], np.float32), "s"), shape=(4, 8),
              broadcast_dimensions=(1,))
    lo = b.add("broadcast_in_dim", b.constant(np.array([-128.0], np.float32), "lo"), shape=(4, 8),
               broadcast_dimensions=(1,))
    q = b.add("convert", b.add("max", b.add("round_even", b.add("div", x, s)), lo), dtype="i8")
    d = b.add("dot_general", q, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,), out_dtype="i32")
    g = b.build([d])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["loop", "dot"] and regions[0].root is q and regions[1].inputs == [q, w]


def test_requantize_before_a_max_pool_stays_in_the_int8_conv_epilogue():
    """int8 conv -> scale -> round -> clamp -> convert i8 -> max pool: the conv stores int8 and the pool reads
    it, instead of the pool recomputing the epilogue from a stored i32 accumulator."""
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8), "i8")
    w = b.constant(np.ones((6, 4, 3, 3), np.int8), "w")
    acc = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1,
                out_dtype="i32")
    shape = acc.shape
    s = b.add("broadcast_in_dim", b.constant(np.array([0.01], np.float32), "s"), shape=shape,
              broadcast_dimensions=(1,))
    lo = b.add("broadcast_in_dim", b.constant(np.array([-128.0], np.float32), "lo"), shape=shape,
               broadcast_dimensions=(1,))
    q = b.add("convert", b.add("max", b.add("round_even", b.add("mul", b.add("convert", acc, dtype="f32"), s)), lo),
              dtype="i8")
    pool = b.add("reduce_window", q, kind="max", window=(1, 1, 2, 2), strides=(1, 1, 2, 2),
                 padding=((0, 0),) * 4, dilations=(1, 1, 1, 1))
    g = b.build([pool])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["conv", "window"] and regions[0].root is q and regions[1].inputs == [q]


def test_reduction_takes_elementwise_prologue():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    r = b.add("reduce", b.add("mul", x, x), kind="sum", axes=(1,))
    g = b.build([r])
    regions = partition(g)
    assert kinds(regions) == ["reduction"] and len(regions[0].nodes) == 2


def test_shared_broadcast_is_duplicated_not_materialized():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    s = b.input("s", (8,))
    sb = b.add("broadcast_in_dim", s, shape=(4, 8), broadcast_dimensions=(1,))
    r1 = b.add("reduce", b.add("mul", x, sb), kind="sum", axes=(1,))
    r2 = b.add("reduce", b.add("add", x, sb), kind="max", axes=(1,))
    g = b.build([r1, r2])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["reduction", "reduction"]


def test_check_partition_rejects_missing_node_and_bad_order():
    b = GraphBuilder()
    x = b.input("x", (4,))
    y = b.add("exp", x)
    z = b.add("reduce", y, kind="sum", axes=(0,))
    g = b.build([z])
    regions = partition(g)
    with pytest.raises(VerifyError, match="in no region"):
        check_partition(g, [Region("loop", y, [g.nodes[0]], inputs=[x])])
    assert len(regions) == 1
    bad = [Region("reduction", z, [g.nodes[1]], g.nodes[1], inputs=[y]),
           Region("loop", y, [g.nodes[0]], inputs=[x])]
    with pytest.raises(VerifyError, match="before it is computed"):
        check_partition(g, bad)


def test_softmax_and_layernorm_become_row_regions():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    m = b.add("reduce", x, kind="max", axes=(1,))
    e = b.add("exp", b.add("sub", x, b.add("broadcast_in_dim", m, shape=(4, 8), broadcast_dimensions=(0,))))
    s = b.add("reduce", e, kind="sum", axes=(1,))
    y = b.add("div", e, b.add("broadcast_in_dim", s, shape=(4, 8), broadcast_dimensions=(0,)))
    g = b.build([y])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["row"]


def test_row_region_refused_when_broadcast_is_not_per_row():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    s = b.add("reduce", x, kind="sum", axes=(0,))                         # reduces the leading axis
    y = b.add("mul", x, b.add("broadcast_in_dim", s, shape=(4, 8), broadcast_dimensions=(1,)))
    g = b.build([y])
    regions = partition(g)
    check_partition(g, regions)
    assert "row" not in kinds(regions)


def test_node_needed_by_a_duplicated_user_in_another_region_is_materialized():
    """A compare used by a select that two regions duplicate (via a shared reshape) must
    reach both regions: one absorbs it, the other must find it in memory."""
    b = GraphBuilder()
    x = b.input("x", (3, 2))
    y = b.input("y", (3, 2))
    c = b.add("compare", x, y, direction="GT")
    sel = b.add("select", c, x, y)
    flat = b.add("reshape", sel, shape=(6,))                 # injective: duplicated into users
    r1 = b.add("reduce", flat, kind="sum", axes=(0,))
    other = b.add("reduce", b.add("mul", b.add("reshape", b.add("select", c, y, x), shape=(6,)), flat),
                  kind="sum", axes=(0,))
    g = b.build([b.add("div", other, r1)])
    regions = partition(g)
    check_partition(g, regions)


def _mbconv(stride=1, chans=(8, 48), expand_users=1, expand_stride=1, expand_k=1):
    """MobileNetV2's expansion: 1x1 conv + bias + relu6 -> depthwise 3x3 (+ bias) in NHWC (expand_k=3: a stem)."""
    cin, cexp = chans
    b = GraphBuilder()
    x = b.input("x", (1, 9, 11, cin))
    w1 = b.constant(np.ones((cexp, expand_k, expand_k, cin), np.float32))
    pad = ((expand_k // 2,) * 2,) * 2
    e = b.add("convolution", x, w1, strides=(expand_stride,) * 2, padding=pad, dilations=(1, 1),
              groups=1, layout="NHWC", name="expand")
    six = b.add("broadcast_in_dim", b.constant(np.float32(6)), shape=e.shape, broadcast_dimensions=())
    zero = b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=e.shape, broadcast_dimensions=())
    r = b.add("clamp", zero, e, six)
    w2 = b.constant(np.ones((cexp, 3, 3, 1), np.float32))
    d = b.add("convolution", r, w2, strides=(stride,) * 2, padding=((1, 1), (1, 1)), dilations=(1, 1),
              groups=cexp, layout="NHWC", name="dw")
    outs = [d] + ([r] if expand_users > 1 else [])
    return b.build(outs)


def test_pointwise_expansion_fuses_into_the_depthwise_region():
    g = _mbconv(stride=2)
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["conv"]
    assert sorted(n.name for n in regions[0].nodes if n.op == "convolution") == ["dw", "expand"]
    assert regions[0].anchor.name == "dw" and g.inputs[0] in regions[0].inputs


def test_small_dense_stem_fuses_into_the_depthwise_region():
    """MobileNet's stem (3x3/2 over 3 channels: 27 taps x channels) is recomputed while staging."""
    g = _mbconv(chans=(3, 32), expand_stride=2, expand_k=3)
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["conv"]


@pytest.mark.parametrize("why", ["expansion is also an output", "3x3 over 8 channels: 72 > 64 taps x channels"])
def test_expansion_stays_apart_when_it_must(why):
    g = _mbconv(expand_users=2) if why.startswith("expansion is") else _mbconv(expand_k=3)
    regions = partition(g)
    check_partition(g, regions)
    assert sorted(kinds(regions)) == ["conv", "conv"]


def _ln_into(b, shape, n_out):
    from tests.helpers.norms import layer_norm
    x = b.input("x", shape)
    return x, layer_norm(b, x, b.input("g", shape[-1:]), b.input("beta", shape[-1:])), b.input("w", (shape[-1], n_out))


def test_layernorm_feeding_gemms_is_recomputed_in_their_prologues():
    from tests.helpers.norms import matmul
    b = GraphBuilder()
    x, y, w = _ln_into(b, (2, 5, 16), 8)
    q = matmul(b, y, w)
    k = matmul(b, y, b.input("wk", (16, 8)))
    g = b.build([q, k])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["dot", "dot"]
    assert all(sum(n.op == "reduce" for n in r.nodes) == 2 for r in regions)
    assert all(not any(v.shape == x.shape and v is not x for v in r.inputs) for r in regions)  # no normalized tensor


def test_two_layernorms_of_one_tensor_are_each_recomputed_in_their_gemms():
    """GPT-NeoX's parallel block: attention and MLP each normalize x; after CSE the two norms share their
    statistics and normalized value, and each projection still takes its whole norm as prologue."""
    from aotc.hlo_passes import cse
    from tests.helpers.norms import layer_norm, matmul
    b = GraphBuilder()
    x = b.input("x", (2, 5, 16))
    outs = [matmul(b, layer_norm(b, x, b.input(f"g{i}", (16,)), b.input(f"b{i}", (16,))), b.input(f"w{i}", (16, 8)))
            for i in range(2)]
    g = cse.run(b.build(outs))
    assert sum(n.op == "reduce" for n in g.nodes) == 2            # the statistics are shared
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["dot", "dot"]
    assert all(sum(n.op == "reduce" for n in r.nodes) == 2 for r in regions)
    assert all(r.inputs and not any(v.shape == x.shape and v is not x for v in r.inputs) for r in regions)


def test_a_shared_norm_with_a_non_gemm_user_stays_a_row_kernel():
    from aotc.hlo_passes import cse
    from tests.helpers.norms import layer_norm, matmul
    b = GraphBuilder()
    x = b.input("x", (6, 16))
    y1 = layer_norm(b, x, b.input("g1", (16,)), b.input("b1", (16,)))
    y2 = layer_norm(b, x, b.input("g2", (16,)), b.input("b2", (16,)))
    g = cse.run(b.build([matmul(b, y1, b.input("w", (16, 8))), b.add("tanh", y2)]))
    regions = partition(g)
    check_partition(g, regions)
    assert "row" in kinds(regions)
    assert not any(n.op == "reduce" for r in regions if r.kind == "dot" for n in r.nodes)


@pytest.mark.parametrize("case,why", [("residual", "also feeds add"), ("sum", "read 4 row tensors"),
                                      ("batched", "also feeds reshape")])
def test_layernorm_stays_a_row_kernel_when_it_must(case, why):
    from tests.helpers.norms import layer_norm, matmul
    b = GraphBuilder()
    if case == "sum":                         # norm(a + r): two tensors read per row pass
        a, r = b.input("a", (6, 16)), b.input("r", (6, 16))
        y = layer_norm(b, b.add("add", a, r), b.input("g", (16,)))
        outs = [matmul(b, y, b.input("w", (16, 8)))]
    else:
        x, y, w = _ln_into(b, (6, 16), 8)
        outs = [matmul(b, y, w)]
        if case == "residual":
            outs.append(b.add("add", y, x))
        else:                                  # a batched dot reads rows per batch, not per m
            yb = b.add("reshape", y, shape=(2, 3, 16))
            outs.append(b.add("dot_general", yb, b.input("wb", (2, 16, 4)), lhs_batch=(0,), rhs_batch=(0,),
                              lhs_contract=(2,), rhs_contract=(1,)))
    g = b.build(outs)
    regions = partition(g)
    check_partition(g, regions)
    assert "row" in kinds(regions)
    dot = next(r for r in regions if r.kind == "dot")
    assert not any(n.op == "reduce" for n in dot.nodes)
    assert any(why in reason for reason in dot.reasons), dot.reasons


def test_gated_unit_over_a_gemms_halves_is_its_epilogue():
    """silu(D[:, :F]) * D[:, F:] (merge-dots' LLaMA MLP) is one dot region; other column splits are not."""
    from tests.kernels.test_codegen_gated import gated_mlp
    graph, _ = gated_mlp(4, 8, 6, bias=True)
    regions = partition(graph)
    check_partition(graph, regions)
    assert kinds(regions) == ["dot"] and regions[0].payload == GatedPayload(6, 2)
    b = GraphBuilder()
    x, w = b.input("x", (4, 8)), b.input("w", (8, 12))
    d = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    g = b.add("slice", d, start=(0, 0), limit=(4, 5), stride=(1, 1))          # not the halves
    u = b.add("slice", d, start=(0, 6), limit=(4, 11), stride=(1, 1))
    graph = b.build([b.add("mul", g, u)])
    assert sorted(kinds(partition(graph))) == ["dot", "loop"]


def _lstm_like_cell():
    """c = exp(x) + x (a graph output), h = tanh(c) * x read by two reductions: two loops, c then h."""
    b = GraphBuilder()
    x = b.input("x", (4, 16))
    c = b.add("add", b.add("exp", x), x)
    h = b.add("mul", b.add("tanh", c), x)
    return b.build([c, b.add("reduce", h, kind="sum", axes=(1,)), b.add("reduce", h, kind="max", axes=(1,))])


def test_a_loop_reading_the_previous_loop_elementwise_joins_its_kernel():
    g = _lstm_like_cell()
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["loop", "reduction", "reduction"]
    assert regions[0].root is g.outputs[0] and [v.shape for v in regions[0].extra_roots] == [(4, 16)]
    assert regions[0].inputs == [g.inputs[0]]


def test_sibling_loops_stay_apart_through_index_math():
    b = GraphBuilder()
    x = b.input("x", (4, 4))
    c = b.add("exp", x)
    h = b.add("mul", b.add("transpose", c, permutation=(1, 0)), x)        # reads c transposed
    g = b.build([c, b.add("reduce", h, kind="sum", axes=(1,)), b.add("reduce", h, kind="max", axes=(1,))])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["loop", "loop", "reduction", "reduction"]


def _dw_block(b, x, cexp, cout, relu_out=False):
    """1x1 expand -> 3x3 depthwise -> relu -> 1x1 project, NHWC (ones as weights: decisions only)."""
    def conv(v, o, k, groups):
        w = b.constant(np.ones((o, k, k, v.shape[-1] // groups), np.float32))
        p = (k // 2, k // 2)
        return b.add("convolution", v, w, strides=(1, 1), padding=(p, p), dilations=(1, 1), groups=groups,
                     layout="NHWC")
    e = conv(x, cexp, 1, 1)
    d = b.add("tanh", conv(e, cexp, 3, cexp))
    return d, conv(d, cout, 1, 1)


def test_depthwise_and_its_expansion_join_the_project_conv():
    """MobileNet's whole inverted-residual block is one conv region: expand and depthwise are prologue."""
    b = GraphBuilder()
    x = b.input("x", (1, 14, 14, 8))
    _, y = _dw_block(b, x, 48, 8)
    g = b.build([b.add("add", y, x)])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["conv"]
    assert sum(n.op == "convolution" for n in regions[0].nodes) == 3


def test_depthwise_result_used_twice_keeps_its_own_kernel():
    b = GraphBuilder()
    x = b.input("x", (1, 14, 14, 8))
    d, y = _dw_block(b, x, 48, 8)
    g = b.build([y, b.add("exp", d)])
    regions = partition(g)
    check_partition(g, regions)
    assert sorted(kinds(regions)) == ["conv", "conv", "loop"]     # depthwise, project, exp
    proj = next(r for r in regions if r.root is g.outputs[0])
    assert any("not fused into pointwise conv" in why and "used elsewhere" in why for why in proj.reasons)


def test_lstm_steps_run_their_cell_in_the_recurrent_gemm():
    """Each step after the first is one GEMM region (4 gate blocks) writing h_t and, for the next
    step, c_t; the unit stops at the step's own cell (no reach into the next step through c_t)."""
    b = GraphBuilder()
    f, k = 6, 6
    h = b.input("h", (2, k))
    c = b.input("c", (2, f))
    for t in range(3):
        r = b.constant(np.ones((k, 4 * f), np.float32))
        xw = b.input(f"xw{t}", (2, 4 * f))
        d = b.add("dot_general", h, r, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
        gates = [b.add("add", b.add("slice", d, start=(0, g * f), limit=(2, (g + 1) * f), stride=(1, 1)),
                       b.add("slice", xw, start=(0, g * f), limit=(2, (g + 1) * f), stride=(1, 1)))
                 for g in range(4)]
        c = b.add("add", b.add("mul", b.add("logistic", gates[2]), c),
                  b.add("mul", b.add("logistic", gates[0]), b.add("tanh", gates[3])))
        h = b.add("mul", b.add("logistic", gates[1]), b.add("tanh", c))
    g = b.build([h])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["dot", "dot", "dot"]
    assert [r.payload.blocks for r in regions] == [4, 4, 4]
    assert [len(r.extra_roots) for r in regions] == [1, 1, 0]       # c_t for the next step; the last needs none


def _se_scaled_project(b, x, se_users_x: bool):
    """x * sigmoid(s)[c] -> 1x1 conv to 16 channels; s is a per-image, per-channel vector."""
    n, h, w, c = x.shape
    s = b.input("s", (n, 1, 1, c))
    sb = b.add("broadcast_in_dim", b.add("logistic", s), shape=x.shape, broadcast_dimensions=(0, 1, 2, 3))
    xs = b.add("mul", b.add("tanh", x) if not se_users_x else x, sb)
    w_ = b.constant(np.ones((16, 1, 1, c), np.float32))
    return b.add("convolution", xs, w_, strides=(1, 1), padding=((0, 0), (0, 0)), dilations=(1, 1), groups=1,
                 layout="NHWC")


def test_channel_scale_joins_a_pointwise_conv_that_reads_its_input_once():
    """EfficientNet's squeeze-excite scale: x is materialized anyway (the squeeze pool reads it), and a
    1x1 conv with one 64-wide N tile loads each element once, so x * s[c] is computed there."""
    b = GraphBuilder()
    x = b.add("tanh", b.input("x", (2, 5, 5, 32)))
    pooled = b.add("reduce", x, kind="sum", axes=(1, 2))
    g = b.build([_se_scaled_project(b, x, True), pooled])
    regions = partition(g)
    check_partition(g, regions)
    conv = next(r for r in regions if r.kind == "conv")
    assert {"mul", "logistic"} <= {n.op for n in conv.nodes}
    assert kinds(regions).count("loop") == 1       # tanh(x) alone: no kernel for the scaled tensor


def test_channel_scale_stays_out_when_it_would_only_move():
    """When the scaled tensor's input is another conv's result used only there, computing the scale in
    the 1x1 conv saves no bytes (that conv would write its raw result instead): it stays its epilogue."""
    b = GraphBuilder()
    x = b.add("convolution", b.input("x", (2, 5, 5, 8)), b.constant(np.ones((32, 3, 3, 8), np.float32)),
              strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1, layout="NHWC")
    g = b.build([_se_scaled_project(b, x, False)])
    regions = partition(g)
    check_partition(g, regions)
    first, last = (r for r in regions if r.kind == "conv")
    assert "mul" in {n.op for n in first.nodes} and "mul" not in {n.op for n in last.nodes}


def test_lhs_compute_joins_a_gemm_with_one_block_column():
    """N <= 64: the lhs is loaded once, so exp(x) of a graph input runs in the GEMM's loads."""
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    d = b.add("dot_general", b.add("exp", x), b.input("w", (8, 5)), lhs_batch=(), rhs_batch=(), lhs_contract=(1,),
              rhs_contract=(0,))
    g = b.build([d])
    regions = partition(g)
    check_partition(g, regions)
    assert kinds(regions) == ["dot"]
