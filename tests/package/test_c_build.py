"""c_build: one compile per source hash into the cache, clean errors when cc fails."""
from __future__ import annotations

import ctypes

import pytest

from aotc.errors import RuntimeFailure
from aotc.package.c_build import build_cached


def test_built_once_per_source_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "a.c").write_text("__attribute__((visibility(\"default\"))) int seven(void) { return 7; }\n")
    (tmp_path / "a.h").write_text("int seven(void);\n")
    lib = build_cached("test library", str(tmp_path), ["a.c"], ["a.h"], "ctest")
    assert ctypes.CDLL(lib).seven() == 7
    assert build_cached("test library", str(tmp_path), ["a.c"], ["a.h"], "ctest") == lib
    (tmp_path / "a.h").write_text("int seven(void); /* changed */\n")
    assert build_cached("test library", str(tmp_path), ["a.c"], ["a.h"], "ctest") != lib


def test_a_failed_compile_names_the_library_and_keeps_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "bad.c").write_text("int broken( {\n")
    with pytest.raises(RuntimeFailure, match="building the test library with 'cc' failed") as e:
        build_cached("test library", str(tmp_path), ["bad.c"], [], "ctest")
    assert "bad.c" in str(getattr(e.value, "log", "")) + str(e.value)
