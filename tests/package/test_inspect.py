"""`aotc inspect`'s description: the runtime's validity check per device."""
from __future__ import annotations

import aotc
from aotc.package.engine_format import engine_bytes
from aotc.package.inspect import describe_engine, format_description


def test_inspect_says_where_the_engine_runs(host_lib, plan_factory):
    data = engine_bytes(plan_factory(host_lib))
    info = describe_engine(data)
    assert info["runnable"]["cpu"] == {"ok": True, "why": aotc.check_engine(data, "cpu")[1]}
    assert info["runnable"]["cpu"]["why"].startswith("runnable on cpu: host build")
    assert info["runnable"]["cuda"]["why"] == aotc.check_engine(data, "cuda")[1]
    text = format_description(info, "t.engine")
    assert "\ncpu here: yes: runnable on cpu" in text and "\ncuda here: " in text
    bare = describe_engine(engine_bytes(plan_factory()))
    assert bare["runnable"]["cpu"]["ok"] is False and "no host build" in bare["runnable"]["cpu"]["why"]


def test_dynamic_engine_shows_dims_max_shapes_variants_and_totals_at_max(tmp_path, plan_factory):
    import json

    from click.testing import CliRunner

    from aotc.cli.main import main
    from tests.package.dynamic_plans import make_dynamic_plan
    plan = make_dynamic_plan()
    for i, launch in enumerate(plan.launches):
        launch.bytes, launch.flops = 10 ** i, 100 * 10 ** i
    data = engine_bytes(plan)
    info = describe_engine(data)
    # at batch=64 the batch>8 variant (launch 2) runs, the batch<=8 one (launch 1) does not
    assert info["total_bytes"] == 1 + 100 + 1000 and info["total_flops"] == 100 * 1101
    assert info["totals_at"] == {"batch": 64, "seq": 64}
    text = format_description(info, "d.engine")
    assert "dynamic dims: batch 0..64, seq 4..64 (multiples of 4)" in text
    assert "x: f32[batch,16] (max [64,16])" in text and "y: f32[batch*16] (max [1024])" in text
    assert "grid (r13=32, 1, 1)" in text and "[batch<=8]" in text and "[all sizes]" in text
    assert "memory: arena 4096 B at max" in text and "modelled at batch=64, seq=64: 1101 B moved" in text
    path = tmp_path / "d.engine"
    path.write_bytes(data)
    res = CliRunner().invoke(main, ["inspect", str(path), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["dims"] == {"batch": [0, 64], "seq": [4, 64]} and got["dim_divisors"] == {"seq": 4}
    assert got["inputs"][0] == {"name": "x", "dtype": "f32", "shape": ["batch", 16], "max_shape": [64, 16]}
    assert [k["variant"] for k in got["kernels"]] == ["", "batch<=8", "batch>8", ""]
    assert [k["grid_at_max"][0] for k in got["kernels"]] == [8, 32, 8, 2]   # ceildiv(1024, 128 / 32), 64 / 32
    static = describe_engine(engine_bytes(plan_factory()))
    assert static["dims"] == {} and "variant" not in static["kernels"][0]
    assert "dynamic dims" not in format_description(static) and "at max" not in format_description(static)


def test_inspect_names_each_kernels_math(tmp_path):
    """Every kernel entry says which arithmetic it runs (the compiler records it in the manifest)."""
    import json

    import numpy as np
    from click.testing import CliRunner

    from aotc.cli.main import main
    from aotc.ir.graph import GraphBuilder
    rng = np.random.default_rng()
    b = GraphBuilder()
    x = b.input("x", (4, 64), "i8")
    w = b.constant(rng.integers(-128, 128, (32, 64)).astype(np.int8), "w")
    acc = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(1,),
                out_dtype="i32")
    y = b.add("convert", acc, dtype="f32")
    h = b.input("h", (4, 16), "f16")
    wh = b.constant(rng.standard_normal((16, 8)).astype(np.float16), "wh")
    d = b.add("dot_general", h, wh, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    z = b.input("z", (5,))
    graph = b.build([b.add("tanh", y), d, b.add("exp", z)])
    path = tmp_path / "m.engine"
    aotc.compile(graph, str(path), host=False)
    res = CliRunner().invoke(main, ["inspect", str(path), "--json"])
    assert res.exit_code == 0, res.output
    kernels = json.loads(res.output)["kernels"]
    assert sorted(k["math"] for k in kernels) == ["f16", "f32", "int8"]
    assert all("math_by_arch" not in k for k in kernels)
    text = CliRunner().invoke(main, ["inspect", str(path)]).output
    assert any(" int8 grid " in line and "aotc_dot_mma8_" in line for line in text.splitlines())
    plain = describe_engine(path.read_bytes())
    assert [k["math"] for k in plain["kernels"]] == [k["math"] for k in kernels]


def test_inspect_text_says_which_arch_runs_other_math(plan_factory):
    """An fp8 kernel runs e4m3 mma on sm_90 but f16 mma on sm_80: the text view names the exception."""
    from aotc.kernels.kernel_math import FP8_ON_SM80
    from aotc.package.inspect import kernel_math
    info = describe_engine(engine_bytes(plan_factory()))
    k = info["kernels"][0]
    assert k["math"] is None or k["math"] in ("f32", "tf32", "f16", "bf16", "int8", "fp8")
    k["math"], k["math_by_arch"] = "fp8", {"sm_80": FP8_ON_SM80}
    text = format_description(info)
    assert f"{k['name']} math fp8, except on sm_80: {FP8_ON_SM80}" in text
    recorded = {"kernel_math": {"aotc_dot_mma8_x": "fp8"}, "kernel_math_by_arch": {"aotc_dot_mma8_x": {"sm_80": "f16"}}}
    assert kernel_math(recorded, "aotc_dot_mma8_x") == ("fp8", {"sm_80": "f16"})
    assert kernel_math({}, "aotc_dot_tf32_1") == ("tf32", {}) and kernel_math({}, "aotc_loop_1") == (None, {})
