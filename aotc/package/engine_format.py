"""The engine container: one versioned file holding everything a runtime needs.

All integers are little-endian. Layout of a version-2 engine file (version 2 added
the shape program of dynamic engines to the PLAN section):

  Header (64 bytes, at offset 0)
    0  u8[8]  magic "AOTCENG\\0"
    8  u32    format version (FORMAT_VERSION)
   12  u32    header size (64)
   16  u8[16] aotc version "MAJOR.MINOR.PATCH[A-Za-z0-9.+-]*" (numbers of
              at most 4 digits), NUL-padded; a runtime runs engines from
              MIN_AOTC_VERSION up to the next major after MAX_AOTC_MAJOR
   32  u32    flags (must be 0)
   36  u32    section count (1..64)
   40  u64    section-table offset (64: right after the header)
   48  u64    file size (must equal the byte count of the file)
   56  u32    CRC32 of the section table
   60  u32    CRC32 of header bytes [0, 60)

  Section table (section count x 48 bytes)
    0  u32    kind: 1 MANIFEST, 2 PLAN, 3 WEIGHTS, 4 CUBIN, 5 PTX, 6 HOST_LIB
    4  u32    alignment (a power of two >= 256; offset is a multiple of it)
    8  u8[16] tag, NUL-padded ("sm_80" for CUBIN, "compute_90" for PTX, else "")
   24  u64    offset of the section in the file
   32  u64    size in bytes
   40  u32    CRC32 of the section bytes
   44  u32    reserved (0)

  Sections follow in table order, each at the first offset that is a
  multiple of its alignment after the end of the table or of the section
  before it; the padding between them is zero bytes, and the file ends where
  the last section ends. So every byte is checked: the header and the table
  by their CRCs and fields, the sections by theirs, the padding by being
  zero. MANIFEST, PLAN and WEIGHTS are required once; PTX and HOST_LIB at
  most once; CUBIN once per arch tag.

  MANIFEST: UTF-8 JSON for people and tools (`aotc inspect`, read_manifest);
  the runtime does not read it. `plan.manifest` extras go under "extra".

  PLAN: the binary launch plan and shape program the C runtime reads;
  its layout is in plan_section.py (engine.c mirrors it).
"""
from __future__ import annotations

import json
import os
import re
import struct
import tempfile
import zlib

from aotc import __version__
from aotc.errors import EngineFormatError
from aotc.package.plan import EnginePlan, Reg, TensorSpec
from aotc.package.plan_section import parse_plan, plan_bytes

MAGIC = b"AOTCENG\0"
FORMAT_VERSION = 2
MIN_AOTC_VERSION = (0, 1, 0)     # aotc_runtime.h: AOTC_ENGINE_MIN_AOTC_VERSION
MAX_AOTC_MAJOR = 0               # aotc_runtime.h: AOTC_ENGINE_MAX_AOTC_MAJOR
_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)[A-Za-z0-9.+\-]*\Z", re.ASCII)
ALIGN = 256
MAX_SECTIONS = 64
SEC_MANIFEST, SEC_PLAN, SEC_WEIGHTS, SEC_CUBIN, SEC_PTX, SEC_HOST_LIB = 1, 2, 3, 4, 5, 6
SECTION_NAMES = {1: "MANIFEST", 2: "PLAN", 3: "WEIGHTS", 4: "CUBIN", 5: "PTX", 6: "HOST_LIB"}

_HEADER = struct.Struct("<8sII16sIIQQII")          # 64 bytes
_SECTION = struct.Struct("<II16sQQII")             # 48 bytes


def _fail(msg: str):
    raise EngineFormatError(f"corrupt engine: {msg}")


def _pad_tag(tag: str, what: str) -> bytes:
    raw = tag.encode()
    if len(raw) > 15:
        raise ValueError(f"{what} tag {tag!r} longer than 15 bytes")
    return raw.ljust(16, b"\0")


# ----------------------------------------------------------------- writer --

def _symbolic_shape(plan: EnginePlan, t: TensorSpec) -> list:
    """A tensor's shape for people: ints, and each dynamic dim as the compiler spelled it
    (plan.manifest["shapes"], e.g. "batch*128"), or an input's dim name, else None."""
    given = plan.manifest.get("shapes", {}).get(t.name) if isinstance(plan.manifest.get("shapes"), dict) else None
    if isinstance(given, (list, tuple)) and len(given) == len(t.shape):   # "128" (a repr) is the int 128
        return [d if isinstance(d, int) else int(d) if str(d).isdigit() else str(d) for d in given]
    return [d if not isinstance(d, Reg) else plan.dims[d.index].name if d.index < len(plan.dims) else None
            for d in t.shape]


def _grid_json(grid) -> list:
    return [f"r{g.index}" if isinstance(g, Reg) else g for g in grid]


def _manifest(plan: EnginePlan) -> dict:
    def spec(t: TensorSpec) -> dict:
        out = {"name": t.name, "dtype": t.dtype, "shape": _symbolic_shape(plan, t), "bytes": t.nbytes}
        if not t.is_static:
            out["max_shape"] = list(t.static_shape)
        return out
    launches = [{"kernel": ln.kernel, "grid": _grid_json(ln.grid), "block": list(ln.block),
                 "smem": ln.smem, "bytes": ln.bytes, "flops": ln.flops, "region": ln.region,
                 "variant": ln.variant, "when": None if ln.when is None else f"r{ln.when.index}",
                 "args": [{"kind": a.kind, "index": a.index, "offset": a.offset} for a in ln.args]}
                for ln in plan.launches]
    return {
        "format": "aotc-engine", "format_version": FORMAT_VERSION, "aotc_version": __version__,
        "inputs": [spec(t) for t in plan.inputs], "outputs": [spec(t) for t in plan.outputs],
        "dims": [{"name": d.name, "min": d.min, "max": d.max, "divisor": d.divisor} for d in plan.dims],
        "checks": [msg for _, msg in plan.checks], "shape_program_ops": len(plan.program),
        "arena_size": plan.arena_size, "arena_zeroed": plan.arena_zeroed, "weights_size": len(plan.weights),
        "kernels": plan.kernels, "launches": launches,
        "totals": {"launches": len(plan.launches), "bytes": sum(ln.bytes for ln in plan.launches),
                   "flops": sum(ln.flops for ln in plan.launches)},
        "archs": sorted(plan.cubins), "ptx_arch": plan.ptx_arch if plan.ptx else "",
        "host_lib": bool(plan.host_lib), "extra": plan.manifest,
    }


def _engine_parts(plan: EnginePlan) -> list:
    """The engine image as a list of byte chunks (header, table, padding and sections in order).

    Kept in pieces so a 440 MB weights section is never copied: write_engine writes the
    chunks as they are, engine_bytes joins them once.
    """
    sections = [(SEC_MANIFEST, "", json.dumps(_manifest(plan), indent=1).encode()),
                (SEC_PLAN, "", plan_bytes(plan)), (SEC_WEIGHTS, "", memoryview(plan.weights))]
    for arch in sorted(plan.cubins):
        if not re.match(r"sm_\d+[a-z]?\Z", arch):
            raise ValueError(f"cubin arch {arch!r} is not like 'sm_80'")
        sections.append((SEC_CUBIN, arch, bytes(plan.cubins[arch])))
    if plan.ptx:
        sections.append((SEC_PTX, plan.ptx_arch, bytes(plan.ptx)))
    if plan.host_lib:
        sections.append((SEC_HOST_LIB, "", bytes(plan.host_lib)))
    table_off = _HEADER.size
    pos = table_off + _SECTION.size * len(sections)
    table, body = [], []
    for kind, tag, data in sections:
        start = -(-pos // ALIGN) * ALIGN
        table.append(_SECTION.pack(kind, ALIGN, _pad_tag(tag, SECTION_NAMES[kind]), start,
                                   len(data), zlib.crc32(data), 0))
        body += [b"\0" * (start - pos), data]
        pos = start + len(data)
    table_b = b"".join(table)
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, _HEADER.size, _pad_tag(__version__, "version"),
                        0, len(sections), table_off, pos, zlib.crc32(table_b), 0)
    head = head[:60] + struct.pack("<I", zlib.crc32(head[:60]))
    return [head, table_b, *body]


def engine_bytes(plan: EnginePlan) -> bytes:
    """Serialize a plan into one engine file image."""
    return b"".join(_engine_parts(plan))


def write_engine(plan: EnginePlan, path: str | os.PathLike) -> None:
    """Write atomically: a temp file in the same directory, fsync, os.replace."""
    parts = _engine_parts(plan)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".aotc-engine-", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)    # mkstemp's 0600 would hide the engine from other users
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ----------------------------------------------------------------- reader --

def parse_aotc_version(field: bytes) -> tuple[int, int, int] | None:
    """The (major, minor, patch) of a header's 16-byte version field, or None if malformed."""
    text = field.split(b"\0", 1)[0]
    if len(field) != 16 or field[15] != 0 or field[len(text):].strip(b"\0"):
        return None
    m = _VERSION_RE.match(text.decode("latin-1"))
    if not m or any(len(g) > 4 for g in m.groups()):
        return None
    return tuple(int(g) for g in m.groups())


def _check_aotc_version(field: bytes) -> None:
    got = parse_aotc_version(field)
    if got is None:
        _fail("header aotc version is not a NUL-padded 'MAJOR.MINOR.PATCH'")
    if got < MIN_AOTC_VERSION or got[0] > MAX_AOTC_MAJOR:
        version = field.rstrip(b"\0").decode()
        raise EngineFormatError(
            f"engine written by aotc {version}; this aotc runs engines from aotc "
            f"{'.'.join(map(str, MIN_AOTC_VERSION))} up to {MAX_AOTC_MAJOR}.x")


def _sections(data: bytes) -> list[tuple[int, str, bytes]]:
    data = bytes(data)
    if len(data) < _HEADER.size:
        _fail(f"file is {len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, ver, hsize, _v, flags, count, toff, fsize, tcrc, hcrc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        _fail(f"bad magic {magic!r} (not an aotc engine)")
    if ver != FORMAT_VERSION:
        raise EngineFormatError(f"engine format version {ver} is not supported "
                                f"(this aotc reads version {FORMAT_VERSION})")
    if hcrc != zlib.crc32(data[:60]):
        _fail("header checksum mismatch")
    _check_aotc_version(_v)
    if hsize != _HEADER.size or flags != 0:
        _fail(f"header size {hsize} / flags {flags:#x} invalid for version {ver}")
    if fsize != len(data):
        _fail(f"header says {fsize} bytes but the file has {len(data)} (truncated?)")
    if not 1 <= count <= MAX_SECTIONS:
        _fail(f"section count {count} outside 1..{MAX_SECTIONS}")
    tend = toff + count * _SECTION.size
    if toff != _HEADER.size or tend > len(data):
        _fail(f"section table [{toff}, {tend}) is not right after the header inside the file")
    if zlib.crc32(data[toff:tend]) != tcrc:
        _fail("section table checksum mismatch")
    out, spans, end = [], [], tend
    for i in range(count):
        kind, align, tag, off, size, crc, rsv = _SECTION.unpack_from(data, toff + i * _SECTION.size)
        name = SECTION_NAMES.get(kind)
        if name is None:
            _fail(f"section {i} has unknown kind {kind}")
        if align < ALIGN or align & (align - 1) or off % align or rsv:
            _fail(f"section {i} ({name}) offset {off} / alignment {align} invalid")
        if off < tend or off + size > len(data):
            _fail(f"section {i} ({name}) [{off}, {off + size}) outside the file")
        if tag[-1] != 0 or b"\0" in tag.rstrip(b"\0"):
            _fail(f"section {i} ({name}) tag is not a NUL-padded string")
        _check_padding(data, i, name, end, off, align)
        end = off + size
        if zlib.crc32(data[off:off + size]) != crc:
            _fail(f"section {i} ({name}) checksum mismatch")
        spans.append((off, off + size))
        out.append((kind, tag.rstrip(b"\0").decode("ascii", "replace"), data[off:off + size]))
    if end != len(data):
        _fail(f"{len(data) - end} trailing byte(s) after the last section (it ends at {end})")
    spans.sort()
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
        _fail("sections overlap")
    for kind in (SEC_MANIFEST, SEC_PLAN, SEC_WEIGHTS, SEC_PTX, SEC_HOST_LIB):
        n = sum(1 for k, _, _ in out if k == kind)
        if n > 1 or (n == 0 and kind <= SEC_WEIGHTS):
            _fail(f"{n} {SECTION_NAMES[kind]} sections")
    tags = [t for k, t, _ in out if k == SEC_CUBIN]
    if len(set(tags)) != len(tags):
        _fail(f"duplicate CUBIN arch tags {tags}")
    for i, (k, t, _) in enumerate(out):
        pat = {SEC_CUBIN: r"sm_\d+[a-z]?\Z", SEC_PTX: r"(compute_\d+[a-z]?)?\Z"}.get(k, r"\Z")
        if not re.match(pat, t):
            _fail(f"section {i} ({SECTION_NAMES[k]}) has bad tag {t!r}")
    return out


def _check_padding(data: bytes, i: int, name: str, end: int, off: int, align: int) -> None:
    """Section i must start at the first `align`-aligned offset after `end` (the end of
    the table or of section i-1), and the padding in between must be zero: no byte of
    an engine escapes a check."""
    want = -(-end // align) * align
    if off != want:
        _fail(f"section {i} ({name}) starts at {off}, expected {want} "
              f"(the first {align}-aligned offset after {end})")
    pad = data[end:off]
    if pad.count(0) != len(pad):
        bad = end + next(k for k, b in enumerate(pad) if b)
        _fail(f"padding byte at {bad} before section {i} ({name}) is {data[bad]:#04x}, not zero")


def _section(secs, kind) -> tuple[str, bytes] | None:
    return next(((t, d) for k, t, d in secs if k == kind), None)


def read_manifest(data: bytes) -> dict:
    """The MANIFEST section as a dict (the file is fully validated first)."""
    try:
        return json.loads(_section(_sections(data), SEC_MANIFEST)[1])
    except (ValueError, UnicodeDecodeError) as e:
        _fail(f"MANIFEST is not valid JSON ({e})")


def read_engine(data: bytes) -> EnginePlan:
    """Parse and validate an engine image; EngineFormatError names what is wrong."""
    secs = _sections(data)
    weights = _section(secs, SEC_WEIGHTS)[1]
    fields = parse_plan(_section(secs, SEC_PLAN)[1], len(weights))
    launches = fields["launches"]
    try:
        man = json.loads(_section(secs, SEC_MANIFEST)[1])
        mls = man.get("launches", [])
        if len(mls) == len(launches):
            for ln, m in zip(launches, mls):
                ln.bytes, ln.flops, ln.region = int(m.get("bytes", 0)), int(m.get("flops", 0)), str(m.get("region", ""))
                ln.variant = str(m.get("variant", ""))
        extra = man.get("extra", {})
    except (ValueError, UnicodeDecodeError, AttributeError, TypeError) as e:
        _fail(f"MANIFEST is not valid ({e})")
    ptx = _section(secs, SEC_PTX)
    host = _section(secs, SEC_HOST_LIB)
    return EnginePlan(**fields, weights=weights, cubins={t: d for k, t, d in secs if k == SEC_CUBIN},
                      ptx=ptx[1] if ptx else b"", ptx_arch=ptx[0] if ptx else "",
                      host_lib=host[1] if host else b"", manifest=extra if isinstance(extra, dict) else {})
