"""Row-vector loop kernels (vector_rows.py) on the host emulation against the interpreter: inputs whose
rows the output's rows read through gathers, concatenations, reshapes, transposes and slices."""
import ml_dtypes
import numpy as np
import pytest

from aotc.ir.dims import DimRange, sym
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen
from aotc.fusion.regions import partition
from aotc.kernels.nvrtc_compile import compile_device
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng, random_array

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
ROW_LOAD = "*reinterpret_cast<const aotc_vec16"


def _check(graph, ins, loads: int, seed: int, exact: bool = True):
    (got,), (kern,), _ = run_on_host(graph, ins)
    assert kern.source.count(ROW_LOAD) == loads, kern.source
    want = interpret(graph, ins)[0]
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")
    else:
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2,
                                   err_msg=f"seed {seed}")
    return kern


def _embedding(dt: str, vocab: int, seq: int, width: int):
    """GPT-2's token + position embedding: a row gathered per token, plus a dense position table."""
    b = GraphBuilder()
    table, ids, pos = b.input("wte", (vocab, width), dt), b.input("ids", (1, seq), "i64"), b.input("wpe", (1, seq, width), dt)
    return b.build([b.add("add", b.add("gather", table, ids, axis=0), pos)])


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_an_embedding_gather_reads_whole_rows(dt):
    rng, seed = fresh_rng()
    vocab, seq, width = 300, 40, 128
    graph = _embedding(dt, vocab, seq, width)
    ids = rng.integers(-vocab, vocab, size=(1, seq))             # negative ones count from the end
    ins = [random_array(rng, (vocab, width)).astype(NP[dt]), ids, random_array(rng, (1, seq, width)).astype(NP[dt])]
    kern = _check(graph, ins, 2, seed, exact=(dt == "f32"))
    assert kern.source.count("p1[") == 2, "the token: once per vector, once in the scalar loop"


def test_a_class_token_concatenated_before_patches_reads_rows_from_both():
    """ViT's [cls; patches] + pos where the patches come out of an NHWC conv: two row loads under one
    branch per vector, and the position table's row."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    cls, patches = b.input("cls", (1, 1, 128), "f16"), b.input("conv", (1, 7, 7, 128), "f16")
    tokens = b.add("reshape", patches, shape=(1, 49, 128))
    x = b.add("concatenate", cls, tokens, dimension=1)
    graph = b.build([b.add("add", x, b.input("pos", (1, 50, 128), "f16"))])
    ins = [random_array(rng, (1, 1, 128)).astype(np.float16), random_array(rng, (1, 7, 7, 128)).astype(np.float16),
           random_array(rng, (1, 50, 128)).astype(np.float16)]
    _check(graph, ins, 3, seed, exact=False)


def test_uniform_values_broadcast_along_rows_and_aligned_slices():
    """x[:, 8:72] * scale[row] + bias[col], transposed over the leading dims: x's slice starts on a
    vector (row load), the per-row scale is one scalar per vector, the bias a row load."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (6, 20, 80))
    s = b.add("slice", b.add("transpose", x, permutation=(1, 0, 2)), start=(0, 0, 8), limit=(20, 6, 72),
              stride=(1, 1, 1))
    scale = b.add("broadcast_in_dim", b.input("scale", (20, 6)), shape=(20, 6, 64), broadcast_dimensions=(0, 1))
    bias = b.add("broadcast_in_dim", b.input("bias", (64,)), shape=(20, 6, 64), broadcast_dimensions=(2,))
    graph = b.build([b.add("add", b.add("mul", s, scale), bias)])
    ins = [random_array(rng, (6, 20, 80)), random_array(rng, (20, 6)), random_array(rng, (64,))]
    kern = _check(graph, ins, 2, seed)
    assert kern.source.count("p1[") == 2, "the scale: once per vector, once in the scalar loop"


@pytest.mark.parametrize("start", [2, 6])
def test_a_slice_off_the_vector_grid_keeps_index_math(start):
    """A slice starting mid-vector cannot be read as aligned vectors: its elements stay scalar loads."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (64, 72))
    s = b.add("slice", x, start=(0, start), limit=(64, start + 64), stride=(1, 1))
    graph = b.build([b.add("add", s, b.input("y", (64, 64)))])
    ins = [random_array(rng, (64, 72)), random_array(rng, (64, 64))]
    _check(graph, ins, 1, seed)                                      # y only


@pytest.mark.parametrize("offset", [0, 1])
def test_an_unaligned_row_input_takes_the_scalar_loop(offset):
    """The gathered table 4 bytes past 16-byte alignment: the run-time check sends every element to the
    scalar loop, which still computes each one (poisoned outputs would show a gap)."""
    rng, seed = fresh_rng()
    vocab, seq, width = 64, 96, 64
    graph = _embedding("f32", vocab, seq, width)
    flat = random_array(rng, (vocab * width + 1,))
    ins = [flat[offset:offset + vocab * width].reshape(vocab, width), rng.integers(0, vocab, size=(1, seq)),
           random_array(rng, (1, seq, width))]
    _check(graph, ins, 2, seed)


def test_row_loads_are_16_byte_loads_on_the_gpu():
    graph = _embedding("f16", 500, 64, 256)
    kernels = [codegen.generate(graph, r) for r in partition(graph)]
    ptx = compile_device(codegen.module_source(kernels), "compute_90").decode()
    assert ptx.count("ld.global.v4") + ptx.count("ld.global.nc.v4") >= 2
    assert "st.global.v4" in ptx


def test_dynamic_rows_read_whole_rows_at_every_size():
    """A symbolic sequence length: rows stay whole vectors, the outer coordinates come from the dims."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    seq = sym("seq")
    table, ids = b.input("wte", (90, 64), "f16"), b.input("ids", (2, seq), "i64")
    pos = b.input("wpe", (2, seq, 64), "f16")
    graph = b.build([b.add("add", b.add("gather", table, ids, axis=0), pos)])
    graph.dims = {"seq": DimRange(1, 200)}
    sizes = [1, 37, 200]
    sets = [[random_array(rng, (90, 64)).astype(np.float16), rng.integers(0, 90, size=(2, s)),
             random_array(rng, (2, s, 64)).astype(np.float16)] for s in sizes]
    results, kernels, _ = run_on_host(graph, None, shapes=sets)
    assert all(k.source.count(ROW_LOAD) == 2 for k in kernels)
    for ins, (got,), s in zip(sets, results, sizes):
        np.testing.assert_array_equal(got, interpret(graph, ins)[0], err_msg=f"seq {s}, seed {seed}")
