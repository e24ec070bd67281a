"""The kernel cache returns what was stored, keys on every part, and can be turned off."""
from __future__ import annotations

import pytest

from aotc.kernels import cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AOTC_NO_CACHE", raising=False)
    return tmp_path


def counting(payload: bytes):
    calls = []

    def produce():
        calls.append(1)
        return payload
    return produce, calls


def test_hit_after_miss(cache_dir):
    produce, calls = counting(b"cubin")
    assert cache.cached_bytes("k", ["src", b"\x00opt"], produce) == b"cubin"
    assert cache.cached_bytes("k", ["src", b"\x00opt"], produce) == b"cubin"
    assert len(calls) == 1
    (entry,) = (cache_dir / "k").iterdir()
    assert entry.read_bytes() == b"cubin"


def test_every_key_part_matters():
    keys = [["ab", "c"], ["a", "bc"], ["ab", "c", ""], [b"ab", "d"]]
    assert len({cache.content_key(k) for k in keys}) == len(keys)
    assert cache.content_key(["ab", "c"]) == cache.content_key([b"ab", b"c"])


def test_kinds_do_not_share_entries():
    produce_a, _ = counting(b"A")
    produce_b, _ = counting(b"B")
    assert cache.cached_bytes("host", ["x"], produce_a) == b"A"
    assert cache.cached_bytes("nvrtc", ["x"], produce_b) == b"B"


def test_disabled(cache_dir, monkeypatch):
    monkeypatch.setenv("AOTC_NO_CACHE", "1")
    produce, calls = counting(b"x")
    cache.cached_bytes("k", ["a"], produce)
    cache.cached_bytes("k", ["a"], produce)
    assert len(calls) == 2
    assert not (cache_dir / "k").exists()


def test_failed_produce_stores_nothing(cache_dir):
    def boom():
        raise RuntimeError("compiler crashed")
    with pytest.raises(RuntimeError):
        cache.cached_bytes("k", ["a"], boom)
    assert not (cache_dir / "k").exists() or not list((cache_dir / "k").iterdir())


def test_no_temp_files_left(cache_dir):
    for i in range(5):
        cache.cached_bytes("k", [str(i)], lambda: b"v" * 1000)
    names = [p.name for p in (cache_dir / "k").iterdir()]
    assert len(names) == 5 and not any(n.startswith(".tmp-") for n in names)
