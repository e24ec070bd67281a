"""A jax.export program with symbolic dims, compiled once into a dynamic engine, run on the cpu device at several
shapes against jax."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import export  # noqa: E402

import aotc  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.package.runtime_binding import Engine  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import close  # noqa: E402
from tests.importers.stablehlo.test_symbolic_dims import DM, attention  # noqa: E402


def _engine(tmp_path, exp, dynamic):
    path = tmp_path / "m.engine"
    aotc.compile(exp, str(path), arch="none", dynamic=dynamic)     # the Exported object itself
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


def test_cli_compiles_a_jax_export_with_dynamic_ranges(tmp_path):
    """`aotc compile prog.jaxexport --dynamic batch=..`: a range the program's assertions break is one line
    naming the range that works; that range compiles, and `aotc run --dim` runs it."""
    from click.testing import CliRunner

    from aotc.cli.main import main
    from tests.importers.stablehlo.test_symbolic_dims import _mlp_export
    exp, _ = _mlp_export()
    prog = tmp_path / "mlp.jaxexport"
    prog.write_bytes(bytes(exp.serialize()))
    out = tmp_path / "mlp.engine"
    res = CliRunner().invoke(main, ["compile", str(prog), "-o", str(out), "--arch", "none", "-q",
                                    "--dynamic", "batch=0..64"])
    assert res.exit_code == 1 and "Traceback" not in res.output and not out.exists()
    assert "--dynamic batch=1..64" in res.output and len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(main, ["compile", str(prog), "-o", str(out), "--arch", "none", "-q",
                                    "--dynamic", "batch=1..64"])
    assert res.exit_code == 0, res.output
    assert Engine(str(out)).inputs[-1].name == "x"
    res = CliRunner().invoke(main, ["run", str(out), "--device", "cpu", "--dim", "batch=5"])
    assert res.exit_code == 0 and "float32[5, 10]" in res.output, res.output
