"""jax.export programs with symbolic dims: dims named as in jax, shape assertions decided, results equal to jax."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import export  # noqa: E402

from aotc.errors import ModelError, UnsupportedError  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from aotc.ir import dims as D  # noqa: E402
from aotc.ir.interpreter import interpret  # noqa: E402
from aotc.hlo_passes.verify import verify  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import close, mlp  # noqa: E402

H, DM = 2, 8


def attention(p, x):
    """(B, S, 8) -> (B, S, 8): two-head causal self-attention plus the last position's input."""
    b, s = x.shape[0], x.shape[1]
    q, k, v = ((x @ p[w]).reshape(b, s, H, DM // H) for w in ("wq", "wk", "wv"))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(DM // H)
    causal = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
    w = jax.nn.softmax(jnp.where(causal, logits, -1e9), axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, s, DM)
    return o @ p["wo"] + x[:, -1:, :] * jnp.mean(x)


def _exported(fn, *specs):
    return export.export(jax.jit(fn))(*specs)


def _forms(exp):
    return {"export": bytes(exp.serialize()), "text": exp.mlir_module(), "object": exp}


def _mlp_export():
    b, = export.symbolic_shape("batch")
    f32 = jnp.float32
    p = {"w1": (24, 48), "b1": (48,), "w2": (48, 32), "b2": (32,), "w3": (32, 10)}
    return _exported(mlp, {k: jax.ShapeDtypeStruct(s, f32) for k, s in p.items()},
                     jax.ShapeDtypeStruct((b, 24), f32)), p


@pytest.mark.parametrize("form", ["export", "text", "object"])
def test_mlp_with_a_symbolic_batch(form):
    exp, shapes = _mlp_export()
    g = import_stablehlo(_forms(exp)[form], dynamic={"batch": (1, 64)})
    assert [v.name for v in g.inputs] == ["params.b1", "params.b2", "params.w1", "params.w2", "params.w3", "x"]
    with D.dim_ranges(g.dims):
        verify(g)
    assert g.dims == {"batch": D.DimRange(1, 64)}
    assert g.inputs[-1].shape == (D.sym("batch"), 24) and g.outputs[0].shape == (D.sym("batch"), 10)
    rng, _ = fresh_rng()
    params = {k: random_array(rng, s) * 0.3 for k, s in shapes.items()}
    for batch in (1, 3, 8):
        x = random_array(rng, (batch, 24))
        got = interpret(g, [params[k] for k in sorted(params)] + [x])[0]
        close(got, np.asarray(mlp(params, x)), 1e-5, 1e-5, f"batch {batch}")


@pytest.mark.parametrize("form", ["export", "text"])
def test_attention_with_symbolic_batch_and_sequence(form):
    b, s = export.symbolic_shape("b, s")
    f32 = jnp.float32
    p = {k: jax.ShapeDtypeStruct((DM, DM), f32) for k in ("wq", "wk", "wv", "wo")}
    exp = _exported(attention, p, jax.ShapeDtypeStruct((b, s, DM), f32))
    g = import_stablehlo(_forms(exp)[form], dynamic={"b": (1, 16), "s": (1, 40)})
    with D.dim_ranges(g.dims):
        verify(g)
    assert g.inputs[-1].shape == (D.sym("b"), D.sym("s"), DM)
    rng, _ = fresh_rng()
    params = {k: random_array(rng, (DM, DM)) * 0.5 for k in p}
    for batch, seq in ((1, 1), (3, 7), (8, 40), (2, 17)):
        x = random_array(rng, (batch, seq, DM))
        got = interpret(g, [params[k] for k in sorted(params)] + [x])[0]
        close(got, np.asarray(attention(params, x)), 2e-5, 2e-5, f"b={batch} s={seq}")


def test_a_range_the_assertions_refuse_names_the_range_that_works():
    exp, _ = _mlp_export()
    with pytest.raises(ModelError, match=r"Expected value >= 1 for dimension variable 'batch': it fails for "
                                         r"some batch in 0\.\.64; it holds for batch=1\.\.64\. Ranges where every "
                                         r"assertion holds: --dynamic batch=1\.\.64$"):
        import_stablehlo(_forms(exp)["export"], dynamic={"batch": (0, 64)})


def test_every_broken_assertion_is_reported_at_once_with_the_range_that_satisfies_all():
    b, = export.symbolic_shape("b", constraints=("b <= 64", "b >= 2"))
    exp = _exported(lambda x: x * 2, jax.ShapeDtypeStruct((b, 3), jnp.float32))
    with pytest.raises(ModelError) as e:
        import_stablehlo(exp, dynamic={"b": (1, 128)})
    msg = str(e.value)
    assert "'- b + 64' to be greater or equal to 0: it fails for some b in 1..128; it holds for b=1..64" in msg
    assert "'b - 2' to be greater or equal to 0: it fails for some b in 1..128; it holds for b=2..128" in msg
    assert msg.endswith("Ranges where every assertion holds: --dynamic b=2..64") and "{0}" not in msg
    assert import_stablehlo(exp, dynamic={"b": (2, 64)}).dims == {"b": D.DimRange(2, 64)}


def test_divisibility_assertion_and_dims_given_as_expressions():
    k2, = export.symbolic_shape("2*k")

    def f(x):
        return x.reshape(-1, 2, 3).sum(-1)

    exp = _exported(f, jax.ShapeDtypeStruct((k2, 3), jnp.float32))
    # an input dim jax knows as 2*k keeps a name of its own (input x, dim 0); the assertion says it must be even
    for form in ("text", "export"):
        with pytest.raises(ModelError, match=r"remainder when computing the value of 'k'.*holds for x_dim0=2\.\.16:2"
                                             r".*--dynamic x_dim0=2\.\.16:2$"):
            import_stablehlo(_forms(exp)[form], dynamic={"x_dim0": (1, 16)})


def test_equal_dims_of_two_inputs_are_one_dim():
    b, = export.symbolic_shape("b")
    exp = _exported(lambda x, y: x * y[:, :1], jax.ShapeDtypeStruct((b, 4), jnp.float32),
                    jax.ShapeDtypeStruct((b, 3), jnp.float32))
    g = import_stablehlo(_forms(exp)["export"], dynamic={"b": (1, 8)})
    assert g.inputs[0].shape[0] == g.inputs[1].shape[0] == D.sym("b")
    rng, _ = fresh_rng()
    x, y = random_array(rng, (5, 4)), random_array(rng, (5, 3))
    close(interpret(g, [x, y])[0], x * y[:, :1], 0, 0)


def test_plain_text_dims_without_jax_names():
    text = """
func.func @main(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.get_dimension_size %x, dim = 1 : (tensor<?x?xf32>) -> tensor<i32>
  %m = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x?xf32>) -> tensor<i32>
  %n1 = stablehlo.subtract %n, %c1 : tensor<i32>
  %lo = stablehlo.constant dense<[0, 1]> : tensor<2xi32>
  %m1 = stablehlo.reshape %m : (tensor<i32>) -> tensor<1xi32>
  %n2 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
  %hi = stablehlo.concatenate %m1, %n2, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %st = stablehlo.constant dense<1> : tensor<2xi32>
  %s = stablehlo.real_dynamic_slice %x, %lo, %hi, %st
      : (tensor<?x?xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x?xf32>
  %f = stablehlo.convert %n1 : (tensor<i32>) -> tensor<f32>
  %fb = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<f32>
  %shape = stablehlo.concatenate %m1, %n2, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %fbb = stablehlo.dynamic_broadcast_in_dim %fb, %shape, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x?xf32>
  %one = stablehlo.constant dense<1> : tensor<1xi32>
  %n1r = stablehlo.reshape %n1 : (tensor<i32>) -> tensor<1xi32>
  %shape2 = stablehlo.concatenate %m1, %n1r, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %part = stablehlo.real_dynamic_slice %fbb, %lo, %hi, %st
      : (tensor<?x?xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x?xf32>
  %r = stablehlo.multiply %s, %part : tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}"""
    g = import_stablehlo(text, dynamic={"arg0_dim0": (1, 9), "arg0_dim1": (2, 30)})
    assert g.outputs[0].shape == (D.sym("arg0_dim0"), D.sym("arg0_dim1") - 1)
    rng, _ = fresh_rng()
    for m, n in ((1, 2), (4, 9), (9, 30)):
        x = random_array(rng, (m, n))
        close(interpret(g, [x])[0], x[:, 1:] * (n - 1), 1e-6, 0, f"{m}x{n}")


def test_dynamic_iota_and_gather_on_symbolic_sizes():
    b, = export.symbolic_shape("b")

    def f(x):
        ramp = jnp.arange(x.shape[0], dtype=jnp.float32)
        return x[-2:] * 2.0, x * ramp[:, None], jax.lax.dynamic_index_in_dim(x, x.shape[0] // 2, keepdims=False)

    exp = _exported(f, jax.ShapeDtypeStruct((b, 5), jnp.float32))
    for form in ("export", "text"):
        g = import_stablehlo(_forms(exp)[form], dynamic={"b": (2, 12)})
        rng, _ = fresh_rng()
        for n in (2, 5, 12):
            x = random_array(rng, (n, 5))
            for i, (got, want) in enumerate(zip(interpret(g, [x]), f(x), strict=True)):
                close(got, np.asarray(want), 1e-6, 0, f"{form} b={n} output {i}")


@pytest.mark.parametrize("name", ["flip_roll_stride", "halves", "cumsum_over_dynamic_axis", "neighbour_difference"])
def test_dim_dependent_windows_run_on_the_host_kernels(name):
    """Windows whose starts and sizes are dim expressions, through the passes and one kernel set, at 3 shapes."""
    from aotc.hlo_passes.pipeline import run_pipeline
    from tests.helpers.host_run import run_on_host
    fn, _ = _PROGRAMS[name]
    b, s = export.symbolic_shape("b, s")
    g = import_stablehlo(_exported(fn, jax.ShapeDtypeStruct((b, s), jnp.float32)),
                         dynamic={"b": (1, 8), "s": (2, 20)})
    with D.dim_ranges(g.dims):
        opt, _ = run_pipeline(g)
    rng, _ = fresh_rng()
    runs = [[random_array(rng, shape)] for shape in ((1, 2), (3, 9), (8, 20))]
    results, _, _ = run_on_host(opt, runs[0], shapes=runs)
    for (x,), outs in zip(runs, results, strict=True):
        for got, want in zip(outs, jax.tree_util.tree_leaves(fn(jnp.asarray(x))), strict=True):
            close(got, np.asarray(want), 1e-5, 1e-5, f"{name} at {x.shape}")


def test_generated_kernels_serve_every_shape_from_one_compile():
    """The jax-exported attention through the passes and one set of kernels (host build), at 3 shapes."""
    from aotc.hlo_passes.pipeline import run_pipeline
    from tests.helpers.host_run import run_on_host
    b, s = export.symbolic_shape("b, s")
    p = {k: jax.ShapeDtypeStruct((DM, DM), jnp.float32) for k in ("wq", "wk", "wv", "wo")}
    exp = _exported(attention, p, jax.ShapeDtypeStruct((b, s, DM), jnp.float32))
    g = import_stablehlo(_forms(exp)["export"], dynamic={"b": (1, 16), "s": (1, 40)})
    with D.dim_ranges(g.dims):
        opt, _ = run_pipeline(g)
    rng, _ = fresh_rng()
    params = {k: random_array(rng, (DM, DM)) * 0.5 for k in p}
    weights = [params[k] for k in sorted(params)]
    runs = [weights + [random_array(rng, (n, m, DM))] for n, m in ((1, 1), (3, 7), (16, 40))]
    results, _, _ = run_on_host(opt, runs[0], shapes=runs)
    for ins, outs in zip(runs, results, strict=True):
        close(outs[0], np.asarray(attention(params, ins[-1])), 2e-5, 2e-5, f"shape {ins[-1].shape}")


def _conv_pool(x, w):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jax.nn.relu(y).mean(axis=(1, 2))


_B, _S = "b", "s"
_PROGRAMS = {   # name: (fn, input specs with "b"/"s" for dynamic dims, int inputs)
    "conv_pool": (_conv_pool, [((_B, 8, 8, 3), False), ((3, 3, 3, 4), False)]),
    "embedding_positions": (lambda t, e: e[t] * jnp.arange(t.shape[1])[None, :, None],
                            [((_B, _S), True), ((50, 8), False)]),
    "argmax_sort_top_k": (lambda x: (jnp.argmax(x, -1), jnp.sort(x, -1), jax.lax.top_k(x, 3)[0]),
                          [((_B, 7), False)]),
    "cumsum_over_dynamic_axis": (lambda x: jnp.cumsum(x, axis=1), [((_B, _S), False)]),
    "concat_pad": (lambda x: jnp.pad(jnp.concatenate([x, x * 2], axis=0), ((1, 2), (0, 1))), [((_B, 3), False)]),
    "fori_loop": (lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + x, x), [((_B, 3), False)]),
    "flatten_both": (lambda x: x.reshape(-1, 4).sum(0), [((_B, _S, 4), False)]),
    "scatter_add_rows": (lambda x, i: x.at[i].add(1.0), [((_B, 4), False), ((3,), True)]),
    "neighbour_difference": (lambda x: x[:, 1:] - x[:, :-1], [((_B, _S), False)]),
    "outer_broadcast": (lambda x, y: x + y, [((_B, 1), False), ((1, _S), False)]),
    "one_hot": (lambda t: jax.nn.one_hot(t, 5), [((_B, _S), True)]),
    "causal_ones": (lambda x: x @ jnp.tril(jnp.ones((x.shape[1], x.shape[1]))), [((_B, _S), False)]),
    "argsort_take_along": (lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1), [((_B, 6), False)]),
    "repeat_tile": (lambda x: (jnp.repeat(x, 2, axis=1), jnp.tile(x, (1, 2))), [((_B, _S), False)]),
    "flip_roll_stride": (lambda x: (jnp.flip(x, axis=1), jnp.roll(x, 1, axis=1), x[:, ::2]), [((_B, _S), False)]),
    "halves": (lambda x: x[:, : x.shape[1] // 2] + x[:, x.shape[1] - x.shape[1] // 2:], [((_B, _S), False)]),
    "max_pool_same": (lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3), (1, 1), "SAME"),
                      [((_B, _S), False)]),
    "update_row": (lambda x, i: jax.lax.dynamic_update_slice(x, jnp.ones((1, 2)), (i, 0)),
                   [((_B, 4), False), ((), True)]),
    "row_gather": (lambda x: x[jnp.arange(x.shape[0]), jnp.zeros(x.shape[0], jnp.int32)], [((_B, _S), False)]),
    "associative_scan": (lambda x: jax.lax.associative_scan(jnp.add, x, axis=1), [((_B, 8), False)]),
    "scan_carry_over_batch": (lambda x: jax.lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(x.shape[1:]), x)[1],
                              [((5, _B), False)]),
    "median_diff_clip": (lambda x: (jnp.median(x, axis=1), jnp.diff(x, axis=1), jnp.clip(x, -0.5, 0.5)),
                         [((_B, 7), False)]),
    "cumprod_over_dynamic_axis": (lambda x: jnp.cumprod(x, axis=1), [((_B, _S), False)]),
    "special_functions": (lambda x: jax.scipy.special.gammaln(jnp.abs(x) + 0.5) + jax.scipy.special.i1e(x)
                          + jax.scipy.special.erfinv(jnp.tanh(x)), [((_B, _S), False)]),
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_common_programs_with_dynamic_dims(name):
    fn, specs = _PROGRAMS[name]
    b, s = export.symbolic_shape("b, s")
    sym = {_B: b, _S: s}
    structs = [jax.ShapeDtypeStruct(tuple(sym.get(d, d) for d in shape), jnp.int32 if ints else jnp.float32)
               for shape, ints in specs]
    used = {d for shape, _ in specs for d in shape if isinstance(d, str)}
    g = import_stablehlo(_exported(fn, *structs), dynamic={k: r for k, r in (("b", (1, 8)), ("s", (2, 20))) if k in used})
    rng, _ = fresh_rng()
    for env in ({_B: 1, _S: 2}, {_B: 3, _S: 7}, {_B: 8, _S: 20}):
        args = [rng.integers(0, 3, tuple(env.get(d, d) for d in shape)).astype(np.int32) if ints
                else random_array(rng, tuple(env.get(d, d) for d in shape)) for shape, ints in specs]
        want = jax.tree_util.tree_leaves(fn(*(jnp.asarray(a) for a in args)))
        for i, (got, ref) in enumerate(zip(interpret(g, args), want, strict=True)):
            close(got, np.asarray(ref), 1e-5, 1e-5, f"{env} output {i}")


def test_multi_platform_export_takes_the_cuda_branch():
    """jax's `_platform_index` argument is no input: aotc's kernels are CUDA's, so CUDA's lowering is kept."""
    b, = export.symbolic_shape("b")

    def f(x):
        return jax.lax.platform_dependent(x, cpu=lambda x: x * 2.0, cuda=lambda x: x * 3.0)

    exp = export.export(jax.jit(f), platforms=("cpu", "cuda"))(jax.ShapeDtypeStruct((b, 3), jnp.float32))
    rng, _ = fresh_rng()
    x = random_array(rng, (4, 3))
    for form in ("object", "export"):
        g = import_stablehlo(_forms(exp)[form], dynamic={"b": (1, 8)})
        assert len(g.inputs) == 1 and g.inputs[0].shape == (D.sym("b"), 3)
        close(interpret(g, [x])[0], x * 3.0, 1e-6, 0, form)


def test_a_loop_over_a_dynamic_dim_is_refused_naming_why():
    b, = export.symbolic_shape("b")
    exp = _exported(lambda x: jax.lax.fori_loop(0, x.shape[0], lambda i, c: c + x[i], jnp.zeros(3)),
                    jax.ShapeDtypeStruct((b, 3), jnp.float32))
    with pytest.raises(UnsupportedError, match=r"stablehlo.while .*trip count depends on dynamic dims "
                                               r"\(whether 1 < b depends .*b in 1\.\.8"):
        import_stablehlo(exp, dynamic={"b": (1, 8)})
