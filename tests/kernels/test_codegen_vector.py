"""Vectorized loop kernels (16-byte loads/stores) on the host emulation against the interpreter."""
import ml_dtypes
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _graph(rows, cols, dt):
    """tanh(x * y^T + bias): x is direct (vector loads), y^T and the bias broadcast are index math."""
    b = GraphBuilder()
    x, y, bias = b.input("x", (rows, cols), dt), b.input("y", (cols, rows), dt), b.input("bias", (cols,), dt)
    s = b.add("add", b.add("mul", x, b.add("transpose", y, permutation=(1, 0))),
              b.add("broadcast_in_dim", bias, shape=(rows, cols), broadcast_dimensions=(1,)))
    return b.build([b.add("tanh", s)])


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("offset", [0, 1])          # 1: x starts 2-4 bytes past 16-byte alignment
def test_vector_loop_matches_the_interpreter_aligned_or_not(dt, offset):
    rng, seed = fresh_rng()
    rows, cols = 50, 783                             # 39150 elements: a tail of 39150 % VEC
    graph = _graph(rows, cols, dt)
    flat = random_array(rng, (rows * cols + 1,)).astype(NP[dt])
    ins = [flat[offset:offset + rows * cols].reshape(rows, cols), random_array(rng, (cols, rows)).astype(NP[dt]),
           random_array(rng, (cols,)).astype(NP[dt])]
    (got,), (kern,), _ = run_on_host(graph, ins)
    assert kern.source.count("reinterpret_cast<const aotc_vec16") == 1      # x only: y^T and bias are index math
    tol = 1e-6 if dt == "f32" else 2e-2
    np.testing.assert_allclose(got.astype(np.float32), interpret(graph, ins)[0].astype(np.float32), rtol=tol,
                               atol=tol, err_msg=f"seed {seed}")


def test_small_or_byte_loops_stay_scalar():
    for shape, dt in [((4, 100), "f32"), ((64, 128), "u8")]:
        b = GraphBuilder()
        x = b.input("x", shape, dt)
        graph = b.build([b.add("add", x, x)])
        (kern,) = [codegen.generate(graph, r) for r in partition(graph)]
        assert "aotc_vec16" not in kern.source


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_vector_loop_is_16_byte_accesses_on_the_gpu(dt):
    graph = _graph(64, 256, dt)
    kernels = [codegen.generate(graph, r) for r in partition(graph)]
    ptx = compile_device(codegen.module_source(kernels), "compute_90").decode()
    assert "ld.global.v4" in ptx or "ld.global.nc.v4" in ptx
    assert "st.global.v4" in ptx


def test_loops_without_direct_inputs_or_with_huge_bodies_stay_scalar():
    """A transpose-only loop has nothing to load as vectors; a 40-way concat's body is too big to copy 4x."""
    b = GraphBuilder()
    x = b.input("x", (128, 64))
    parts = [b.input(f"p{i}", (8, 64)) for i in range(40)]
    y = b.input("y", (320, 64))                          # direct, but beside a 40-way concat
    graph = b.build([b.add("transpose", x, permutation=(1, 0)),
                     b.add("add", y, b.add("concatenate", *parts, dimension=0))])
    for kern in (codegen.generate(graph, r) for r in partition(graph)):
        assert "aotc_vec16" not in kern.source


@pytest.mark.parametrize("n,vector", [(64, True), (63, False)])
def test_an_input_read_transposed_as_well_is_a_vector_input_only_by_rows(n, vector):
    """x^T + exp(x): with rows of whole vectors (64) exp(x)'s read is one row vector and x^T's stays index
    math; without (63), x is not a flat vector input (its element i is not output element i's only read)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (n, n))
    graph = b.build([b.add("add", b.add("transpose", x, permutation=(1, 0)), b.add("exp", x))])
    ins = [random_array(rng, (n, n))]
    (got,), (kern,), _ = run_on_host(graph, ins)
    assert kern.source.count("reinterpret_cast<const aotc_vec16") == (1 if vector else 0)
    np.testing.assert_allclose(got, interpret(graph, ins)[0], rtol=1e-6, atol=1e-6, err_msg=f"seed {seed}")


@pytest.mark.parametrize("start,limit,dense", [
    ((0, 0, 64), (2, 32, 192), False),          # columns of a merged GEMM's result (Phi's fc1 beside Q/K/V)
    ((0, 0, 0), (2, 32, 128), False),
    ((1, 0, 0), (2, 32, 128), False),           # a leading size-1 dim does not make columns dense
    ((0, 8, 0), (2, 40, 192), False),           # whole rows of each batch entry, two runs
    ((1, 8, 0), (2, 40, 192), True),            # whole rows of one batch entry: one run
    ((0, 0, 0), (1, 48, 192), True)])
def test_a_sliced_input_is_a_vector_input_only_when_dense(start, limit, dense):
    """A slice of a kernel input is a view (a pointer to its first element, the source's strides):
    element i of a column slice is not at pointer + i, so it keeps the scalar index math."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 48, 192))
    s = b.add("slice", x, start=start, limit=limit, stride=(1, 1, 1))
    shape = tuple(h - l for l, h in zip(start, limit))
    graph = b.build([b.add("tanh", b.add("add", s, b.input("y", shape)))])
    ins = [random_array(rng, (2, 48, 192)), random_array(rng, shape)]
    (got,), (kern,), _ = run_on_host(graph, ins)
    assert kern.views, "the slice is not a view"
    assert kern.source.count("reinterpret_cast<const aotc_vec16") == (2 if dense else 1)
    np.testing.assert_allclose(got, interpret(graph, ins)[0], rtol=1e-6, atol=1e-6, err_msg=f"seed {seed}")


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_a_root_one_vector_wide_stores_vectors_without_a_direct_input(dt):
    """NCHW -> NHWC of a 4-channel f32 (8-channel f16) image: a thread stores one pixel's channels as one
    16-byte vector, each of its loads reading consecutive pixels of one plane across the warp."""
    rng, seed = fresh_rng()
    c = 4 if dt == "f32" else 8
    b = GraphBuilder()
    x = b.input("x", (2, c, 37, 29), dt)
    graph = b.build([b.add("transpose", x, permutation=(0, 2, 3, 1))])
    ins = [random_array(rng, (2, c, 37, 29)).astype(np.float32 if dt == "f32" else np.float16)]
    (got,), (kern,), _ = run_on_host(graph, ins)
    assert f"aotc_vec16<{'float' if dt == 'f32' else '__half'}> res" in kern.source
    np.testing.assert_array_equal(got, interpret(graph, ins)[0], err_msg=f"seed {seed}")
