"""Every kernel family, generated and run on the host emulation, against the interpreter.

Shapes break the tiles (3, 50, 783 on some axis); outputs are poisoned with NaN
so an unwritten element fails; inputs are fresh random draws (seed in the
message; set AOTC_TEST_SEED to replay).
"""
import math

import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir import ops
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from aotc.kernels.codegen import generate
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array


def check(graph, inputs, seed, rtol=1e-5, atol=1e-5, kinds=None):
    want = interpret(graph, inputs)
    got, kernels, _ = run_on_host(graph, inputs)
    if kinds is not None:
        assert sorted(k.region.kind for k in kernels) == sorted(kinds)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if g.dtype.kind == "f":
            assert np.isfinite(g).all() == np.isfinite(w).all(), f"output {i}: unwritten or non-finite (seed {seed})"
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}, seed {seed}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}, seed {seed}")
    return kernels


def test_loop_elementwise_and_index_math():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (3, 50, 7))
    y = b.input("y", (7, 50))
    idx = b.input("idx", (4,), "i64")
    yt = b.add("transpose", y, permutation=(1, 0))                       # (50, 7)
    yb = b.add("broadcast_in_dim", yt, shape=(3, 50, 7), broadcast_dimensions=(1, 2))
    s = b.add("logistic", b.add("mul", x, yb))
    e = b.add("erf", b.add("sub", s, b.add("tanh", x)))
    big = b.add("compare", e, b.add("abs", yb), direction="GT")
    sel = b.add("select", big, e, b.add("exp", b.add("neg", x)))
    r = b.add("reshape", sel, shape=(150, 7))
    sl = b.add("slice", r, start=(3, 1), limit=(150, 7), stride=(4, 2))    # (37, 3)
    pv = b.constant(np.float32(-2.5))
    pd = b.add("pad", sl, pv, low=(1, 0), high=(2, 3))                     # (40, 6)
    io = b.add("convert", b.add("iota", shape=(40, 6), dimension=0, dtype="i32"), dtype="f32")
    cat = b.add("concatenate", b.add("add", pd, io), pd, dimension=1)      # (40, 12)
    g = b.add("gather", x, idx, axis=1)                                     # (3, 4, 7)
    graph = b.build([cat, g])
    xs, ys = random_array(rng, (3, 50, 7)), random_array(rng, (7, 50))
    # keep `compare` away from ties: erf and tanh on the host may differ from numpy's by an ulp,
    # which would flip e > |y| and select the other branch
    erf = np.vectorize(math.erf)
    for _ in range(100):
        yb_np = np.broadcast_to(ys.T, xs.shape)
        e_np = erf(1 / (1 + np.exp(-xs * yb_np)) - np.tanh(xs))
        near = np.abs(e_np - np.abs(yb_np)) < 1e-3
        if not near.any():
            break
        ys = (ys + 0.01 * near.any(axis=0).T).astype(np.float32)
    inputs = [xs, ys, rng.integers(-50, 50, (4,)).astype(np.int64)]
    check(graph, inputs, seed, kinds=["loop", "loop"])


@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_loop_integer_ops(dtype):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (783,), dtype)
    y = b.input("y", (783,), dtype)
    q = b.add("div", x, y)
    r = b.add("rem", x, y)
    m = b.add("max", b.add("min", q, r), b.add("neg", y))
    f = b.add("convert", m, dtype="f32")
    graph = b.build([q, r, m, f])
    np_dt = np.int32 if dtype == "i32" else np.int64
    check(graph, [random_array(rng, (783,), np_dt), random_array(rng, (783,), np_dt, 1, 9)], seed)


@pytest.mark.parametrize("shape,axes,kind", [
    ((4, 783), (1,), "sum"),
    ((50, 3), (1,), "max"),
    ((3, 50, 4), (0, 2), "min"),
    ((2, 4096), (1,), "sum"),
    ((5, 6, 7), (0, 1, 2), "sum"),
    ((3, 5), (0,), "prod"),
    ((783, 256), (1,), "max"),          # the longest row a warp takes, rows not a multiple of 8
    ((9, 257), (1,), "sum"),            # the shortest a block takes
    ((2, 3, 3, 50), (1, 2), "sum"),     # NHWC pooling: a thread per output walks the window
    ((1, 7, 7, 64), (1, 2), "max"),
    ((3, 65, 40), (1,), "sum"),         # an extent past reduce_column's: a warp per row
])
def test_reduction(shape, axes, kind):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", shape)
    pre = b.add("exp", b.add("mul", x, x)) if kind != "prod" else x       # prologue
    r = b.add("reduce", pre, kind=kind, axes=axes)
    out = b.add("sqrt", b.add("abs", r))                                   # epilogue
    graph = b.build([out])
    low, high = (0.5, 1.5) if kind == "prod" else (-1, 1)
    (k,) = check(graph, [random_array(rng, shape, low=low, high=high)], seed, rtol=2e-5, kinds=["reduction"])
    extent = math.prod(shape[a] for a in axes)
    column = len(shape) - 1 not in axes and extent <= codegen.COLUMN_MAX
    assert k.name.startswith("aotc_reduce_column_") == column
    assert k.name.startswith("aotc_reduce_warp_") == (not column and extent <= codegen.WARP_ROW_MAX)


@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_warp_reduction_of_integers(dtype):
    """Integer accumulators through the warp butterfly (argmax-free integer sums, e.g. counting masks)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (37, 50), dtype)
    graph = b.build([b.add("reduce", x, kind="sum", axes=(1,)), b.add("reduce", x, kind="max", axes=(1,))])
    ks = check(graph, [rng.integers(-1000, 1000, (37, 50)).astype(dtype.replace("i", "int"))], seed,
               kinds=["reduction", "reduction"])
    assert all(k.name.startswith("aotc_reduce_warp_") for k in ks)


def test_warp_row_kernels_compile_for_the_gpu():
    """reduce_warp.cu, reduce_column.cu and row_warp.cu through NVRTC (f32 and i64 accumulators), with their
    resource check."""
    from aotc.kernels.nvrtc_compile import compile_device
    from aotc.kernels.resources import check_kernels
    b = GraphBuilder()
    x = b.input("x", (40, 30))
    i = b.input("i", (40, 30), "i64")
    p = b.input("p", (2, 5, 5, 40))
    graph = b.build([_softmax(b, x, (1,)), b.add("reduce", i, kind="sum", axes=(1,)),
                     b.add("reduce", p, kind="max", axes=(1, 2))])
    kernels = [generate(graph, r) for r in partition(graph)]
    assert sorted(k.name.split("_")[1] + "_" + k.name.split("_")[2] for k in kernels) == \
        ["reduce_column", "reduce_warp", "row_warp"]
    cubin = compile_device(codegen.module_source(kernels), "sm_90")
    usage = check_kernels(kernels, "sm_90", cubin)
    assert all(usage[k.name].static_smem == 0 for k in kernels)      # no shared memory: warps only


@pytest.mark.parametrize("m,n,k,batch", [(3, 50, 783, ()), (130, 70, 33, ()), (50, 3, 17, (2,)), (33, 47, 64, (2, 3)), (1, 1, 1, ())])
def test_dot_with_prologue_and_epilogue(m, n, k, batch):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    a = b.input("a", batch + (m, k))
    wt = b.input("wt", batch + (n, k))                  # transposed operand: folded into the load
    bias = b.input("bias", (n,))
    nb = len(batch)
    w = b.add("transpose", wt, permutation=tuple(range(nb)) + (nb + 1, nb))
    d = b.add("dot_general", a, w, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
              lhs_contract=(nb + 1,), rhs_contract=(nb,))
    bb = b.add("broadcast_in_dim", bias, shape=d.shape, broadcast_dimensions=(len(d.shape) - 1,))
    out = b.add("tanh", b.add("add", d, bb))
    graph = b.build([out])
    # a scaled by 1/sqrt(k): the sums stay O(1), so tanh does not saturate and hide errors, and the f32
    # rounding of a 783-term sum (any order: tiles, split-K partials) stays well inside the tolerance
    a_in = random_array(rng, batch + (m, k)) / np.float32(np.sqrt(k))
    check(graph, [a_in, random_array(rng, batch + (n, k)), random_array(rng, (n,))],
          seed, rtol=1e-4, atol=1e-5, kinds=["dot"])


@pytest.mark.parametrize("xshape,wshape,strides,pads,dil,groups", [
    ((2, 3, 9, 11), (4, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((1, 4, 10, 7), (6, 2, 3, 2), (2, 1), ((0, 1), (2, 0)), (2, 1), 2),
    ((1, 6, 8, 8), (6, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 6),     # depthwise
    ((2, 3, 50), (5, 3, 4), (3,), ((2, 1),), (1,), 1),                        # 1-D
    ((1, 2, 4, 5, 3), (3, 2, 2, 2, 2), (1, 1, 1), ((1, 0), (0, 1), (1, 1)), (1, 1, 1), 1),  # 3-D
])
def test_conv_with_epilogue(xshape, wshape, strides, pads, dil, groups):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", xshape)
    w = b.constant(random_array(rng, wshape), "w")
    bias = b.constant(random_array(rng, (wshape[0],)), "b")
    c = b.add("convolution", x, w, strides=strides, padding=pads, dilations=dil, groups=groups)
    bb = b.add("broadcast_in_dim", bias, shape=c.shape, broadcast_dimensions=(1,))
    zero = b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=c.shape, broadcast_dimensions=())
    out = b.add("max", b.add("add", c, bb), zero)
    graph = b.build([out])
    check(graph, [random_array(rng, xshape)], seed, rtol=1e-4, atol=1e-5, kinds=["conv"])


@pytest.mark.parametrize("kind,window,strides,pads", [
    ("max", (1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1))),
    ("sum", (1, 1, 2, 3), (1, 1, 2, 1), ((0, 0), (0, 0), (0, 1), (1, 0))),
    ("max", (1, 1, 50, 3), (1, 1, 1, 1), ((0, 0),) * 4),
])
def test_window(kind, window, strides, pads):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 3, 50, 9))
    pre = b.add("exp", x)
    r = b.add("reduce_window", pre, kind=kind, window=window, strides=strides, padding=pads, dilations=(1,) * 4)
    out = b.add("log", r)
    graph = b.build([out])
    check(graph, [random_array(rng, (2, 3, 50, 9))], seed, rtol=1e-5, kinds=["window"])


def test_copies_for_inputs_constants_and_repeated_outputs():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (3, 5))
    c = b.constant(random_array(rng, (2, 2)), "c")
    y = b.add("exp", x)
    graph = b.build([x, c, y, y])
    kernels = check(graph, [random_array(rng, (3, 5))], seed)
    assert len(kernels) == 4       # exp, then copies for the input, the constant and the repeat


def test_f16_storage_computes_in_f32():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (50, 3), "f16")
    y = b.add("convert", b.add("tanh", x), dtype="f32")
    s = b.add("reduce", x, kind="sum", axes=(1,))
    graph = b.build([y, s])
    check(graph, [random_array(rng, (50, 3), np.float16)], seed, rtol=2e-3, atol=2e-3)


def _softmax(b, x, axes):
    r = len(x.shape) - len(axes)
    m = b.add("reduce", x, kind="max", axes=axes)
    mb = b.add("broadcast_in_dim", m, shape=x.shape, broadcast_dimensions=tuple(range(r)))
    e = b.add("exp", b.add("sub", x, mb))
    s = b.add("reduce", e, kind="sum", axes=axes)
    return b.add("div", e, b.add("broadcast_in_dim", s, shape=x.shape, broadcast_dimensions=tuple(range(r))))


@pytest.mark.parametrize("shape,axes", [((3, 783), (1,)), ((50, 3), (1,)), ((2, 4096), (1,)), ((2, 3, 5, 7), (2, 3)),
                                        ((17, 256), (1,)), ((4, 257), (1,))])
def test_row_softmax_is_one_kernel(shape, axes):
    """Short rows get a warp each (row_warp.cu), long ones a block (row.cu)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", shape)
    graph = b.build([_softmax(b, b.add("mul", x, x), axes)])
    (k,) = check(graph, [random_array(rng, shape)], seed, rtol=1e-5, atol=1e-6, kinds=["row"])
    extent = math.prod(shape[a] for a in axes)
    assert k.name.startswith("aotc_row_warp_") == (extent <= codegen.WARP_ROW_MAX)


@pytest.mark.parametrize("rows,cols", [(3, 50), (7, 783)])
def test_row_layernorm_with_keepdims_reshape(rows, cols):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (rows, cols))
    g = b.input("g", (cols,))
    n = b.constant(np.float32(cols))
    mean = b.add("div", b.add("reduce", x, kind="sum", axes=(1,)), b.add("broadcast_in_dim", n, shape=(rows,),
                                                                           broadcast_dimensions=()))
    mean_k = b.add("reshape", mean, shape=(rows, 1))                    # keepdims form
    d = b.add("sub", x, b.add("broadcast_in_dim", mean_k, shape=(rows, cols), broadcast_dimensions=(0, 1)))
    var = b.add("reduce", b.add("mul", d, d), kind="sum", axes=(1,))
    eps = b.add("broadcast_in_dim", b.constant(np.float32(1e-5)), shape=(rows,), broadcast_dimensions=())
    nb = b.add("broadcast_in_dim", n, shape=(rows,), broadcast_dimensions=())
    inv = b.add("rsqrt", b.add("add", b.add("div", var, nb), eps))
    y = b.add("mul", b.add("mul", d, b.add("broadcast_in_dim", inv, shape=(rows, cols), broadcast_dimensions=(0,))),
              b.add("broadcast_in_dim", g, shape=(rows, cols), broadcast_dimensions=(1,)))
    graph = b.build([y])
    check(graph, [random_array(rng, (rows, cols)), random_array(rng, (cols,))], seed, rtol=1e-4, atol=1e-5,
          kinds=["row"])


def test_reduction_with_reshaping_epilogue():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 50, 3, 3))
    r = b.add("reshape", b.add("reduce", x, kind="sum", axes=(2, 3)), shape=(2, 50, 1, 1))
    nine = b.add("broadcast_in_dim", b.constant(np.float32(9)), shape=(2, 50, 1, 1), broadcast_dimensions=())
    graph = b.build([b.add("div", r, nine)])
    check(graph, [random_array(rng, (2, 50, 3, 3))], seed, kinds=["reduction"])


def test_dot_with_reshaping_epilogue():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    a = b.input("a", (70, 33))
    w = b.input("w", (33, 6))
    d = b.add("dot_general", a, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    r = b.add("reshape", d, shape=(35, 12))
    graph = b.build([b.add("tanh", r)])
    check(graph, [random_array(rng, (70, 33)), random_array(rng, (33, 6))], seed, rtol=1e-4, kinds=["dot"])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m,n,k,batch", [(50, 70, 33, ()), (3, 8, 16, (2,)), (130, 17, 100, ())])
def test_tensor_core_dot(dtype, m, n, k, batch):
    """f16/bf16 GEMMs use the mma.sync kernel; its host fallback must agree with the interpreter."""
    import ml_dtypes
    rng, seed = fresh_rng()
    np_dt = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    b = GraphBuilder()
    a = b.input("a", batch + (m, k), dtype)
    w = b.input("w", batch + (n, k), dtype)
    nb = len(batch)
    d = b.add("dot_general", a, w, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
              lhs_contract=(nb + 1,), rhs_contract=(nb + 1,))
    out = b.add("convert", b.add("mul", d, d), dtype="f32")
    graph = b.build([out])
    kernels = check(graph, [random_array(rng, batch + (m, k)).astype(np_dt),
                            random_array(rng, batch + (n, k)).astype(np_dt)], seed, rtol=3e-2, atol=3e-2)
    assert kernels[0].name.startswith("aotc_dot_mma_")
    from aotc.kernels import codegen
    from aotc.kernels.nvrtc_compile import compile_device
    ptx = compile_device(codegen.module_source(kernels), "compute_90")
    assert b"mma.sync.aligned.m16n8k16" in ptx


@pytest.mark.parametrize("m,n,k,batch", [(50, 70, 33, ()), (3, 8, 16, (2,)), (130, 17, 100, ())])
def test_tf32_tensor_core_dot(m, n, k, batch):
    """precision='tf32' f32 GEMMs run mma.m16n8k8.tf32; operands round exactly as the op table's reference."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    a = b.input("a", batch + (m, k))
    w = b.input("w", batch + (n, k))
    nb = len(batch)
    d = b.add("dot_general", a, w, lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)),
              lhs_contract=(nb + 1,), rhs_contract=(nb + 1,), precision="tf32")
    graph = b.build([b.add("tanh", d)])
    ins = [random_array(rng, batch + (m, k)), random_array(rng, batch + (n, k))]
    kernels = check(graph, ins, seed, rtol=1e-4, atol=1e-5)     # only the summation order differs
    assert kernels[0].name.startswith("aotc_dot_tf32_")
    full = np.einsum("...mk,...nk->...mn", *ins)
    (tf32,) = ops.reference("dot_general", graph.nodes[0].attrs, *ins)
    err = np.abs(tf32 - full).max() / np.abs(full).max()
    assert 1e-6 < err < 3e-3, err                 # tf32 really rounds (11-bit significands), and no more
    from aotc.kernels import codegen
    from aotc.kernels.nvrtc_compile import compile_device
    ptx = compile_device(codegen.module_source(kernels), "compute_90")
    assert b"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx and b"cvt.rna.tf32.f32" in ptx


def test_row_kernel_for_jax_style_log_softmax():
    """jax.nn.log_softmax: max clamped by -inf, keepdims via a unit-dim broadcast; one row kernel."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (5, 783))
    m = b.add("reduce", x, axes=(1,), kind="max")
    m = b.add("max", b.add("broadcast_in_dim", b.constant(np.float32(-np.inf)), shape=(5,), broadcast_dimensions=()), m)
    sh = b.add("sub", x, b.add("broadcast_in_dim", m, shape=(5, 783), broadcast_dimensions=(0,)))
    s = b.add("reduce", b.add("exp", sh), axes=(1,), kind="sum")
    lg = b.add("log", b.add("broadcast_in_dim", s, shape=(5, 1), broadcast_dimensions=(0,)))
    out = b.add("sub", sh, b.add("broadcast_in_dim", lg, shape=(5, 783), broadcast_dimensions=(0, 1)))
    graph = b.build([out])
    check(graph, [random_array(rng, (5, 783)) * 10], seed, rtol=1e-5, atol=1e-5, kinds=["row"])


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("rows,k,n,precision", [
    ((3,), 50, 3, None), ((50,), 783, 70, None), ((2, 65), 33, 17, None),   # rows across two m tiles
    ((130,), 64, 65, "tf32")])
def test_gemm_with_norm_prologue(norm, rows, k, n, precision):
    """LayerNorm/RMSNorm recomputed in the GEMM's lhs loads: the row statistics pre-pass."""
    from tests.helpers.norms import layer_norm, matmul, rms_norm
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x, g = b.input("x", rows + (k,)), b.input("g", (k,))
    y = layer_norm(b, x, g, b.input("beta", (k,))) if norm == "layer" else rms_norm(b, x, g)
    d = matmul(b, y, b.input("w", (k, n)), **({"precision": precision} if precision else {}))
    graph = b.build([b.add("tanh", d)])
    ins = [random_array(rng, rows + (k,), low=-3, high=5), random_array(rng, (k,))]
    ins += [random_array(rng, (k,))] if norm == "layer" else []
    # rsqrtf vs 1/sqrt may flip an operand's tf32 rounding (2^-10 relative, on |y| up to ~3): a few such
    # flips in one 64-term sum reach ~5e-3; a wrong normalization would be off by O(1)
    tol = 1e-2 if precision else 2e-4
    kernels = check(graph, ins + [random_array(rng, (k, n))], seed, rtol=tol, atol=tol, kinds=["dot"])
    assert "aotc_rs[" in kernels[0].source


def test_two_gemms_recompute_the_norm_they_share():
    """Two LayerNorms of one tensor, merged by CSE up to their affine parts: each GEMM's pre-pass runs the
    shared statistics, its loads its own gain and bias."""
    from aotc.hlo_passes import cse
    from tests.helpers.norms import layer_norm, matmul
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (70, 50))
    outs = [matmul(b, layer_norm(b, x, b.input(f"g{i}", (50,)), b.input(f"b{i}", (50,))), b.input(f"w{i}", (50, 33)))
            for i in range(2)]
    graph = cse.run(b.build(outs))
    ins = [random_array(rng, (70, 50), low=-3, high=5)] + [random_array(rng, s) for s in [(50,), (50,), (50, 33)] * 2]
    kernels = check(graph, ins, seed, rtol=2e-4, atol=2e-4, kinds=["dot", "dot"])
    assert all("aotc_rs[" in k.source for k in kernels)


def test_f16_gemm_with_norm_prologue():
    """The tensor-core kernel takes the pre-pass too; the norm computes in f32 from f16 storage."""
    from tests.helpers.norms import matmul, rms_norm
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x, g, w = b.input("x", (70, 48), "f16"), b.input("g", (48,), "f16"), b.input("w", (48, 40), "f16")
    graph = b.build([b.add("convert", matmul(b, rms_norm(b, x, g), w), dtype="f32")])
    ins = [random_array(rng, s).astype(np.float16) for s in [(70, 48), (48,), (48, 40)]]
    kernels = check(graph, ins, seed, rtol=3e-2, atol=3e-2, kinds=["dot"])
    assert kernels[0].name.startswith("aotc_dot_mma_") and "aotc_rs[" in kernels[0].source


def test_modelled_bytes_count_gathered_rows_not_the_table():
    """An embedding lookup reads the rows it gathers; a slice reads what it keeps."""
    b = GraphBuilder()
    table, ids = b.input("table", (1000, 16)), b.input("ids", (5,), "i32")
    x = b.input("x", (40, 16))
    rows = b.add("gather", table, ids, axis=0)
    part = b.add("slice", x, start=(8, 0), limit=(13, 16), stride=(1, 1))
    graph = b.build([b.add("add", rows, part)])
    (kernel,) = [generate(graph, r) for r in partition(graph)]
    assert kernel.bytes == 5 * 16 * 4 + 5 * 4 + 5 * 16 * 4 + 5 * 16 * 4    # rows, ids, slice, output


@pytest.mark.parametrize("source", ["input", "weight", "arena"])
def test_steps_reading_slices_share_one_kernel(source):
    """An RNN's steps read x[t]: as a view (a pointer to x[t]) every step is the same kernel text."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    steps, feats = 5, (3, 16)
    data = random_array(rng, (steps,) + feats)
    if source == "weight":
        x, ins = b.constant(data, "x"), []
    else:
        x, ins = b.input("x", (steps,) + feats), [data]
        if source == "arena":
            x = b.add("exp", x)
    h = b.input("h", feats)
    outs = []
    for t in range(steps):
        xt = b.add("reshape", b.add("slice", x, start=(t, 0, 0), limit=(t + 1,) + feats, stride=(1, 1, 1)),
                   shape=feats)
        h = b.add("tanh", b.add("add", xt, h))
        outs.append(h)
    cols = b.add("slice", x, start=(0, 1, 4), limit=(steps,) + feats[:1] + (12,), stride=(1, 1, 2))   # strided
    graph = b.build(outs + [b.add("neg", cols)])
    kernels = check(graph, ins + [random_array(rng, feats)], seed, rtol=1e-6, atol=1e-6)
    step_kernels = [k for k in kernels if k.region.root in outs]
    assert len({k.name for k in step_kernels}) == 1
    assert all(k.views for k in step_kernels)
    (view,) = next(k for k in kernels if k.region.root is graph.outputs[-1]).views.values()
    assert view[1] == (1 * 16 + 4) * 4                 # points at x[0, 1, 4]; the start leaves the index math


def test_merged_sibling_loops_write_both_results():
    """One kernel stores c and h (an LSTM cell's two states); both outputs poisoned beforehand."""
    from tests.fusion.test_regions import _lstm_like_cell
    rng, seed = fresh_rng()
    graph = _lstm_like_cell()
    kernels = check(graph, [random_array(rng, (4, 16))], seed, rtol=1e-5, atol=1e-6,
                    kinds=["loop", "reduction", "reduction"])
    assert "out1[" in kernels[0].source and kernels[0].extra_outputs


@pytest.mark.parametrize("case", ["conv", "depthwise", "dot", "reduce"])
def test_transposing_epilogue_writes_the_root_layout(case):
    """An anchor's epilogue may transpose (an NCHW model's output after its last NHWC conv) and reshape:
    the kernel maps each accumulator's index to the root's and stores there; one kernel, no copy."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    if case in ("conv", "depthwise"):
        c = 5 if case == "conv" else 6
        x = b.input("x", (2, 7, 9, 6))
        w = b.constant(random_array(rng, (c, 3, 3, 6 if case == "conv" else 1)))
        y = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1),
                  groups=1 if case == "conv" else 6, layout="NHWC")
        y = b.add("add", y, b.add("broadcast_in_dim", b.constant(random_array(rng, (c,))), shape=y.shape,
                                  broadcast_dimensions=(3,)))
        root = b.add("transpose", y, permutation=(0, 3, 1, 2))
        shapes = [(2, 7, 9, 6)]
    elif case == "dot":
        x, w = b.input("x", (3, 50, 20)), b.input("w", (20, 12))
        y = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
        t = b.add("transpose", b.add("reshape", b.add("tanh", y), shape=(3, 50, 3, 4)), permutation=(0, 2, 1, 3))
        root = b.add("reshape", t, shape=(9, 200))
        shapes = [(3, 50, 20), (20, 12)]
    else:
        x = b.input("x", (4, 6, 70))
        r = b.add("reduce", x, kind="sum", axes=(2,))
        root = b.add("exp", b.add("transpose", r, permutation=(1, 0)))
        shapes = [(4, 6, 70)]
    graph = b.build([root])
    kinds = {"conv": "conv", "depthwise": "conv", "dot": "dot", "reduce": "reduction"}[case]
    (k,) = check(graph, [random_array(rng, s) for s in shapes], seed, rtol=1e-4, atol=1e-5, kinds=[kinds])
    assert case != "depthwise" or k.name.startswith("aotc_depthwise_")


def test_a_slice_of_a_view_is_a_view():
    """A bidirectional RNN slices its direction's half, then the step: offsets add, strides multiply, and
    the steps of both directions still share one kernel text each."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    steps, width = 6, 40
    x = b.input("x", (steps, 3, 2 * width))
    h = b.input("h", (3, width))
    outs = []
    for d in range(2):
        half = b.add("slice", x, start=(0, 0, d * width), limit=(steps, 3, (d + 1) * width), stride=(1, 1, 1))
        hd = h
        for t in range(steps):
            tt = t if d == 0 else steps - 1 - t
            xt = b.add("reshape", b.add("slice", half, start=(tt, 0, 0), limit=(tt + 1, 3, width), stride=(1, 1, 1)),
                       shape=(3, width))
            hd = b.add("tanh", b.add("add", xt, hd))
            outs.append(hd)
    strided = b.add("slice", b.add("slice", x, start=(1, 0, 3), limit=(steps, 3, 2 * width), stride=(2, 1, 3)),
                    start=(1, 1, 2), limit=(3, 3, 26), stride=(1, 1, 2))                 # (2, 2, 12)
    graph = b.build(outs + [b.add("neg", strided)])
    kernels = check(graph, [random_array(rng, (steps, 3, 2 * width)), random_array(rng, (3, width))], seed,
                    rtol=1e-6, atol=1e-6)
    step_kernels = [k for k in kernels if k.region.root in outs]
    assert len({k.name for k in step_kernels}) <= 2          # one per direction, at most
    assert all(len(k.views) == 1 for k in step_kernels)
