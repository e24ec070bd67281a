"""Corrupt an engine in every region of the file and expect every reader to refuse it.

The regions: each header field, each field of each section-table entry, each
section's payload, the zero padding between the table and the sections, the
bytes after the last section, and truncation at many points. The readers: the
C runtime through the Python binding (engine.c), `aotc run` (the runtime
again, as a user meets it), `aotc inspect` and the Python reader
(engine_format.py). Each must refuse cleanly: an EngineFormatError, or one
`aotc: error:` line and exit status 1; never a crash or a traceback.
"""
from __future__ import annotations

import struct
import zlib

import pytest
from click.testing import CliRunner

from aotc.errors import EngineFormatError
from aotc.package import engine_format as ef
from aotc.package import runtime_binding as rb
from aotc.cli.main import main
from tests.fuzz.boundaries import padding_spans, section_boundaries, slack_corruptions

HEADER_FIELDS = {      # offset, struct format, values that no valid engine has there
    "magic": (0, "8s", [b"AOTCENG\1", b"\0" * 8]),
    "format_version": (8, "I", [0, ef.FORMAT_VERSION - 1, ef.FORMAT_VERSION + 1, 0xFFFFFFFF]),
    "header_size": (12, "I", [0, 63, 65, 128]),
    "aotc_version": (16, "16s", [b"", b"x.y.z", b"0.1.0\0\1", b"0.1.0" + b"a" * 11, b"9.0.0"]),
    "flags": (32, "I", [1, 0x80000000]),
    "section_count": (36, "I", [0, 65, "-1", "+1"]),
    "table_offset": (40, "Q", [0, 63, 65, 128, 1 << 60]),
    "file_size": (48, "Q", ["-1", "+1", 0]),
    "table_crc": (56, "I", ["^1"]),
}
ENTRY_FIELDS = {       # offset in a 48-byte table entry, format, bad values
    "kind": (0, "I", [0, 7, 0xFFFFFFFF]),
    "alignment": (4, "I", [0, 1, 128, 255, 257, 0x80000000]),
    "tag": (8, "16s", ["other", b"\xff" * 16, b"sm_80\0x"]),
    "offset": (24, "Q", ["+1", "+256", "-256", 0, 1 << 40]),
    "size": (32, "Q", ["+1", "-1", 1 << 40]),
    "crc": (40, "I", ["^1"]),
    "reserved": (44, "I", [1]),
}


def _edit(old, value):
    """A field's new value: literal, or "+n" / "-n" / "^n" relative to the old one."""
    if not isinstance(value, str):
        return value
    n = int(value[1:])
    return {"+": old + n, "-": old - n, "^": old ^ n}[value[0]] & ((1 << 64) - 1)


def _fix_crcs(d: bytearray) -> bytes:
    """Recompute the table CRC (when the table is in the file) and the header CRC."""
    count, toff = struct.unpack_from("<IQ", d, 36)
    if count <= 64 and toff + 48 * count <= len(d):
        struct.pack_into("<I", d, 56, zlib.crc32(bytes(d[toff:toff + 48 * count])))
    struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
    return bytes(d)


def _set(data: bytes, pos: int, fmt: str, value) -> bytearray:
    d = bytearray(data)
    if fmt != "16s" and fmt != "8s":
        old = struct.unpack_from("<" + fmt, d, pos)[0]
        value = _edit(old, value) & ((1 << (8 * struct.calcsize(fmt))) - 1)
    struct.pack_into("<" + fmt, d, pos, value)
    return d


def corruptions(data: bytes) -> dict[str, bytes]:
    """name -> a corrupt copy of `data`, one per region and kind of damage."""
    out: dict[str, bytes] = {}
    for name, (pos, fmt, values) in HEADER_FIELDS.items():
        for v in values:
            d = _set(data, pos, fmt, v)
            # the table CRC is the field under test there: only the header CRC is fixed
            out[f"header.{name}={v!r}"] = _fix_crcs(d) if name != "table_crc" else _header_crc(d)
    out["header.header_crc^1"] = bytes(_set(data, 60, "I", "^1"))
    count, toff = struct.unpack_from("<IQ", data, 36)
    for i in range(count):
        kind = struct.unpack_from("<I", data, toff + 48 * i)[0]
        for name, (pos, fmt, values) in ENTRY_FIELDS.items():
            for v in values:
                if v == "other":       # a tag that belongs to another kind of section
                    v = b"" if kind == ef.SEC_CUBIN else b"sm_80"
                d = _set(data, toff + 48 * i + pos, fmt, v)
                out[f"table[{i}].{name}={v!r}"] = _fix_crcs(d)
        off, size = struct.unpack_from("<QQ", data, toff + 48 * i + 24)
        for where in sorted({off, off + size // 2, off + size - 1}):
            d = bytearray(data)
            d[where] ^= 0x5A
            out[f"section[{i}] {ef.SECTION_NAMES[kind]} byte {where}"] = bytes(d)
    out.update(slack_corruptions(data))
    for n in sorted(set(section_boundaries(data)) | set(range(0, len(data), 97))):
        out[f"truncated to {n}"] = data[:n]
    return out


def _header_crc(d: bytearray) -> bytes:
    struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
    return bytes(d)


@pytest.fixture(scope="module")
def cases(engine_file) -> dict[str, bytes]:
    data = engine_file.read_bytes()
    assert len(padding_spans(data)) >= 5       # padding after the table and between sections
    out = corruptions(data)
    assert len(out) > 250
    return out


def test_the_uncorrupted_engine_loads(engine_file):
    data = engine_file.read_bytes()
    ef.read_engine(data)
    assert rb.Engine(data).inputs[0].name == "x"


def test_python_reader_refuses_every_corruption(cases):
    accepted = []
    for name, bad in cases.items():
        try:
            ef.read_engine(bad)
            accepted.append(name)
        except EngineFormatError:
            pass
    assert not accepted, f"engine_format.read_engine accepted {len(accepted)} corrupt engine(s): {accepted}"


def test_c_runtime_refuses_every_corruption(cases):
    accepted = []
    for name, bad in cases.items():
        try:
            rb.Engine(bad)
            accepted.append(name)
        except EngineFormatError as e:
            assert e.code in ("DATA_LOSS", "UNIMPLEMENTED") and str(e), (name, e)
    assert not accepted, f"the C runtime loaded {len(accepted)} corrupt engine(s): {accepted}"


def test_padding_and_tail_are_refused_even_without_checksums(cases):
    """The padding check is structural: it holds with verify_checksums off."""
    import ctypes
    lib = rb._load()

    class Options(ctypes.Structure):
        _fields_ = [("verify_checksums", ctypes.c_int), ("cuda_device_ordinal", ctypes.c_int)]

    opts = Options()
    lib.aotc_engine_options_initialize(ctypes.byref(opts))
    opts.verify_checksums = 0
    slack = [n for n in cases if n.startswith(("padding_", "tail_"))]
    assert len(slack) > 20
    for name in slack:
        out = ctypes.c_void_p()
        st = lib.aotc_engine_load_from_memory(cases[name], len(cases[name]), ctypes.byref(opts),
                                              ctypes.byref(out))
        assert st and not out.value, name
        message = lib.aotc_status_message(st).decode()
        lib.aotc_status_free(st)
        assert ("padding byte" in message or "trailing" in message or "file has" in message), (name, message)


def test_padding_error_names_the_byte(engine_file):
    data = bytearray(engine_file.read_bytes())
    start, end = padding_spans(bytes(data))[0]
    data[start:end] = b"\xff" * (end - start)      # 0xff written right after the section table
    for read in (ef.read_engine, rb.Engine):
        with pytest.raises(EngineFormatError, match=f"padding byte at {start} before section 0 "
                                                    r"\(MANIFEST\) is 0xff, not zero"):
            read(bytes(data))


def test_trailing_bytes_are_named(engine_file):
    data = engine_file.read_bytes()
    bad = slack_corruptions(data)["tail_256_00"]
    for read in (ef.read_engine, rb.Engine):
        with pytest.raises(EngineFormatError, match=f"256 trailing byte\\(s\\) after the last section "
                                                    f"\\(it ends at {len(data)}\\)"):
            read(bad)


@pytest.mark.parametrize("command", ["run", "inspect"])
def test_cli_refuses_every_corruption_in_one_line(cases, command, tmp_path):
    runner = CliRunner()
    path = tmp_path / "bad.engine"
    for name, bad in cases.items():
        path.write_bytes(bad)
        res = runner.invoke(main, [command, str(path)])
        lines = res.stderr.splitlines()
        assert res.exit_code == 1 and len(lines) == 1, (name, res.output)
        assert lines[0].startswith("aotc: error: ") and "internal error" not in lines[0], (name, lines)
        assert res.stdout == "", (name, res.stdout)
