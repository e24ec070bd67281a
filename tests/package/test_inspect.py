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
