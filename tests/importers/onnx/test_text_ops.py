"""TfIdfVectorizer (aotc/importers/onnx/text_ops.py) vs the ONNX reference evaluator, and one engine.

Fresh random token rows from a small vocabulary with pooled n-grams planted
at random skips (the seed is in every failure message), so every gram size
and skip distance really occurs; the node suite covers the ONNX-generated
cases end to end. IDF/TFIDF without weights is compared with onnxruntime
instead: the reference evaluator crashes on the missing attribute.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import aotc.compiler
from aotc.errors import UnsupportedError
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.helpers.rng import fresh_rng

VOCAB = 7


def make_model(shape, dtype, **attrs) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
    y = onnx.ValueInfoProto(name="y")
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", **attrs)
    g = helper.make_graph([node], "g", [x], [y])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]))


def random_pool(rng, sizes: dict[int, int]):
    """pool_int64s / ngram_counts for {gram size: how many grams}, sizes 1..max all present."""
    pool, counts = [], []
    for n in range(1, max(sizes) + 1):
        counts.append(len(pool))
        grams = set()
        while len(grams) < sizes.get(n, 0):
            grams.add(tuple(int(v) for v in rng.integers(0, VOCAB, n)))
        pool += [v for gram in sorted(grams) for v in gram]
    return pool, counts


def planted_rows(rng, shape, dtype, pool, counts, max_skip, sizes=range(1, 4)):
    """Random tokens with pooled grams of the counted `sizes` written in at random starts and skips."""
    x = rng.integers(0, VOCAB, shape).astype(dtype)
    rows = x.reshape(-1, shape[-1])
    grams = [tuple(pool[c + k * n:c + (k + 1) * n]) for n, c in enumerate(counts, 1) if n in sizes
             for k in range(((counts[n] if n < len(counts) else len(pool)) - c) // n)]
    for row in rows:
        for _ in range(3):
            gram = grams[rng.integers(len(grams))]
            n = len(gram)
            top = max_skip + 1 if n == 1 else min(max_skip + 1, (len(row) - 1) // (n - 1))
            if top >= 1:
                d = int(rng.integers(1, top + 1))
                s = int(rng.integers(0, len(row) - d * (n - 1)))
                row[s:s + d * n:d] = gram
    return x


def check(model, x, seed, oracle="reference"):
    graph = import_onnx(model)
    verify(graph)
    got = interpret(graph, {"x": x})[0]
    if oracle == "reference":
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    else:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, {"x": x})[0]
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"seed {seed}")
    return want


CASES = [   # (input shape, dtype, mode, min, max, max_skip, {size: grams}, weighted)
    ((12,), np.int64, "TF", 1, 1, 0, {1: 4}, False),
    ((3, 10), np.int32, "TF", 2, 2, 0, {1: 3, 2: 5}, False),
    ((2, 9), np.int64, "TF", 1, 2, 3, {1: 3, 2: 6}, False),
    ((11,), np.int32, "IDF", 1, 3, 2, {1: 2, 2: 4, 3: 4}, True),
    ((4, 8), np.int64, "IDF", 2, 3, 1, {2: 5, 3: 3}, False),
    ((2, 13), np.int32, "TFIDF", 1, 3, 4, {1: 3, 2: 4, 3: 3}, True),
    ((3, 7), np.int64, "TFIDF", 3, 3, 2, {2: 2, 3: 5}, False),
    ((5,), np.int64, "TF", 2, 3, 5, {1: 2, 2: 3, 3: 2}, False),
]


@pytest.mark.parametrize("shape,dtype,mode,lo,hi,skip,sizes,weighted", CASES)
def test_tfidf_matches_the_onnx_reference(shape, dtype, mode, lo, hi, skip, sizes, weighted):
    rng, seed = fresh_rng()
    pool, counts = random_pool(rng, sizes)
    n_grams = sum(sizes.values())
    width = n_grams + 2
    indexes = [int(v) for v in rng.permutation(width)[:n_grams]]
    attrs = dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip,
                 ngram_counts=counts, ngram_indexes=indexes, pool_int64s=pool)
    if weighted:
        attrs["weights"] = [float(v) for v in rng.uniform(0.5, 2.0, width)]
    x = planted_rows(rng, shape, dtype, pool, counts, skip, range(lo, hi + 1))
    # onnx's reference evaluator fails on IDF/TFIDF without weights (len(None)): onnxruntime there
    oracle = "reference" if weighted or mode == "TF" else "onnxruntime"
    want = check(make_model(list(shape), dtype, **attrs), x, seed, oracle)
    assert want.any(), f"nothing counted (seed {seed})"


def test_shared_columns_and_repeated_grams_follow_the_reference():
    """Two grams on one output column add; a gram pooled twice counts under its last id only."""
    rng, seed = fresh_rng()
    x = rng.integers(0, 3, (2, 16)).astype(np.int64)
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=2,
                 ngram_counts=[0, 3], ngram_indexes=[0, 0, 1, 2, 3, 2], pool_int64s=[0, 1, 2, 0, 1, 1, 2, 0, 1])
    check(make_model([2, 16], np.int64, **attrs), x, seed)


def test_string_pool_is_unsupported():
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0,
                 ngram_counts=[0], ngram_indexes=[0, 1], pool_strings=["a", "b"])
    model = make_model([4], np.int64, **attrs)
    with pytest.raises(UnsupportedError, match="pool_strings"):
        import_onnx(model)


def test_tfidf_engine_on_cpu_device_matches_the_reference():
    rng, seed = fresh_rng()
    pool, counts = random_pool(rng, {1: 3, 2: 4})
    attrs = dict(mode="TFIDF", min_gram_length=1, max_gram_length=2, max_skip_count=2, ngram_counts=counts,
                 ngram_indexes=list(range(7)), pool_int64s=pool,
                 weights=[float(v) for v in rng.uniform(0.5, 2.0, 7)])
    x = planted_rows(rng, (3, 10), np.int32, pool, counts, 2)
    model = make_model([3, 10], np.int32, **attrs)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    engine = Engine(engine_bytes(aotc.compiler.compile_model(model, arch="none", host=True).plan))
    got = engine.create_context("cpu").run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"seed {seed}")
    assert want.any(), f"nothing counted (seed {seed})"
