"""A jax.export program with symbolic dims, compiled once into a dynamic engine, run on the cpu device at several
shapes against jax."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import export  # noqa: E402

import aotc.compiler  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from aotc.package.runtime_binding import Engine  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import close  # noqa: E402
from tests.importers.stablehlo.test_symbolic_dims import DM, attention  # noqa: E402


def _engine(tmp_path, exp, dynamic):
    graph = import_stablehlo(exp, dynamic=dynamic)
    path = tmp_path / "m.engine"
    aotc.compiler.compile(graph, str(path), arch="none")
    return Engine(str(path))


def test_attention_engine_serves_batch_and_sequence(tmp_path):
    b, s = export.symbolic_shape("b, s")
    p = {k: jax.ShapeDtypeStruct((DM, DM), jnp.float32) for k in ("wq", "wk", "wv", "wo")}
    exp = export.export(jax.jit(attention))(p, jax.ShapeDtypeStruct((b, s, DM), jnp.float32))
    engine = _engine(tmp_path, exp, {"b": (1, 16), "s": (1, 40)})
    ctx = engine.create_context(device="cpu")
    rng, _ = fresh_rng()
    params = {k: random_array(rng, (DM, DM)) * 0.5 for k in p}
    names = [t.name for t in engine.inputs]
    for n, m in ((1, 1), (3, 7), (16, 40), (2, 13)):
        x = random_array(rng, (n, m, DM))
        outs = ctx.run(dict(zip(names, [params[k] for k in sorted(params)] + [x])))
        got = outs[engine.outputs[0].name]
        close(got, np.asarray(attention(params, x)), 2e-5, 2e-5, f"b={n} s={m}")
    with pytest.raises(AotcError, match="b"):          # outside the range: refused, naming the dim
        ctx.run(dict(zip(names, [params[k] for k in sorted(params)] + [random_array(rng, (17, 3, DM))])))
