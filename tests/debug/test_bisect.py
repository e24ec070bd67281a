"""bisect: an fp16 overflow is fixed by keeping a few ONNX nodes in f32, and the proposal compiles."""
import numpy as np
import pytest

import aotc.compiler
from aotc.debug import bisect as B
from aotc.debug.compare import DeviceReport, KernelReport, Session
from aotc.debug.metrics import TensorError
from aotc.debug.onnx_model import ort_run
from aotc.errors import AotcError
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.debug._models import mlp, overflow
from tests.helpers.rng import fresh_rng

pytest.importorskip("onnxruntime")


def test_bisect_fixes_the_fp16_overflow():
    session = Session(overflow(), seed=2)
    fix = B.bisect_precision(session, "fp16", max_trials=16)
    assert not fix.before.passes and fix.before.first_bad is not None
    assert fix.fixed and fix.after.passes and fix.trials <= 16
    assert fix.added and set(fix.keep_fp32) <= {"scale_up", "square", "proj", "scale_down", "act"}
    # the square's 1e6 cannot be stored in fp16: the fix keeps the square, or the GEMM whose prologue computes it
    assert {"square", "proj"} & set(fix.keep_fp32)
    d = fix.as_dict()
    assert d["keep_fp32"] == fix.keep_fp32 and d["error_after_fix"]["within_tolerance"]
    assert d["error_after_fix"]["max_rel_err"] <= 1e-2 and fix.argument().startswith("--keep-fp32 ")
    # the user's next step: compile with the proposal, on fresh inputs
    rng, seed = fresh_rng()
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    plan = aotc.compiler.compile(overflow(), arch="none", precision="fp16", keep_fp32=fix.keep_fp32).plan
    got = Engine(engine_bytes(plan)).create_context().run(x)["y"]
    want = ort_run(overflow(), x)["y"]
    assert np.isfinite(got).all() and np.abs(got - want).max() <= 1e-2 * np.abs(want).max(), seed


def test_nothing_to_keep_when_the_engine_is_fine():
    fix = B.bisect_precision(Session(mlp(), seed=1), "fp16")
    assert fix.fixed and fix.added == [] and fix.trials == 1


@pytest.mark.parametrize("precision, match", [("fp32", "applies to fp16 and bf16"), ("tf32", "applies to fp16"),
                                              ("int8", "int8 engines do not exist")])
def test_other_precisions_are_refused(precision, match):
    with pytest.raises(AotcError, match=match):
        B.bisect_precision(Session(mlp()), precision)


def _kernel(i, nodes, rel=0.0, inf=0):
    return KernelReport(i, f"k{i}", nodes, [f"t{i}"], TensorError(rel, rel, 0, inf), nodes + ["x.f16"], nodes)


def test_next_names_start_at_the_first_bad_kernel_then_its_feeders():
    report = DeviceReport("cpu", [_kernel(0, ["a"]), _kernel(1, ["b", "c"], rel=0.5), _kernel(2, ["d"], inf=3)],
                          [], {"y": TensorError(0, 0, 0, 3)}, 1e-2)
    feeders = {"a": [], "b": ["a"], "c": ["b"], "d": ["c"]}
    assert B.next_names(report, set(), feeders) == ["b", "c"]
    assert B.next_names(report, {"b"}, feeders) == ["c"]
    assert B.next_names(report, {"b", "c"}, feeders) == ["a"]          # all kept: what feeds them
    assert B.next_names(report, {"a", "b", "c"}, feeders) == ["d"]     # then the next worst kernel
