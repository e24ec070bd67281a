import numpy as np

from aotc.hlo_passes import bn_fold, dce
from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.graph import GraphBuilder
from aotc.bench.models.small import cnn
from tests.helpers.rng import fresh_rng, random_array

from ._graphs import assert_same_fresh, assert_unchanged, counts, scalar_constant, snapshot


def _per_channel(b, rng, c, shape, axis, name):
    return b.add("broadcast_in_dim", b.constant(random_array(rng, (c,)), name), shape=shape,
                 broadcast_dimensions=(axis,))


def _conv_bn(layout="NCHW"):
    rng, _ = fresh_rng()
    b = GraphBuilder()
    if layout == "NCHW":
        x, w = b.input("x", (2, 3, 9, 7)), b.constant(random_array(rng, (4, 3, 3, 3)), "w")
    else:
        x, w = b.input("x", (2, 9, 7, 3)), b.constant(random_array(rng, (4, 3, 3, 3)), "w")
    y = b.add("convolution", x, w, strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1,
              layout=layout, name="Conv_0")
    axis = 1 if layout == "NCHW" else 3
    y = b.add("add", y, _per_channel(b, rng, 4, y.shape, axis, "bias"), name="Conv_0")
    y = b.add("mul", _per_channel(b, rng, 4, y.shape, axis, "scale"), y, name="BatchNormalization_1")
    y = b.add("add", y, _per_channel(b, rng, 4, y.shape, axis, "shift"), name="BatchNormalization_1")
    return b.build([b.add("tanh", y)])


def test_folds_conv_bias_batchnorm_chain():
    for layout in ("NCHW", "NHWC"):
        g = _conv_bn(layout)
        snap = snapshot(g)
        out = dce.run(bn_fold.run(g))
        verify(out)
        assert_unchanged(g, snap)
        assert counts(g) == {"convolution": 1, "add": 2, "mul": 1, "broadcast_in_dim": 3, "tanh": 1}
        assert counts(out) == {"convolution": 1, "add": 1, "broadcast_in_dim": 1, "tanh": 1}
        conv = next(n for n in out.nodes if n.op == "convolution")
        assert conv.name == "Conv_0" and conv.attrs.get("layout", "NCHW") == layout
        assert next(n for n in out.nodes if n.op == "add").name == "BatchNormalization_1"
        assert_same_fresh(g, out, rtol=1e-5, atol=1e-5)


def test_folds_matmul_scale_and_bias():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (5, 6))
    w = b.constant(random_array(rng, (6, 3)), "w")
    y = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    y = b.add("mul", y, b.add("broadcast_in_dim", scalar_constant(b, 0.5), shape=(5, 3), broadcast_dimensions=()))
    y = b.add("sub", y, _per_channel(b, rng, 3, (5, 3), 1, "c"))
    g = b.build([y])
    out = dce.run(bn_fold.run(g))
    assert counts(out) == {"dot_general": 1, "broadcast_in_dim": 1, "add": 1}
    assert out.outputs[0] is g.outputs[0]              # the chain's last Value keeps its identity
    np.testing.assert_allclose(out.constants[out.nodes[0].inputs[1]], g.constants[w] * 0.5, rtol=1e-7)
    assert_same_fresh(g, out, rtol=1e-5, atol=1e-5)


def test_importer_batchnorm_folds_in_the_cnn():
    g = import_onnx(cnn()[0])
    from aotc.hlo_passes import constant_folding
    g = dce.run(constant_folding.run(g))
    out = dce.run(bn_fold.run(g))
    assert counts(g)["mul"] == 2 and "mul" not in counts(out)     # both batch norms' scales are gone
    assert counts(g)["add"] - counts(out)["add"] == 1             # conv 1: bias + shift merge into one add
    assert_same_fresh(g, out, rtol=1e-5, atol=1e-5)


def test_must_not_fire():
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, 2, 5, 5))
    w = b.constant(random_array(rng, (2, 2, 1, 1)), "w")
    attrs = dict(strides=(1, 1), padding=((0, 0), (0, 0)), dilations=(1, 1), groups=1)
    shape = (1, 2, 5, 5)
    # 1. the conv result is used twice (the pre-scale value is observable)
    c1 = b.add("convolution", x, w, **attrs)
    s1 = b.add("mul", c1, _per_channel(b, rng, 2, shape, 1, "s1"))
    # 2. a per-element (not per-channel) scale
    w2 = b.constant(random_array(rng, (2, 2, 1, 1)), "w2")
    c2 = b.add("convolution", x, w2, **attrs)
    s2 = b.add("mul", c2, b.constant(random_array(rng, shape), "elementwise"))
    # 3. a lone bias add: nothing to merge
    w3 = b.constant(random_array(rng, (2, 2, 1, 1)), "w3")
    s3 = b.add("add", b.add("convolution", x, w3, **attrs), _per_channel(b, rng, 2, shape, 1, "b3"))
    # 4. weights shared by two convs
    c4 = b.add("convolution", x, w, **attrs)
    s4 = b.add("mul", c4, _per_channel(b, rng, 2, shape, 1, "s4"))
    # 5. a scale along a spatial dim
    w5 = b.constant(random_array(rng, (2, 2, 1, 1)), "w5")
    s5 = b.add("mul", b.add("convolution", x, w5, **attrs), _per_channel(b, rng, 5, shape, 2, "s5"))
    g = b.build([c1, s1, s2, s3, s4, s5])
    out = bn_fold.run(g)
    assert list(out.nodes) == list(g.nodes)
    assert_same_fresh(g, out, rtol=0)


def test_leaves_an_fp8_dot_and_its_scale_epilogue_alone():
    """A float8 dot's per-channel dequantize scale must not be folded into (re-rounded) float8 weights."""
    import ml_dtypes
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (4, 16), "f8e4m3fn")
    w = b.constant(random_array(rng, (16, 6)).astype(ml_dtypes.float8_e4m3fn), "w")
    y = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,), out_dtype="f32")
    y = b.add("mul", y, _per_channel(b, rng, 6, y.shape, 1, "scale"))
    g = b.build([b.add("add", y, _per_channel(b, rng, 6, y.shape, 1, "bias"))])
    snap = snapshot(g)
    out = bn_fold.run(g)
    assert_unchanged(g, snap)
    assert [n.op for n in out.nodes] == [n.op for n in g.nodes]
    assert all(out.constants[v] is g.constants[v] for v in g.constants)


def test_f32_weights_scale_in_f32_within_one_ulp_of_f64():
    rng, _ = fresh_rng()
    w = random_array(rng, (64, 3, 3, 3))
    # a batch norm's gamma / sqrt(var + eps), with magnitudes over several decades
    scale = (rng.uniform(0.5, 2.0, 64) / np.sqrt(rng.uniform(1e-6, 1e3, 64) + 1e-5)).reshape(-1, 1, 1, 1)
    got = bn_fold.scaled_weights(w, scale)
    want = (w.astype(np.float64) * scale).astype(np.float32)
    assert got.dtype == np.float32
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1 and 0 < np.count_nonzero(ulps) < ulps.size // 2, np.count_nonzero(ulps)


def test_scales_beyond_f32_and_non_f32_weights_fold_in_f64():
    rng, _ = fresh_rng()
    w = random_array(rng, (4, 5))
    tiny = np.array([1e-40, 1.0, 2.0, 0.0]).reshape(-1, 1)     # 1e-40 is subnormal in f32: rounding it loses bits
    assert bn_fold.scaled_weights(w, tiny).dtype == np.float64
    np.testing.assert_array_equal(bn_fold.scaled_weights(w, tiny), w.astype(np.float64) * tiny)
    w64 = w.astype(np.float64)
    assert bn_fold.scaled_weights(w64, np.full((4, 1), 3.0)).dtype == np.float64
    w16 = w.astype(np.float16)
    third = np.full((4, 1), 1 / 3)
    np.testing.assert_array_equal(bn_fold.scaled_weights(w16, third), w16.astype(np.float64) * third)


def test_resnet_block_with_batchnorm_matches_onnxruntime_after_f32_folding():
    """A conv + BN stack with real BN statistics: the folded graph stays within the e2e tests' 1e-4."""
    import onnxruntime as ort
    from aotc.hlo_passes.pipeline import run_pipeline
    from aotc.ir.interpreter import interpret
    model, _ = cnn()
    rng, _ = fresh_rng()
    g, _ = run_pipeline(import_onnx(model))
    assert counts(g)["convolution"] == 3 and "batch_norm" not in counts(g)
    assert sum(".folded" in v.name for v in g.constants) == 2       # both batch norms folded (c1, c2)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: random_array(rng, tuple(d.dim_value for d in i.type.tensor_type.shape.dim))
             for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}}
    want = sess.run(None, feeds)
    got = interpret(g, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-4)
