"""First-use work in device_cuda.c is complete before the first kernel can read it.

The contexts' streams are CU_STREAM_NON_BLOCKING, so nothing orders them after
work on the legacy stream: the weight upload (cuMemcpyHtoD from pageable memory
may return before its DMA lands) and the zeroing of the split-K counters
(cuMemsetD8 on device memory is asynchronous). Without a GPU the order is read
from the source: every synchronous legacy-stream call is followed, in the same
function and before it returns, by a wait on the legacy stream. (A stand-in
driver that records the calls can check the same at run time.)
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

SOURCE = (Path(__file__).resolve().parents[2] / "aotc" / "package" / "runtime" / "device_cuda.c").read_text()
LEGACY_CALLS = re.compile(r"\bcu\.(MemcpyHtoD|MemsetD8|MemcpyDtoH|Memset\w*)\s*\(")


def function_body(name: str) -> str:
    m = re.search(rf"^[^\n;]*\b{name}\([^)]*\)\s*{{", SOURCE, re.M)
    assert m, f"{name} not found in device_cuda.c"
    depth, i = 0, m.end() - 1
    for j in range(i, len(SOURCE)):
        depth += {"{": 1, "}": -1}.get(SOURCE[j], 0)
        if depth == 0:
            return SOURCE[i:j + 1]
    raise AssertionError(f"unbalanced braces in {name}")


def test_streams_are_non_blocking_and_the_wait_is_on_the_legacy_stream():
    assert "StreamCreate(&stream, CU_STREAM_NON_BLOCKING)" in SOURCE
    assert re.search(r"finish_legacy_stream\(void\)\s*{\s*return cu\.StreamSynchronize\(NULL\);", SOURCE)


def _legacy_calls(body: str) -> list[re.Match]:
    return [m for m in LEGACY_CALLS.finditer(body) if not m.group(1).endswith("Async")]


@pytest.mark.parametrize("function,call", [("prepare_locked", "MemcpyHtoD"),
                                           ("aotc_cuda_context_init", "MemsetD8")])
def test_first_use_work_is_waited_for_before_returning(function, call):
    body = function_body(function)
    calls = _legacy_calls(body)
    assert [m.group(1) for m in calls] == [call]
    after = body[calls[0].end():]
    wait = after.find("finish_legacy_stream()")
    assert wait >= 0, f"{function}: cu.{call} is never waited for"
    assert "return" not in after[:wait], f"{function} may return between cu.{call} and the wait"


def test_no_other_function_runs_work_on_the_legacy_stream():
    """Run-path copies go on the context's (or the caller's) stream, with the Async calls."""
    everywhere = sorted(m.group(1) for m in _legacy_calls(SOURCE))
    first_use = sorted(m.group(1) for f in ("prepare_locked", "aotc_cuda_context_init")
                       for m in _legacy_calls(function_body(f)))
    assert everywhere == first_use == ["MemcpyHtoD", "MemsetD8"]
