"""The engine container: round trip, atomic write, validation errors."""
from __future__ import annotations

import json
import os
import random
import struct
import zlib

import pytest

from aotc.errors import EngineFormatError
from aotc.package import engine_format as ef
from aotc.package.plan import BufferRef, Launch



def _fix_header(data: bytearray) -> bytearray:
    """Recompute the table and header CRCs after editing the header or table."""
    count, toff = struct.unpack_from("<IQ", data, 36)
    struct.pack_into("<I", data, 56, zlib.crc32(bytes(data[toff:toff + 48 * count])))
    struct.pack_into("<I", data, 60, zlib.crc32(bytes(data[:60])))
    return data


def _table(data: bytes) -> list[tuple]:
    count, toff = struct.unpack_from("<IQ", data, 36)
    return [struct.unpack_from("<II16sQQII", data, toff + 48 * i) for i in range(count)]


def test_round_trip_all_sections(host_lib, plan_factory):
    make_plan = plan_factory
    plan = make_plan(host_lib)
    data = ef.engine_bytes(plan)
    back = ef.read_engine(data)
    assert back.inputs == plan.inputs and back.outputs == plan.outputs
    assert back.arena_size == plan.arena_size and back.weights == plan.weights
    assert back.cubins == plan.cubins and back.ptx == plan.ptx and back.ptx_arch == plan.ptx_arch
    assert back.host_lib == plan.host_lib and back.manifest == plan.manifest
    assert [(l.kernel, l.grid, l.block, l.smem, l.args, l.bytes, l.flops, l.region)
            for l in back.launches] == [(l.kernel, l.grid, l.block, l.smem, l.args, l.bytes,
                                         l.flops, l.region) for l in plan.launches]
    kinds = sorted(k for k, *_ in _table(data))
    assert kinds == [1, 2, 3, 4, 4, 5, 6]
    for kind, align, tag, off, size, crc, _ in _table(data):
        assert off % 256 == 0 and align == 256
        assert zlib.crc32(data[off:off + size]) == crc
    assert ef.engine_bytes(back) == data  # deterministic and lossless


def test_zeroed_arena_tail_round_trips_and_is_bounded(plan_factory):
    """arena_zeroed (split-K tile counters) sits in the PLAN header; it cannot exceed the arena."""
    plan = plan_factory()
    plan.arena_zeroed = 256
    back = ef.read_engine(ef.engine_bytes(plan))
    assert back.arena_zeroed == 256 and ef.read_manifest(ef.engine_bytes(plan))["arena_zeroed"] == 256
    plan.arena_zeroed = plan.arena_size + 1
    with pytest.raises(ValueError, match="zeroed arena tail"):
        ef.engine_bytes(plan)


def test_manifest_is_readable_json(host_lib, plan_factory):
    make_plan = plan_factory
    data = ef.engine_bytes(make_plan(host_lib))
    man = ef.read_manifest(data)
    assert man["format_version"] == ef.FORMAT_VERSION and man["archs"] == ["sm_80", "sm_90"]
    assert man["inputs"][0] == {"name": "x", "dtype": "f32", "shape": [10, 100], "bytes": 4000}
    assert man["launches"][1]["region"] == "scale" and man["totals"]["flops"] == 3000
    assert man["arena_size"] == 4256 and man["extra"]["model"] == "tiny"
    (off, size) = next((o, s) for k, _, _, o, s, _, _ in _table(data) if k == 1)
    assert json.loads(data[off:off + size]) == man


def test_minimal_plan_without_optional_sections(plan_factory):
    make_plan = plan_factory
    plan = make_plan()
    plan.cubins, plan.ptx, plan.ptx_arch = {}, b"", ""
    back = ef.read_engine(ef.engine_bytes(plan))
    assert back.cubins == {} and back.ptx == b"" and back.host_lib == b""


def test_atomic_write_leaves_no_temp_files(tmp_path, host_lib, plan_factory):
    make_plan = plan_factory
    path = tmp_path / "m.engine"
    ef.write_engine(make_plan(host_lib), path)
    ef.write_engine(make_plan(host_lib), path)  # overwrite in place
    assert os.listdir(tmp_path) == ["m.engine"]
    assert ef.read_engine(path.read_bytes()).inputs[0].name == "x"
    assert path.read_bytes() == ef.engine_bytes(make_plan(host_lib))     # written in chunks, the same image
    bad = make_plan()
    bad.launches[0].args[0] = BufferRef("input", 5)
    with pytest.raises(ValueError, match="launch 0 arg 0"):
        ef.write_engine(bad, path)
    assert os.listdir(tmp_path) == ["m.engine"]


def test_writer_rejects_bad_plans(plan_factory):
    make_plan = plan_factory
    plan = make_plan()
    plan.launches.append(Launch("not-an-identifier", (1, 1, 1), (1, 1, 1), 0, []))
    with pytest.raises(ValueError, match="C identifier"):
        ef.engine_bytes(plan)
    plan = make_plan()
    plan.launches[0].args[2] = BufferRef("arena", offset=10**6)
    with pytest.raises(ValueError, match="out of bounds"):
        ef.engine_bytes(plan)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.__setitem__(slice(0, 8), b"NOTANENG"), "bad magic"),
    (lambda d: struct.pack_into("<I", d, 8, 1), "format version 1 is not supported"),
    (lambda d: struct.pack_into("<I", d, 60, 0), "header checksum"),
    (lambda d: _fix_header(d) if struct.pack_into("<I", d, 36, 0) is None else d, "section count 0"),
    (lambda d: _fix_header(d) if struct.pack_into("<Q", d, 40, 1 << 60) is None else d, "section table"),
    (lambda d: d.__setitem__(-1, d[-1] ^ 1), "checksum mismatch"),
    (lambda d: d.extend(b"\0"), "truncated"),
])
def test_validation_errors(host_lib, plan_factory, edit, message):
    make_plan = plan_factory
    data = bytearray(ef.engine_bytes(make_plan(host_lib)))
    edit(data)
    with pytest.raises(EngineFormatError, match=message):
        ef.read_engine(bytes(data))


def test_bad_section_offset_and_alignment(host_lib, plan_factory):
    make_plan = plan_factory
    data = ef.engine_bytes(make_plan(host_lib))
    toff = struct.unpack_from("<Q", data, 40)[0]
    for field, value, message in [(24, 1 << 40, "outside the file"), (24, 300, "alignment"),
                                  (4, 3, "alignment"), (0, 99, "unknown kind")]:
        d = bytearray(data)
        struct.pack_into("<Q" if field == 24 else "<I", d, toff + 48 + field, value)
        with pytest.raises(EngineFormatError, match=message):
            ef.read_engine(bytes(_fix_header(d)))


def test_truncation_and_random_corruption_raise_only_engine_format_error(host_lib, plan_factory):
    make_plan = plan_factory
    data = ef.engine_bytes(make_plan(host_lib))
    rng = random.Random(1234)
    for n in list(range(0, 700, 7)) + [len(data) - 1]:
        with pytest.raises(EngineFormatError):
            ef.read_engine(data[:n])
    # Edit PLAN words and fix every checksum: the structural checks must hold.
    plan_off, plan_size = next((o, s) for k, _, _, o, s, _, _ in _table(data) if k == 2)
    count, toff = struct.unpack_from("<IQ", data, 36)
    plan_idx = next(i for i, e in enumerate(_table(data)) if e[0] == 2)
    for _ in range(600):
        d = bytearray(data)
        pos = plan_off + 4 * rng.randrange(plan_size // 4)
        struct.pack_into("<I", d, pos, rng.choice([0, 1, 0xFFFFFFFF, 0x80000000, rng.getrandbits(32)]))
        struct.pack_into("<I", d, toff + 48 * plan_idx + 40, zlib.crc32(bytes(d[plan_off:plan_off + plan_size])))
        try:
            ef.read_engine(bytes(_fix_header(d)))
        except EngineFormatError:
            pass


@pytest.mark.parametrize("field, want", [
    (b"0.1.0", (0, 1, 0)), (b"12.3.4rc1+g1a2b", (12, 3, 4)), (b"0.1", None), (b"0.1.00000", None),
    (b"0.1.0 ", None), (b"v0.1.0", None), (b"0.1.0\0x", None), (b"\xd9\xa1.1.0", None),
])
def test_aotc_version_field(field, want):
    assert ef.parse_aotc_version(field.ljust(16, b"\0")[:16]) == want


def test_aotc_version_outside_the_range_is_refused(host_lib, plan_factory):
    data = bytearray(ef.engine_bytes(plan_factory(host_lib)))
    for version, message in [(b"1.0.0", "engine written by aotc 1.0.0; this aotc runs engines from aotc 0.1.0"),
                             (b"0.0.1", "engine written by aotc 0.0.1"),
                             (b"x.y.z", "header aotc version is not")]:
        d = bytearray(data)
        d[16:32] = version.ljust(16, b"\0")
        struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
        with pytest.raises(EngineFormatError, match=message):
            ef.read_engine(bytes(d))


def test_written_engine_is_readable_by_others(tmp_path, plan_factory):
    old = os.umask(0o022)
    try:
        ef.write_engine(plan_factory(), tmp_path / "m.engine")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "m.engine").st_mode & 0o777 == 0o644
