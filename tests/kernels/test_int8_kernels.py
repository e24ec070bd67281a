"""int8 GEMM and implicit-GEMM conv regions (templates/dot_mma8.cu) on the host emulation vs the interpreter.

Regions are built in IR directly, as the Q/DQ passes leave them: an i8/u8 dot or
NHWC conv with out_dtype='i32', then the epilogue a quantized model needs
(convert, per-channel scale, bias, residual, relu, requantize: round half even,
add the zero point, clamp, convert to i8/u8; or stop at f32). Integer results
must match bit for bit, so the i32 accumulator is checked too. Shapes break the
64x64x32 tile (odd M, N, K; K not a multiple of 32); outputs are poisoned
(run_on_host), inputs fresh random draws. The generated module compiles for
sm_80 and sm_90 (NVRTC), and runs mma.m16n8k32 there.
"""
import numpy as np
import pytest

from aotc.ir import ops
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.rng import fresh_rng
from tests.kernels.test_codegen import check

NP = {"i8": np.int8, "u8": np.uint8}


def _ints(rng, dtype, shape):
    lo, hi = (-128, 128) if dtype == "i8" else (0, 256)
    return rng.integers(lo, hi, shape).astype(NP[dtype])


def _bcast(b, v, shape, dims):
    return b.add("broadcast_in_dim", v, shape=shape, broadcast_dimensions=dims)


def _scalar(b, value, shape):
    return _bcast(b, b.constant(np.float32(value)), shape, ())


def requantize_epilogue(b, rng, acc, channel_dim: int, out: str | None, spread: float, residual=None):
    """f32(acc) * scale[c] + bias[c] (+ residual), relu; then, if `out` names i8/u8, requantize to it.

    `spread`: the accumulator's root mean square, so that scaled values are O(1) and the
    requantized ones spread over the 8-bit range instead of saturating."""
    shape, nch = acc.shape, acc.shape[channel_dim]
    y = b.add("convert", acc, dtype="f32")
    scale = b.constant((rng.uniform(0.5, 1.5, nch) / spread).astype(np.float32), "scale")
    bias = b.constant(rng.standard_normal(nch).astype(np.float32), "bias")
    y = b.add("mul", y, _bcast(b, scale, shape, (channel_dim,)))
    y = b.add("add", y, _bcast(b, bias, shape, (channel_dim,)))
    if residual is not None:
        y = b.add("add", y, residual)
    y = b.add("max", y, _scalar(b, 0.0, shape))
    if out is None:
        return y
    inv_scale, zp = 1 / 0.05, (-7 if out == "i8" else 121)
    lo, hi = (-128, 127) if out == "i8" else (0, 255)
    q = b.add("add", b.add("round_even", b.add("mul", y, _scalar(b, inv_scale, shape))), _scalar(b, zp, shape))
    q = b.add("clamp", _scalar(b, lo, shape), q, _scalar(b, hi, shape))
    return b.add("convert", q, dtype=out)


def assert_spread(q):
    """Requantized values that test something: many levels, few saturated."""
    info = np.iinfo(q.dtype)
    assert len(np.unique(q)) >= min(20, q.size // 4), np.unique(q)
    assert np.mean(q == info.max) < 0.2


def _module_compiles(kernels):
    source = codegen.module_source(kernels)
    for arch in ("sm_80", "sm_90"):
        assert compile_device(source, arch)[:4] == b"\x7fELF"
    ptx = compile_device(source, "compute_90")
    assert b"mma.sync.aligned.m16n8k32.row.col.s32" in ptx


GEMM_CASES = [  # m, n, k, batch, lhs dtype, rhs dtype, epilogue output (None: f32)
    (50, 70, 45, (), "i8", "i8", "i8"),
    (3, 8, 32, (2,), "u8", "i8", None),          # u8 activations x s8 weights, K one slice
    (130, 17, 100, (), "i8", "u8", "u8"),
    (64, 64, 7, (), "u8", "u8", "i8"),           # K < 32: one partial slice
]


@pytest.mark.parametrize("m,n,k,batch,lt,rt,out", GEMM_CASES)
def test_int8_gemm_region(m, n, k, batch, lt, rt, out):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    ins = [_ints(rng, lt, batch + (m, k)), _ints(rng, rt, batch + (n, k))]
    spread = np.sqrt(np.mean(np.einsum("...mk,...nk->...mn", *(x.astype(np.float64) for x in ins)) ** 2))
    a = b.input("a", batch + (m, k), lt)
    w = b.input("w", batch + (n, k), rt)
    nb = len(batch)
    acc = b.add("dot_general", a, w, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
                lhs_contract=(nb + 1,), rhs_contract=(nb + 1,), out_dtype="i32")
    y = requantize_epilogue(b, rng, acc, nb + 1, out, spread)
    graph = b.build([y])
    kernels = check(graph, ins, seed, rtol=1e-6, atol=1e-6, kinds=["dot"])
    if out is not None:
        assert_spread(interpret(graph, ins)[0])
    assert kernels[0].name.startswith("aotc_dot_mma8_")
    assert f"aotc_mma8_tile_{lt[0]}8{rt[0]}8".replace("i8", "s8") in kernels[0].source
    # K-contiguous region inputs are staged four bytes a load when K % 4 == 0 (mma8_stage4.part)
    assert kernels[0].source.count("*reinterpret_cast<const unsigned *>(&p") == (2 if k % 4 == 0 else 0)
    _module_compiles(kernels)


def test_int8_gemm_accumulator_is_exact():
    """The raw i32 accumulator as the region's output: bit for bit, over a K that needs many slices."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    a = b.input("a", (33, 1000), "u8")
    w = b.input("w", (1000, 65), "u8")        # (K, N): B read k-major
    acc = b.add("dot_general", a, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,),
                out_dtype="i32")
    graph = b.build([acc])
    ins = [_ints(rng, "u8", (33, 1000)), _ints(rng, "u8", (1000, 65))]
    (k,) = check(graph, ins, seed, kinds=["dot"])
    assert k.name.startswith("aotc_dot_mma8_") and k.splits == 1


CONV_CASES = [  # xshape (N, *S, C), wshape (O, *K, C/g), strides, pads, dilations, groups, x dtype, zero point
    ((1, 9, 11, 3), (50, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, "u8", 131),     # stem-like, K = 27
    ((2, 7, 6, 40), (17, 1, 1, 40), (1, 1), ((0, 0), (0, 0)), (1, 1), 1, "i8", 0),      # 1x1, batch 2
    ((1, 13, 12, 5), (70, 3, 2, 5), (2, 1), ((2, 1), (0, 1)), (2, 1), 1, "i8", -9),     # odd pads, dilated
    ((1, 5, 6, 64), (9, 3, 3, 64), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, "u8", 3),       # K = 576
    ((2, 10, 9, 12), (12, 3, 3, 1), (2, 2), ((1, 1), (1, 1)), (1, 1), 12, "i8", 5),     # depthwise: direct
    ((1, 6, 7, 8), (6, 3, 3, 4), (1, 1), ((1, 1), (0, 2)), (1, 1), 2, "u8", 200),       # grouped: direct
]


@pytest.mark.parametrize("xshape,wshape,strides,pads,dil,groups,xt,zp", CONV_CASES)
def test_int8_conv_region(xshape, wshape, strides, pads, dil, groups, xt, zp):
    """NHWC conv + per-channel scale + bias + residual + relu + requantize, padding holding the zero point."""
    rng, seed = fresh_rng()
    xs, ws = _ints(rng, xt, xshape), _ints(rng, "i8", wshape)
    ref = ops.reference("convolution", dict(strides=strides, padding=pads, dilations=dil, groups=groups,
                                            layout="NHWC", out_dtype="i32", pad_value=zp), xs, ws)[0]
    b = GraphBuilder()
    x = b.input("x", xshape, xt)
    w = b.constant(ws, "w")
    acc = b.add("convolution", x, w, strides=strides, padding=pads, dilations=dil, groups=groups, layout="NHWC",
                out_dtype="i32", pad_value=zp)
    res = b.input("r", acc.shape, "f32")
    y = requantize_epilogue(b, rng, acc, len(xshape) - 1, "i8", np.sqrt(np.mean(ref.astype(np.float64) ** 2)),
                            residual=res)
    graph = b.build([y])
    ins = [xs, rng.standard_normal(acc.shape).astype(np.float32)]
    (k,) = check(graph, ins, seed, kinds=["conv"])
    assert_spread(interpret(graph, ins)[0])
    assert k.name.startswith("aotc_dot_mma8_" if groups == 1 else "aotc_conv_int_")
    if groups == 1:             # x four channels a load when C % 4 == 0, w when its K (taps x C) is
        vectors = k.source.count("*reinterpret_cast<const unsigned *>(&p")
        assert vectors == int(xshape[-1] % 4 == 0) + int(np.prod(wshape[1:]) % 4 == 0)
    if groups == 1:
        _module_compiles([k])
    if zp and any(p != (0, 0) for p in pads):        # the zero point in the padding changes the answer
        zero = ops.reference("convolution", dict(strides=strides, padding=pads, dilations=dil, groups=groups,
                                                 layout="NHWC", out_dtype="i32"), xs, ws)[0]
        assert (zero != ref).any()


def test_int8_conv_accumulator_is_exact_nchw():
    """The raw i32 accumulator of an NCHW conv (the direct kernel), padding at a zero point."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, 300, 5, 4), "u8")
    w = b.input("w", (3, 300, 3, 3), "i8")
    acc = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1,
                out_dtype="i32", pad_value=128)
    graph = b.build([acc])
    (k,) = check(graph, [_ints(rng, "u8", (1, 300, 5, 4)), _ints(rng, "i8", (3, 300, 3, 3))], seed, kinds=["conv"])
    assert k.name.startswith("aotc_conv_int_")
    assert compile_device(codegen.module_source([k]), "sm_80")[:4] == b"\x7fELF"


def _requant_to(b, rng, acc, out, spread):
    return requantize_epilogue(b, rng, acc, acc.type.rank - 1, out, spread)


def test_int8_mobilenet_block_keeps_each_conv_exact():
    """expand 1x1 -> depthwise 3x3 -> project 1x1, all int8: the float fusions (depthwise staging with the
    expansion, depthwise+pointwise in one kernel, chains) must leave 8-bit convs to the integer kernels."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, 9, 9, 8), "u8")
    conv = dict(dilations=(1, 1), layout="NHWC", out_dtype="i32")
    e = b.add("convolution", x, b.constant(_ints(rng, "i8", (48, 1, 1, 8)), "we"), strides=(1, 1),
              padding=((0, 0), (0, 0)), groups=1, **conv)
    e = _requant_to(b, rng, e, "u8", 4000.0)
    d = b.add("convolution", e, b.constant(_ints(rng, "i8", (48, 3, 3, 1)), "wd"), strides=(2, 2),
              padding=((1, 1), (1, 1)), groups=48, pad_value=121, **conv)
    d = _requant_to(b, rng, d, "u8", 3000.0)
    p = b.add("convolution", d, b.constant(_ints(rng, "i8", (16, 1, 1, 48)), "wp"), strides=(1, 1),
              padding=((0, 0), (0, 0)), groups=1, **conv)
    graph = b.build([_requant_to(b, rng, p, None, 20000.0)])
    kernels = check(graph, [_ints(rng, "u8", (1, 9, 9, 8))], seed, rtol=1e-6, atol=1e-6,
                    kinds=["conv", "conv", "conv"])
    assert sorted(k.name.rsplit("_", 1)[0] for k in kernels) == ["aotc_conv_int", "aotc_dot_mma8", "aotc_dot_mma8"]


def test_int8_attention_dots_are_the_int8_attention_kernel():
    """QK^T and PV with 8-bit operands (ModelOpt quantizes both): one int8 attention kernel
    (templates/attention_int8_mma.cu), not two int8 GEMMs around a softmax, nor float flash attention."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    shape = (2, 20, 32)
    q, k, v = (b.input(n, shape, "i8") for n in "qkv")
    dims = dict(lhs_batch=(0,), rhs_batch=(0,), out_dtype="i32")
    s = b.add("dot_general", q, k, lhs_contract=(2,), rhs_contract=(2,), **dims)          # (2, 20, 20)
    s = b.add("mul", b.add("convert", s, dtype="f32"), _scalar(b, 1e-4, s.shape))
    m = b.add("reduce", s, axes=(2,), kind="max")
    e = b.add("exp", b.add("sub", s, _bcast(b, m, s.shape, (0, 1))))
    z = b.add("reduce", e, axes=(2,), kind="sum")
    p = b.add("div", e, _bcast(b, z, s.shape, (0, 1)))
    pq = b.add("convert", b.add("round_even", b.add("mul", p, _scalar(b, 255.0, s.shape))), dtype="u8")
    o = b.add("dot_general", pq, v, lhs_contract=(2,), rhs_contract=(1,), **dims)         # (2, 20, 32)
    graph = b.build([b.add("convert", o, dtype="f32")])
    ins = [_ints(rng, "i8", shape) for _ in range(3)]
    got_kernels = check(graph, ins, seed, rtol=0, atol=2 * 128 * 1.0001)   # a u8 probability may round 1 apart
    assert [kk.name.split("_")[1:4] for kk in got_kernels] == [["attention", "int8", "mma"]]


def test_int8_gemm_over_a_dynamic_batch_and_sequence():
    """(batch*seq) x K activations against int8 weights, sizes as kernel arguments: one build, several shapes."""
    from aotc.ir import dims as D
    from aotc.ir.dims import DimRange, dim_ranges, sym
    from tests.helpers.host_run import run_on_host
    rng, seed = fresh_rng()
    bsym, ssym = sym("batch"), sym("seq")
    ranges = {"batch": DimRange(1, 4), "seq": DimRange(1, 200)}
    ws = _ints(rng, "i8", (70, 40))
    with dim_ranges(ranges):
        b = GraphBuilder()
        x = b.input("x", (bsym, ssym, 40), "i8")
        acc = b.add("dot_general", x, b.constant(ws, "w"), lhs_batch=(), rhs_batch=(), lhs_contract=(2,),
                    rhs_contract=(1,), out_dtype="i32")
        graph = b.build([requantize_epilogue(b, rng, acc, 2, "i8", 30000.0)])
        graph.dims = ranges
        sizes = [(1, 1), (3, 77), (4, 200)]
        sets = [[_ints(rng, "i8", (n, s, 40))] for n, s in sizes]
        results, kernels, _ = run_on_host(graph, None, shapes=sets)
    assert any(k.name.startswith("aotc_dot_mma8_") and k.dims for k in kernels)
    for ins, got, size in zip(sets, results, sizes):
        np.testing.assert_array_equal(got[0], interpret(graph, ins)[0], err_msg=f"at {size}, seed {seed}")
    assert D.symbols(graph.outputs[0].shape) == {"batch", "seq"}
