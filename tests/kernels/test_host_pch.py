"""The host build's precompiled emulation header: skipped by the first build of a cache (it would cost that
build more than it saves), made by the second, reused after; builds are correct with or without it."""
from __future__ import annotations

from pathlib import Path

import pytest

from aotc.kernels import host_compile as hc


@pytest.fixture
def pch_builds(tmp_path, monkeypatch):
    """The cache in tmp_path, and the PCH compiles that ran (faked: they write their -o file)."""
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AOTC_NO_CACHE", raising=False)
    monkeypatch.delenv("AOTC_NO_PCH", raising=False)
    runs = []

    def fake_run(cmd, what):
        runs.append(what)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"gch")
    monkeypatch.setattr(hc, "_run", fake_run)
    return runs


def test_the_first_build_goes_without_the_second_makes_it(pch_builds):
    assert hc.precompiled_header() is None and pch_builds == []
    header = hc.precompiled_header()
    assert pch_builds == ["precompiling cuda_host_emu.h"]
    assert header.read_bytes() == hc.EMU_HEADER.read_bytes() and header.with_suffix(".h.gch").read_bytes() == b"gch"
    assert hc.precompiled_header() == header and len(pch_builds) == 1       # reused, not rebuilt


def test_each_flag_set_counts_its_own_builds(pch_builds):
    assert hc.precompiled_header("-O1") is None
    assert hc.precompiled_header("-O2") is None          # another key: its own first build
    assert hc.precompiled_header("-O1") is not None and len(pch_builds) == 1


def test_no_pch_when_caching_is_off(pch_builds, monkeypatch):
    monkeypatch.setenv("AOTC_NO_PCH", "1")
    assert [hc.precompiled_header() for _ in range(3)] == [None] * 3 and pch_builds == []
