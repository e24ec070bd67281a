"""f64 GEMMs and convolutions sum in double: interpreter, host-emulated kernels and NVRTC.

A 512-deep f64 dot or conv accumulated in f32 is off by about 1e-7 of its
condition sum(|a| * |b|); in double, by about 1e-14. Every check here bounds the
error by 1e-12 of that sum, so an f32 accumulator anywhere fails it (the first
test shows that it would). Fresh random inputs, seed in the message; outputs are
poisoned by run_on_host.
"""
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels.codegen import generate, module_source
from aotc.kernels.nvrtc_compile import compile_device
from aotc.kernels.resources import check_kernels
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng

TOL = 1e-12


def _assert_double_close(got, want, bound, seed, what):
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert got.dtype == np.float64, f"{what}: {got.dtype}"
    assert np.all(err <= TOL * bound), (f"{what}, seed {seed}: at {worst} got {got[worst]!r}, want {want[worst]!r}, "
                                        f"error {err[worst] / bound[worst]:.3g} of sum |a*b|")


def _gemm_graph(m, k, n):
    b = GraphBuilder()
    x = b.input("x", (m, k), "f64")
    w = b.input("w", (k, n), "f64")
    d = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    return b.build([b.add("add", d, b.constant(np.full((m, n), 0.5)))])


def _conv_graph(layout, xshape, wshape):
    b = GraphBuilder()
    x = b.input("x", xshape, "f64")
    w = b.input("w", wshape, "f64")
    c = b.add("convolution", x, w, strides=(1, 1), dilations=(1, 1), padding=((0, 1), (1, 0)), groups=1,
              layout=layout)
    return b.build([c])


def _conv_numpy(x, w, pad):
    """NCHW f64 reference: x (N, C, H, W), w (O, C, KH, KW), 'pad' as in _conv_graph, stride 1."""
    xp = np.pad(x, [(0, 0), (0, 0), pad[0], pad[1]])
    kh, kw = w.shape[2:]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out


def test_gemm_512_deep_sums_in_double_on_host_and_in_interpreter():
    rng, seed = fresh_rng()
    m, k, n = 50, 512, 70                       # tiles of 64 broken on m and n; K = 32 tiles of 16
    x, w = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    graph = _gemm_graph(m, k, n)
    want = x @ w + 0.5
    bound = np.abs(x) @ np.abs(w) + 0.5
    f32_sum = (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float64) + 0.5
    assert np.any(np.abs(f32_sum - want) > TOL * bound), "the test cannot tell f32 sums from double"
    (ref,) = interpret(graph, [x, w])
    _assert_double_close(ref, want, bound, seed, "interpreter vs numpy")
    (got,), kernels, _ = run_on_host(graph, [x, w])
    _assert_double_close(got, want, bound, seed, "host kernel vs numpy")
    _assert_double_close(got, ref, bound, seed, "host kernel vs interpreter")
    dot = [kn for kn in kernels if kn.name.startswith("aotc_dot_")]
    assert len(dot) == 1 and dot[0].splits == 1, "an f64 GEMM never splits K (the workspace holds f32)"
    assert "double acc[4][4]" in dot[0].source and "fma(av[i], bw[j], acc[i][j])" in dot[0].source


def test_batched_dot_with_transposed_rhs_sums_in_double():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (3, 17, 600), "f64")
    y = b.input("y", (3, 33, 600), "f64")
    graph = b.build([b.add("dot_general", x, y, lhs_batch=(0,), rhs_batch=(0,), lhs_contract=(2,),
                           rhs_contract=(2,))])
    xs, ys = rng.standard_normal((3, 17, 600)), rng.standard_normal((3, 33, 600))
    want = np.einsum("bmk,bnk->bmn", xs, ys)
    bound = np.einsum("bmk,bnk->bmn", np.abs(xs), np.abs(ys))
    (got,), _, _ = run_on_host(graph, [xs, ys])
    _assert_double_close(got, want, bound, seed, "batched host kernel vs numpy")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_512_deep_sums_in_double(layout):
    rng, seed = fresh_rng()
    x, w = rng.standard_normal((2, 128, 7, 6)), rng.standard_normal((5, 128, 2, 2))    # 128 x 2 x 2 = 512 taps
    pad = ((0, 1), (1, 0))
    want = _conv_numpy(x, w, pad)
    bound = _conv_numpy(np.abs(x), np.abs(w), pad)
    if layout == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        want, bound = want.transpose(0, 2, 3, 1), bound.transpose(0, 2, 3, 1)
    graph = _conv_graph(layout, x.shape, w.shape)
    (ref,) = interpret(graph, [x, w])
    _assert_double_close(ref, want, bound, seed, f"{layout} interpreter vs numpy")
    (got,), kernels, _ = run_on_host(graph, [x, w])
    _assert_double_close(got, want, bound, seed, f"{layout} host kernel vs numpy")
    _assert_double_close(got, ref, bound, seed, f"{layout} host kernel vs interpreter")
    (conv,) = [kn for kn in kernels if "conv" in kn.name or "dot" in kn.name]
    assert conv.name.startswith("aotc_conv_"), "an f64 conv runs the direct kernel, whatever its layout"
    assert "double acc = 0.0f;" in conv.source and "acc = fma(" in conv.source


def test_f64_softmax_and_layernorm_reduce_in_double():
    """Row regions and a GEMM's norm prologue reduce in float: f64 rows take the reduce kernels."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (9, 700), "f64")
    w = b.input("w", (700, 20), "f64")

    def per_row(v):
        return b.add("broadcast_in_dim", v, shape=(9, 700), broadcast_dimensions=(0,))

    mean = per_row(b.add("div", b.add("reduce", x, kind="sum", axes=(1,)), b.constant(np.full((9,), 700.0))))
    xc = b.add("sub", x, mean)
    e = b.add("exp", b.add("sub", xc, per_row(b.add("reduce", xc, kind="max", axes=(1,)))))
    den = per_row(b.add("reduce", e, kind="sum", axes=(1,)))
    soft = b.add("div", e, den)
    proj = b.add("dot_general", xc, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    graph = b.build([soft, proj])
    regions = partition(graph)
    assert not [r for r in regions if r.kind == "row"], [r.kind for r in regions]
    xs, ws = rng.standard_normal((9, 700)) + 1e3, rng.standard_normal((700, 20))
    want = interpret(graph, [xs, ws])
    got, _, _ = run_on_host(graph, [xs, ws], regions=regions)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=0, err_msg=f"softmax, seed {seed}")
    xcs = xs - xs.mean(axis=1, keepdims=True)
    _assert_double_close(got[1], want[1], np.abs(xcs) @ np.abs(ws), seed, "centred projection")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_the_f64_gemm_and_conv(arch):
    kernels = []
    for graph in (_gemm_graph(50, 512, 70), _conv_graph("NHWC", (2, 7, 6, 128), (5, 2, 2, 128)),
                  _conv_graph("NCHW", (2, 128, 7, 6), (5, 128, 2, 2))):
        kernels += [generate(graph, r) for r in partition(graph)]
    source = module_source(kernels)
    cubin = compile_device(source, arch)
    assert cubin[:4] == b"\x7fELF"
    usage = check_kernels(kernels, arch, cubin)          # the double tiles: 40 KiB static smem, within 48 KiB
    for kn in kernels:
        assert kn.name.encode() in cubin and usage[kn.name].local_bytes == 0, f"{kn.name} spills: {usage[kn.name]}"
    ptx = compile_device(source, arch.replace("sm_", "compute_")).decode()
    # every product is one fma.rn.f64, as the host's libm fma rounds it: no separate f64 multiply, no f32 math
    assert "fma.rn.f64" in ptx and "mul.f64" not in ptx and "mul.rn.f64" not in ptx and ".f32 " not in ptx
