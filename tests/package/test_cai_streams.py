"""Which stream a run over `__cuda_array_interface__` arguments is enqueued on.

torch's interface is version 2 and has no `stream` key. That does not mean
"ready" (only version 3's `stream: None` says so): the tensor may still be
being written on torch's current stream, by default the legacy default stream.
The run must then go on that stream, or it may read inputs before they are
written. The decision is tested on fake interface objects and a recording
stand-in for the runtime library, so no GPU is needed.
"""
from __future__ import annotations

import threading

import pytest

from aotc.errors import InputError
from aotc.package import runtime_binding as rb
from aotc.package.plan import TensorSpec

SPEC = TensorSpec("x", "f32", (4, 8))


class FakeCudaArray:
    def __init__(self, version=3, ptr=0xBEEF00, **extra):
        self.__cuda_array_interface__ = {"shape": (4, 8), "typestr": "<f4", "data": (ptr, False),
                                         "version": version, **extra}


def stream_of(*arrays) -> int | None:
    return rb._stream_of([rb._cuda_buffer(SPEC, a, "input", "cuda") for a in arrays])


def test_version_2_without_stream_waits_for_the_legacy_default_stream():
    assert stream_of(FakeCudaArray(version=2)) == rb.LEGACY_DEFAULT_STREAM == 1
    assert stream_of(FakeCudaArray(version=1), FakeCudaArray(version=2)) == 1


def test_version_3_stream_is_taken_as_given():
    assert stream_of(FakeCudaArray(stream=None)) is None          # the producer says: ready
    assert stream_of(FakeCudaArray()) is None                     # key left out: the same
    assert stream_of(FakeCudaArray(stream=2)) == 2                # per-thread default stream
    assert stream_of(FakeCudaArray(stream=0x7F001234)) == 0x7F001234
    assert stream_of(FakeCudaArray(version=2), FakeCudaArray(stream=None)) == 1


@pytest.mark.parametrize("stream,message", [(0, "0 is ambiguous"), (-3, "not a stream handle"),
                                            ("s", "not a stream handle"), (True, "not a stream handle")])
def test_bad_version_3_streams_are_refused(stream, message):
    with pytest.raises(InputError, match=f"input 'x': __cuda_array_interface__ stream .*{message}"):
        stream_of(FakeCudaArray(stream=stream))


def test_a_version_2_tensor_and_another_stream_cannot_be_mixed():
    with pytest.raises(InputError, match="different streams"):
        stream_of(FakeCudaArray(version=2), FakeCudaArray(stream=0x5000))


class RecordingLib:
    """Stands in for the runtime library: records the binds and the stream of each enqueue."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            return None                                   # a NULL status: OK
        return call


def test_run_enqueues_a_torch_style_tensor_on_the_legacy_stream():
    engine = type("E", (), {"inputs": [SPEC], "outputs": [TensorSpec("y", "f32", (4, 8))]})()
    ctx = object.__new__(rb.Context)
    ctx.engine, ctx.device, ctx._lock, ctx._ptr = engine, "cuda", threading.Lock(), 0x1000
    ctx._lib = lib = RecordingLib()
    out = FakeCudaArray(version=2, ptr=0xCAFE00)
    ctx.run({"x": FakeCudaArray(version=2)}, outputs={"y": out})
    enqueues = [args for name, args in lib.calls if name == "aotc_context_enqueue"]
    assert enqueues == [(0x1000, 1)]
    binds = {name: args[2] for name, args in lib.calls if name.startswith("aotc_context_bind")}
    assert binds == {"aotc_context_bind_input": 0xBEEF00, "aotc_context_bind_output": 0xCAFE00}
    ctx._ptr = None                                       # nothing to release in the stand-in
