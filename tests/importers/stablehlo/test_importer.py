"""StableHLO importer: the three input forms, names, errors, and whole JAX models run as engines.

Helpers here (`forms`, `check`, `run_engine`) are shared by the other
the other test_*.py files here. JAX programs are built in the tests; jax on the
CPU is the oracle. Importer-level checks run the graph through the reference
interpreter; the model tests compile engines and run them on the `cpu` device.
"""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import export as jax_export  # noqa: E402

import aotc.compiler  # noqa: E402
from aotc.errors import ModelError, UnsupportedError  # noqa: E402
from aotc.hlo_passes.verify import verify  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from aotc.ir.interpreter import interpret  # noqa: E402
from aotc.package.runtime_binding import Engine  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402

jax.config.update("jax_platforms", "cpu")
FORMS = ("text", "bytecode", "portable", "export")


def forms(fn, *args) -> dict[str, bytes]:
    """The program `fn(*args)` as MLIR text, MLIR bytecode, a portable artifact and jax.export bytes."""
    import io
    lowered = jax.jit(fn).lower(*args)
    buf = io.BytesIO()
    lowered.compiler_ir("stablehlo").operation.write_bytecode(buf)
    exp = jax_export.export(jax.jit(fn))(*args)
    return {"text": lowered.as_text(debug_info=True).encode(), "bytecode": buf.getvalue(),
            "portable": bytes(exp.mlir_module_serialized), "export": bytes(exp.serialize())}


def want(fn, *args) -> list[np.ndarray]:
    out = jax.jit(fn)(*args)
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def close(got, ref, rtol, atol, what=""):
    assert got.shape == ref.shape and got.dtype == ref.dtype, (what, got.dtype, got.shape, ref.dtype, ref.shape)
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                               err_msg=what)


def check(fn, *args, rtol=1e-5, atol=1e-6, form="text"):
    """Import fn's StableHLO, verify it, interpret it and compare with jax; returns the Graph."""
    g = import_stablehlo(forms(fn, *args)[form] if form != "text" else
                         jax.jit(fn).lower(*args).as_text(debug_info=True).encode())
    verify(g)
    got = interpret(g, list(args))
    for i, (a, b) in enumerate(zip(got, want(fn, *args), strict=True)):
        close(a, b, rtol, atol, f"output {i}")
    return g


def run_engine(path, args, arch="none"):
    """Compile `path` (or bytes) with aotc, run it on the cpu device; outputs in signature order."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = f"{d}/m.engine"
        result = aotc.compiler.compile(path, out, arch=arch)
        engine = Engine(out)
        names = [s.name for s in engine.inputs]
        outs = engine.create_context(device="cpu").run(dict(zip(names, args)))
        return [outs[s.name] for s in engine.outputs], engine, result


# ----------------------------------------------------------------- programs

def mlp(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    h = jax.nn.gelu(h @ params["w2"] + params["b2"], approximate=True)
    return jax.nn.log_softmax(h @ params["w3"], axis=-1)


def mlp_args(rng, d=(24, 48, 32, 10), batch=5):
    p = {"w1": random_array(rng, d[:2]) * 0.2, "b1": random_array(rng, d[1:2]),
         "w2": random_array(rng, d[1:3]) * 0.2, "b2": random_array(rng, d[2:3]),
         "w3": random_array(rng, d[2:4]) * 0.2}
    return p, random_array(rng, (batch, d[0]))


def cnn(p, img):
    dn = ("NHWC", "HWIO", "NHWC")
    y = jax.lax.conv_general_dilated(img, p["k1"], (1, 1), "SAME", dimension_numbers=dn)
    y = jax.nn.relu(y + p["b1"])
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    y = jax.lax.conv_general_dilated(y, p["k2"], (2, 2), ((1, 1), (1, 1)), rhs_dilation=(1, 1),
                                     dimension_numbers=dn, feature_group_count=2)
    y = jax.nn.silu(y)
    y = jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "SAME") / 4.0
    return y.mean(axis=(1, 2)) @ p["fc"]


def cnn_args(rng):
    return ({"k1": random_array(rng, (3, 3, 3, 8)) * 0.3, "b1": random_array(rng, (8,)),
             "k2": random_array(rng, (3, 3, 4, 6)) * 0.3, "fc": random_array(rng, (6, 7))},
            random_array(rng, (2, 12, 10, 3)))


def encoder_block(p, x):
    """Pre-norm transformer encoder block: multi-head attention + MLP with exact GELU."""
    B, T, C = x.shape
    H = 4

    def ln(v, g, b):
        m = v.mean(-1, keepdims=True)
        var = ((v - m) ** 2).mean(-1, keepdims=True)
        return (v - m) * jax.lax.rsqrt(var + 1e-5) * g + b

    h = ln(x, p["g1"], p["be1"])
    q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
    heads = lambda t: t.reshape(B, T, H, C // H).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(q), heads(k), heads(v)
    att = jnp.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(C // H)
    mask = jnp.tril(jnp.ones((T, T), bool))
    att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1)
    o = jnp.einsum("bhts,bhsd->bhtd", att, v).transpose(0, 2, 1, 3).reshape(B, T, C)
    x = x + o @ p["wo"]
    h = ln(x, p["g2"], p["be2"])
    return x + jax.nn.gelu(h @ p["w1"], approximate=False) @ p["w2"]


def encoder_args(rng, B=2, T=6, C=16):
    r = lambda *s: random_array(rng, s) * 0.3  # noqa: E731
    return ({"g1": 1 + r(C), "be1": r(C), "wqkv": r(C, 3 * C), "wo": r(C, C), "g2": 1 + r(C),
             "be2": r(C), "w1": r(C, 4 * C), "w2": r(4 * C, C)}, random_array(rng, (B, T, C)))


def indexing(table, ids, x, idx):
    emb = table[ids]                       # embedding lookup
    cols = x[:, idx]                       # column gather
    pair = x[idx[:2], idx[1:3]]            # two index arrays
    return emb.sum(-1), cols, pair, x[1:, ::2], jnp.argmax(x, axis=-1), jnp.argmin(x, axis=0)


def indexing_args(rng):
    return (random_array(rng, (11, 6)), rng.integers(-11, 11, (3, 4)).astype(np.int32),
            random_array(rng, (5, 7)), np.array([6, 0, 3, 2], np.int32))


def reductions(x, y):
    return (x.sum(0), x.max(axis=(0, 2)), x.min(-1), jnp.prod(y, axis=1), jnp.any(x > 1.0, axis=1),
            jnp.all(x > -2.0, axis=-1), jnp.max(y, axis=0, initial=0.5), jnp.cumsum(y, axis=1))


def reductions_args(rng):
    return random_array(rng, (3, 4, 5)), random_array(rng, (4, 6), low=0.5, high=1.5)


PROGRAMS = {"mlp": (mlp, mlp_args), "cnn": (cnn, cnn_args), "encoder": (encoder_block, encoder_args),
            "indexing": (indexing, indexing_args), "reductions": (reductions, reductions_args)}


# ----------------------------------------------------------------- tests

@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_imports_in_every_form(name, form):
    rng, seed = fresh_rng()
    fn, make = PROGRAMS[name]
    args = make(rng)
    flat = jax.tree_util.tree_leaves(args)
    g = import_stablehlo(forms(fn, *args)[form])
    verify(g)
    got = interpret(g, flat)
    for i, (a, b) in enumerate(zip(got, want(fn, *args), strict=True)):
        close(a, b, 2e-5, 2e-5, f"{name}/{form} output {i} (seed {seed})")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_engine_matches_jax(name, tmp_path):
    rng, seed = fresh_rng()
    fn, make = PROGRAMS[name]
    args = make(rng)
    path = tmp_path / f"{name}.mlir"
    path.write_bytes(forms(fn, *args)["text"])
    outs, engine, _ = run_engine(path, jax.tree_util.tree_leaves(args))
    for i, (a, b) in enumerate(zip(outs, want(fn, *args), strict=True)):
        close(a, b, 1e-4, 1e-5, f"{name} engine output {i} (seed {seed})")


def test_export_bytes_with_default_archs_and_names(tmp_path):
    """jax.export bytes through compile() with the default sm_80/sm_90 build; names from the signature."""
    rng, seed = fresh_rng()
    args = mlp_args(rng)
    path = tmp_path / "mlp.jaxexport"
    path.write_bytes(forms(mlp, *args)["export"])
    outs, engine, result = run_engine(path, jax.tree_util.tree_leaves(args), arch=None)
    assert set(result.plan.cubins) == {"sm_80", "sm_90"} and result.plan.ptx
    assert [s.name for s in engine.inputs] == ["params.b1", "params.b2", "params.w1", "params.w2",
                                               "params.w3", "x"]
    close(outs[0], want(mlp, *args)[0], 1e-4, 1e-5, f"seed {seed}")


def test_bytes_input_and_output_names(tmp_path):
    def f(a, b):
        return {"sum": a + b, "prod": a * b}
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
    blob = forms(f, a, b)
    g = import_stablehlo(blob["text"])
    assert [v.name for v in g.inputs] == ["a", "b"] and g.output_names == ["prod", "sum"]
    stripped = jax.jit(f).lower(a, b).as_text().encode()   # no locations: positional names
    assert [v.name for v in import_stablehlo(stripped).inputs] == ["arg0", "arg1"]
    assert import_stablehlo(blob["portable"]).output_names == ["prod", "sum"]
    outs, _, _ = run_engine(blob["portable"], [a, b])     # raw bytes through compile()
    np.testing.assert_array_equal(outs[0], a * b)


def test_tuple_outputs_and_private_calls_inline():
    @jax.jit
    def inner(x):
        return jnp.where(x > 0, x, 0.1 * x)

    def f(x):
        return inner(x) * 2, inner(x + 1)
    x = fresh_rng()[0].standard_normal((3, 4)).astype(np.float32)
    text = jax.jit(f).lower(x).as_text()
    assert "call @" in text and "func.func private" in text
    g = check(f, x)
    assert g.output_names == ["out0", "out1"]


@pytest.mark.parametrize("dt,tol", [(jnp.float16, 2e-3), (jnp.bfloat16, 2e-2)])
def test_reduced_precision_dtypes(dt, tol):
    rng, seed = fresh_rng()
    w = random_array(rng, (8, 5)).astype(dt)
    c = jnp.asarray(rng.standard_normal(5), dt)            # a constant of that dtype

    def f(x):
        return jnp.tanh(x @ w + c), x.astype(jnp.float32).sum(-1)
    x = random_array(rng, (3, 8)).astype(dt)
    check(f, x, rtol=tol, atol=tol)


def test_integer_and_bool_dtypes():
    def f(i, j, b):
        k = (i * 3 - j) // 2 + jnp.int64(1)
        return k, jnp.logical_and(b, i > j), jnp.where(b, i, j).astype(jnp.float32)
    jax.config.update("jax_enable_x64", True)
    try:
        rng = fresh_rng()[0]
        i = rng.integers(-9, 9, (4, 3)).astype(np.int32)
        j = rng.integers(1, 9, (4, 3)).astype(np.int32)
        g = check(f, i, j, rng.random((4, 3)) < 0.5)
        assert {v.dtype.name for v in g.inputs} == {"i32", "bool"}
    finally:
        jax.config.update("jax_enable_x64", False)


def test_unsupported_ops_are_listed_with_locations():
    def f(x):
        s = jax.lax.fori_loop(0, 3, lambda i, v: v.at[i].apply(jnp.sin), x)   # found inside the loop body
        return s + jnp.fft.fft(x).real + jax.lax.reduce_precision(x, 4, 3)
    x = np.ones((3, 4), np.float32)
    with pytest.raises(UnsupportedError) as e:
        import_stablehlo(jax.jit(f).lower(x).as_text(debug_info=True).encode())
    msg = str(e.value)
    assert msg.startswith("5 unsupported")   # fft, the complex convert and real around it, scatter, reduce_precision
    for op in ("stablehlo.scatter (", "stablehlo.fft (", "complex<f32>", "stablehlo.reduce_precision ("):
        assert op in msg
    assert "test_importer.py:" in msg and "\n" not in msg
    assert len(e.value.details) == 5 and all("stablehlo." in d for d in e.value.details)   # the CLI's list
    assert "aotc ops --stablehlo" in e.value.summary


def test_dynamic_dims_need_a_range_and_garbage_is_rejected():
    text = b"""func.func @main(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
      %0 = stablehlo.abs %a : tensor<?x4xf32>
      return %0 : tensor<?x4xf32>
    }"""
    with pytest.raises(ModelError, match=r"without a range: arg0_dim0 \(arg0\[0\]\).*--dynamic arg0_dim0=MIN\.\.MAX.*"
                                         r"or pin them: --dynamic arg0_dim0=N\.\.N$"):
        import_stablehlo(text)
    x = random_array(fresh_rng()[0], (3, 4))
    np.testing.assert_array_equal(interpret(import_stablehlo(text, dynamic={"arg0_dim0": (1, 8)}), [x])[0], abs(x))
    with pytest.raises(ModelError, match="cannot parse"):
        import_stablehlo(b"module { this is not mlir }")
    with pytest.raises(ModelError):
        import_stablehlo(b"\x10\x00\x00\x00garbageML\xefRgarbage")


def test_cli_compiles_mlir(tmp_path):
    from click.testing import CliRunner
    from aotc.cli.main import main
    rng = fresh_rng()[0]
    args = mlp_args(rng)
    path = tmp_path / "prog.mlir"
    path.write_bytes(forms(mlp, *args)["text"])
    out = tmp_path / "x.engine"
    res = CliRunner().invoke(main, ["compile", str(path), "-o", str(out), "--arch", "none", "-q"])
    assert res.exit_code == 0, res.output
    engine = Engine(str(out))
    assert [s.name for s in engine.outputs] == ["out0"] and engine.outputs[0].shape == (5, 10)
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                   "  %0 = stablehlo.popcnt %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
    res = CliRunner().invoke(main, ["compile", str(bad), "-o", str(tmp_path / "b.engine")])
    assert res.exit_code == 1 and "Traceback" not in res.output
