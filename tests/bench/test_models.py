"""The shared model builders (aotc/bench/models): each builds a valid model whose feeds fit its inputs.

The e2e tests compile and run them against onnxruntime; this checks what the
benchmarks rely on before any compile: names, shapes and dtypes of the feeds,
the checker, and that a seed decides the weights.
"""
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from aotc.bench.models import MODELS, REAL_MODELS, ZOO_MODELS
from aotc.bench.models.builders import ModelBuilder, batch_norm
from aotc.bench.models.small import bert_encoder, resnet_bottleneck
from tests.helpers.rng import fresh_rng

_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}


def _check_feeds(model, feeds):
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    assert sorted(feeds) == sorted(i.name for i in inputs)
    for i in inputs:
        t = i.type.tensor_type
        dims = [d.dim_value or None for d in t.shape.dim]
        a = feeds[i.name]
        assert a.dtype == _NP[t.elem_type], i.name
        assert all(d is None or d == n for d, n in zip(dims, a.shape)) and len(dims) == a.ndim, i.name


@pytest.mark.parametrize("name", sorted(MODELS))
def test_builder_gives_a_checked_model_and_matching_feeds(name):
    model, feeds = MODELS[name]()
    onnx.checker.check_model(model)
    _check_feeds(model, feeds)


@pytest.mark.parametrize("name", sorted(ZOO_MODELS))
def test_zoo_builder_gives_a_checked_model_and_a_feed_maker(name):
    model, make_feeds = ZOO_MODELS[name]()
    onnx.checker.check_model(model)
    _check_feeds(model, make_feeds(fresh_rng()[0]))


@pytest.mark.parametrize("build", [resnet_bottleneck, bert_encoder])
def test_the_larger_small_models_build_too(build):
    _check_feeds(*build())


def test_the_full_size_models_are_listed():
    assert sorted(REAL_MODELS) == ["bert_base", "gpt2_small", "mobilenetv2", "resnet50", "vit_b16"]


def test_the_seed_decides_the_weights():
    def weights(seed):
        m = ModelBuilder(seed)
        batch_norm(m, "x", 4, "bn")
        return [numpy_helper.to_array(t) for t in m.inits]
    a, b, c = weights(1), weights(1), weights(2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    assert (a[0] > 0).all() and (a[3] > 0).all()        # scales and variances positive
