"""The ONNX backend node test suite through aotc: every case compiled and run on the `cpu` device.

Each case goes through AotcBackend (import, passes, fusion, codegen, engine,
C runtime), with the host builds of all cases prebuilt in shared chunks
(host_batch.py). Cases listed in expected_failures.txt must fail (strict
xfail). The outcome of every case is recorded in `user_properties`, from
which conftest.py prints the coverage summary.
"""
import pytest
from onnx.backend.test.runner import Runner

from aotc.errors import UnsupportedError
from tests.onnx_backend import cases as C
from tests.onnx_backend.backend import AotcBackend, as_array

pytestmark = pytest.mark.slow


def _names():
    try:
        return sorted(C.node_cases())
    except Exception:  # noqa: BLE001 - onnx missing: the test below skips
        return []


@pytest.fixture(scope="session")
def prebuilt():
    from tests.onnx_backend.host_batch import prebuild
    return prebuild(C.node_cases().values())


def run_case(case):
    rep = AotcBackend.prepare(case.model, "CPU")
    for inputs, want in case.data_sets:
        got = rep.run(inputs)
        Runner.assert_similar_outputs([as_array(w) for w in want], got, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("name", _names())
def test_node(name, prebuilt, record_property, request):
    case = C.node_cases()[name]
    xf = C.expected_failure(name)
    record_property("op_types", ",".join(C.case_op_types(name)))
    if xf:
        record_property("status", f"xfail:{xf[0]}")
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{xf[0]}: {xf[1]}"))
    try:
        run_case(case)
    except UnsupportedError as e:
        record_property("error", str(e).splitlines()[0][:400])
        if not xf:
            record_property("status", "unsupported")
        raise
    except BaseException as e:
        record_property("error", f"{type(e).__name__}: " + (str(e).strip().splitlines() or [""])[0][:400])
        if not xf:
            record_property("status", "failed")
        raise
    if not xf:
        record_property("status", "passed")


KNOWN_TAGS = C.EXCLUDED_TAGS | {"unsupported", "bug"}


def test_expected_failure_list_is_valid():
    names = C.node_cases()
    for pat, tag, reason in C.expected_failures():
        assert tag in KNOWN_TAGS, f"{pat.pattern}: unknown tag {tag!r}"
        assert reason, f"{pat.pattern}: no reason"
        assert any(pat.fullmatch(n) for n in names), f"{pat.pattern} matches no node case"
