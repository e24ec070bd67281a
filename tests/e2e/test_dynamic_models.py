"""One dynamic engine per model, run through the C runtime at shapes across its ranges, against onnxruntime.

A BERT-class encoder (batch 1..64, sequence 1..512), a ResNet-class CNN (batch 1..32) and a
LLaMA-style decoder with a KV cache (a 37-token prefill on an empty cache, then 20 decode
steps that feed back the engine's own cache) each compile once; every shape gets fresh
random inputs. Shapes outside the ranges are refused with one line naming the input and dim.
"""
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

import aotc
from aotc.bench.models.small import bert_encoder, resnet_bottleneck
from aotc.bench.models.zoo import llama_kv, with_dynamic_axes
from aotc.errors import InputError
from aotc.package.runtime_binding import Engine
from tests.helpers.rng import fresh_rng

BATCHES, SEQS = (1, 3, 17, 64), (1, 7, 128, 511, 512)


def _engine(model, tmp_path, dynamic):
    path = tmp_path / "m.engine"
    aotc.compile(model, str(path), arch="none", dynamic=dynamic)
    return path, Engine(str(path))


def _bert_feeds(rng, b, s):
    return {"input_ids": rng.integers(0, 50, (b, s)), "token_type_ids": rng.integers(0, 2, (b, s)),
            "attention_mask": (rng.random((b, s)) < 0.8).astype(np.int64)}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    model, _ = with_dynamic_axes(bert_encoder(batch=3, seq=7, max_pos=512, layers=1, d=32, heads=2, ffn=48))
    path, eng = _engine(model, tmp_path_factory.mktemp("bert"), {"batch_size": (1, 64), "sequence_length": (1, 512)})
    return model, path, eng


@pytest.mark.slow
def test_bert_encoder_one_engine_every_shape(bert):
    model, _, eng = bert
    rng, seed = fresh_rng()
    sess = ort.InferenceSession(model.SerializeToString())
    ctx = eng.create_context("cpu")
    for b in BATCHES:
        for s in SEQS:
            feeds = _bert_feeds(rng, b, s)
            got = ctx.run(feeds)
            for (name, g), w in zip(got.items(), sess.run(None, feeds)):
                assert g.shape == w.shape, (name, b, s)
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {b}x{s}, seed {seed}")
    ctx.close()


def test_bert_encoder_small_shapes(bert):
    """The quick form of the test above (default runs): the shapes that take every variant."""
    model, _, eng = bert
    rng, seed = fresh_rng()
    sess = ort.InferenceSession(model.SerializeToString())
    ctx = eng.create_context("cpu")
    for b, s in ((1, 1), (3, 7), (1, 33), (2, 1), (4, 300)):
        feeds = _bert_feeds(rng, b, s)
        for (name, g), w in zip(ctx.run(feeds).items(), sess.run(None, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {b}x{s}, seed {seed}")
    ctx.close()


@pytest.mark.parametrize("feeds, words", [
    ({"input_ids": (0, 4)}, "input 'input_ids' dim 0 (batch_size) is 0, outside 1..64"),
    ({"input_ids": (65, 4)}, "input 'input_ids' dim 0 (batch_size) is 65, outside 1..64"),
    ({"input_ids": (2, 513)}, "input 'input_ids' dim 1 (sequence_length) is 513, outside 1..512"),
    ({"token_type_ids": (3, 4)}, "batch_size"),
    ({"input_ids": (2, 4, 1)}, "input 'input_ids'"),
])
def test_shapes_outside_the_ranges_are_refused(bert, feeds, words):
    _, _, eng = bert
    rng, _ = fresh_rng()
    inputs = _bert_feeds(rng, 2, 4)
    for name, shape in feeds.items():
        inputs[name] = rng.integers(0, 2, shape)
    ctx = eng.create_context("cpu")
    with pytest.raises(InputError) as e:
        ctx.run(inputs)
    assert words in str(e.value) and "\n" not in str(e.value)
    ctx.close()


def test_cli_run_refuses_a_bad_shape_in_one_line_and_writes_nothing(bert, tmp_path):
    _, path, _ = bert
    rng, _ = fresh_rng()
    feeds = _bert_feeds(rng, 65, 4)
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "out.npz"
    r = subprocess.run([sys.executable, "-m", "aotc.cli.main", "run", str(path), "--inputs", str(tmp_path / "in.npz"),
                        "--outputs", str(out)], capture_output=True, text=True)
    assert r.returncode != 0 and not out.exists()
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "batch_size" in lines[0] and "65" in lines[0] and "1..64" in lines[0], r.stderr


def test_resnet_class_cnn_batch_range(tmp_path):
    model, _ = with_dynamic_axes(resnet_bottleneck(batch=2, size=16, blocks=(1, 1, 1, 1)), axes=("batch",))
    _, eng = _engine(model, tmp_path, {"batch": (1, 32)})
    rng, seed = fresh_rng()
    sess = ort.InferenceSession(model.SerializeToString())
    ctx = eng.create_context("cpu")
    name = model.graph.input[0].name
    for b in (1, 5, 32):
        x = rng.standard_normal((b, 3, 16, 16)).astype(np.float32)
        (got,), want = ctx.run({name: x}).values(), sess.run(None, {name: x})[0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=f"batch {b}, seed {seed}")
    ctx.close()


def test_llama_decoder_prefill_then_decode_with_its_own_cache(tmp_path):
    model = llama_kv()
    _, eng = _engine(model, tmp_path, {"batch": (1, 4), "sequence": (1, 64), "past_sequence": (0, 128)})
    rng, seed = fresh_rng()
    sess = ort.InferenceSession(model.SerializeToString())
    ctx = eng.create_context("cpu")
    b, layers = 2, 2
    past = {f"past_key_values.{i}.{k}": np.zeros((b, 2, 0, 8), np.float32) for i in range(layers) for k in ("key", "value")}
    ids = rng.integers(0, 64, (b, 37))
    pos = np.arange(37)[None].repeat(b, 0)
    for step in range(21):                      # the prefill, then 20 decode steps
        feeds = {"input_ids": ids, "position_ids": pos, **past}
        got = ctx.run(feeds)
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        logits = next(iter(got.values()))
        np.testing.assert_allclose(logits, next(iter(want.values())), rtol=1e-4, atol=1e-4,
                                   err_msg=f"step {step}, seed {seed}")
        past = {f"past_key_values.{i}.{k}": got[f"present.{i}.{k}"] for i in range(layers) for k in ("key", "value")}
        assert past["past_key_values.0.key"].shape == (b, 2, 37 + step, 8)
        ids, pos = logits[:, -1].argmax(-1)[:, None], pos[:, -1:] + 1
    ctx.close()


def test_jax_export_symbolic_batch(tmp_path):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax import export

    def f(x, w):
        h = jax.nn.gelu(x @ w)
        return jax.nn.softmax(h, axis=-1) * jnp.tanh(x[:, :1])

    b = export.symbolic_shape("b")
    exp = export.export(jax.jit(f))(jax.ShapeDtypeStruct((b[0], 16), jnp.float32),
                                    jax.ShapeDtypeStruct((16, 8), jnp.float32))
    path = tmp_path / "f.engine"
    aotc.compile(bytes(exp.serialize()), str(path), arch="none", dynamic={"b": (1, 64)})
    eng = Engine(str(path))
    assert [(d.name, d.min, d.max) for d in eng.dims] == [("b", 1, 64)]
    rng, seed = fresh_rng()
    ctx = eng.create_context("cpu")
    names = [s.name for s in eng.inputs]
    for n in (1, 7, 33, 64):
        x, w = rng.standard_normal((n, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)
        (got,) = ctx.run(dict(zip(names, (x, w)))).values()
        np.testing.assert_allclose(got, np.asarray(f(x, w)), rtol=1e-5, atol=1e-5, err_msg=f"batch {n}, seed {seed}")
    ctx.close()


@pytest.mark.parametrize("mask_kind", ["trilu", "where"])
def test_llama_without_cache_dynamic_batch_and_sequence(tmp_path, mask_kind):
    """The causal mask built at run time size: Trilu over a dynamic square, or Range + compare."""
    from aotc.bench.models.zoo import llama
    model, _ = with_dynamic_axes(llama(batch=3, seq=7, mask_kind=mask_kind, opset=17))
    _, eng = _engine(model, tmp_path, {"batch_size": (1, 4), "sequence_length": (1, 32)})
    rng, seed = fresh_rng()
    sess = ort.InferenceSession(model.SerializeToString())
    ctx = eng.create_context("cpu")
    for b, s in ((1, 1), (3, 7), (4, 32)):
        f = {"input_ids": rng.integers(0, 64, (b, s)), "position_ids": np.arange(s)[None].repeat(b, 0)}
        (got,) = ctx.run(f).values()
        np.testing.assert_allclose(got, sess.run(None, f)[0], rtol=1e-4, atol=1e-4, err_msg=f"{b}x{s}, seed {seed}")
    ctx.close()


def test_cnn_with_dynamic_height_and_width(tmp_path):
    """Spatial dims from the input's size: conv output sizes as floor divisions, a global pool's mean by a
    run-time count."""
    model, _ = resnet_bottleneck(batch=2, size=32, blocks=(1, 1, 1, 1))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "h", "w"
    _, eng = _engine(model, tmp_path, {"h": (16, 64), "w": (16, 64)})
    rng, seed = fresh_rng()
    sess = ort.InferenceSession(model.SerializeToString())
    ctx = eng.create_context("cpu")
    name = model.graph.input[0].name
    for h, w in ((16, 16), (33, 50), (64, 17)):
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        (got,) = ctx.run({name: x}).values()
        np.testing.assert_allclose(got, sess.run(None, {name: x})[0], rtol=2e-4, atol=2e-4,
                                   err_msg=f"{h}x{w}, seed {seed}")
    ctx.close()


def test_an_op_that_needs_a_static_size_names_itself():
    from aotc.bench.models.small import cnn
    from aotc.errors import UnsupportedError
    model, _ = cnn(batch=2, size=16)       # AveragePool that does not count padding: a per-pixel divisor table
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "h", "w"
    with pytest.raises(UnsupportedError, match=r"AveragePool .*opset 17.*dynamic dims.*h in 8\.\.64"):
        aotc.compile(model, arch="none", host=False, dynamic={"h": (8, 64), "w": (8, 64)})
