"""The engine container: one versioned file holding everything a runtime needs.

All integers are little-endian. Layout of a version-1 engine file:

  Header (64 bytes, at offset 0)
    0  u8[8]  magic "AOTCENG\\0"
    8  u32    format version (FORMAT_VERSION)
   12  u32    header size (64)
   16  u8[16] aotc version "MAJOR.MINOR.PATCH[A-Za-z0-9.+-]*" (numbers of
              at most 4 digits), NUL-padded; a runtime runs engines from
              MIN_AOTC_VERSION up to the next major after MAX_AOTC_MAJOR
   32  u32    flags (must be 0 in version 1)
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

  PLAN: the binary launch plan the C runtime reads (engine.c mirrors this):
    header, 48 bytes:
      u32 input_count, output_count, dim_count, kernel_count,
          launch_count, arg_count, strtab_size, arena_zeroed
      u64 arena_size, weights_size (== size of the WEIGHTS section)
    arena_zeroed (<= arena_size): the runtime zeroes the arena's last
    arena_zeroed bytes when it creates a context (split-K tile counters,
    which the kernels leave zero again); 0 in engines without split-K.
    tensors, (input_count + output_count) x 16 bytes, inputs first:
      u32 name_off, name_len (into strtab; strtab[name_off + name_len] == 0)
      u8 dtype (plan.DTYPE_CODES), u8 rank (<= 8), u16 reserved(0)
      u32 dims_start (rank entries of the dims pool)
    dims pool, dim_count x u64
    kernels, kernel_count x 8 bytes: u32 name_off, name_len ([A-Za-z0-9_]+)
    launches, launch_count x 40 bytes:
      u32 kernel_index, grid[3], block[3], smem, arg_start, arg_count
    args, arg_count x 16 bytes: u32 kind (plan.REF_*), u32 index, u64 offset
    strtab, strtab_size bytes of NUL-terminated names
  The section size equals exactly the sum of these parts.
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
from aotc.package.plan import (DTYPE_CODES, DTYPE_SIZES, REF_KINDS, BufferRef, EnginePlan,
                               Launch, TensorSpec)

MAGIC = b"AOTCENG\0"
FORMAT_VERSION = 1
MIN_AOTC_VERSION = (0, 1, 0)     # aotc_runtime.h: AOTC_ENGINE_MIN_AOTC_VERSION
MAX_AOTC_MAJOR = 0               # aotc_runtime.h: AOTC_ENGINE_MAX_AOTC_MAJOR
_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)[A-Za-z0-9.+\-]*\Z", re.ASCII)
ALIGN = 256
MAX_RANK = 8
MAX_SECTIONS = 64
SEC_MANIFEST, SEC_PLAN, SEC_WEIGHTS, SEC_CUBIN, SEC_PTX, SEC_HOST_LIB = 1, 2, 3, 4, 5, 6
SECTION_NAMES = {1: "MANIFEST", 2: "PLAN", 3: "WEIGHTS", 4: "CUBIN", 5: "PTX", 6: "HOST_LIB"}

_HEADER = struct.Struct("<8sII16sIIQQII")          # 64 bytes
_SECTION = struct.Struct("<II16sQQII")             # 48 bytes
_PLAN_HDR = struct.Struct("<8I2Q")                 # 48 bytes
_TENSOR = struct.Struct("<IIBBHI")                 # 16 bytes
_KERNEL = struct.Struct("<II")                     # 8 bytes
_LAUNCH = struct.Struct("<10I")                    # 40 bytes
_ARG = struct.Struct("<IIQ")                       # 16 bytes
_DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
_REF_NAMES = {v: k for k, v in REF_KINDS.items()}
_IDENT = re.compile(r"[A-Za-z0-9_]+\Z")
_U32 = 0xFFFFFFFF


def _fail(msg: str):
    raise EngineFormatError(f"corrupt engine: {msg}")


def _pad_tag(tag: str, what: str) -> bytes:
    raw = tag.encode()
    if len(raw) > 15:
        raise ValueError(f"{what} tag {tag!r} longer than 15 bytes")
    return raw.ljust(16, b"\0")


# ----------------------------------------------------------------- writer --

def _plan_bytes(plan: EnginePlan) -> bytes:
    strtab = bytearray()
    names: dict[str, int] = {}

    def intern(name: str) -> tuple[int, int]:
        if name not in names:
            names[name] = len(strtab)
            strtab.extend(name.encode() + b"\0")
        return names[name], len(name.encode())

    tensors, dims = [], []
    for t in list(plan.inputs) + list(plan.outputs):
        if t.dtype not in DTYPE_CODES:
            raise ValueError(f"tensor {t.name!r}: unknown dtype {t.dtype!r}")
        if len(t.shape) > MAX_RANK or any(d < 0 for d in t.shape):
            raise ValueError(f"tensor {t.name!r}: bad shape {t.shape}")
        off, ln = intern(t.name)
        tensors.append(_TENSOR.pack(off, ln, DTYPE_CODES[t.dtype], len(t.shape), 0, len(dims)))
        dims.extend(t.shape)
    kernels = plan.kernels
    kidx = {k: i for i, k in enumerate(kernels)}
    kern_rows = []
    for k in kernels:
        if not _IDENT.match(k):
            raise ValueError(f"kernel name {k!r} is not a C identifier")
        kern_rows.append(_KERNEL.pack(*intern(k)))
    launches, args = [], []
    for ln in plan.launches:
        start = len(args)
        for a in ln.args:
            kind = REF_KINDS[a.kind]
            args.append(_ARG.pack(kind, a.index if kind in (0, 1) else 0, a.offset))
        launches.append(_LAUNCH.pack(kidx[ln.kernel], *ln.grid, *ln.block, ln.smem,
                                     start, len(ln.args)))
    head = _PLAN_HDR.pack(len(plan.inputs), len(plan.outputs), len(dims), len(kernels),
                          len(launches), len(args), len(strtab), plan.arena_zeroed,
                          plan.arena_size, len(plan.weights))
    out = b"".join([head, *tensors, struct.pack(f"<{len(dims)}Q", *dims), *kern_rows,
                    *launches, *args, bytes(strtab)])
    try:  # the writer never produces what the reader rejects
        _parse_plan(out, len(plan.weights))
    except EngineFormatError as e:
        raise ValueError(f"invalid engine plan: {str(e).removeprefix('corrupt engine: ')}") from None
    return out


def _manifest(plan: EnginePlan) -> dict:
    def spec(t: TensorSpec) -> dict:
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes}
    launches = [{"kernel": ln.kernel, "grid": list(ln.grid), "block": list(ln.block),
                 "smem": ln.smem, "bytes": ln.bytes, "flops": ln.flops, "region": ln.region,
                 "args": [{"kind": a.kind, "index": a.index, "offset": a.offset} for a in ln.args]}
                for ln in plan.launches]
    return {
        "format": "aotc-engine", "format_version": FORMAT_VERSION, "aotc_version": __version__,
        "inputs": [spec(t) for t in plan.inputs], "outputs": [spec(t) for t in plan.outputs],
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
                (SEC_PLAN, "", _plan_bytes(plan)), (SEC_WEIGHTS, "", memoryview(plan.weights))]
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


def _parse_plan(p: bytes, weights_size: int):
    if len(p) < _PLAN_HDR.size:
        _fail(f"PLAN section is {len(p)} bytes, shorter than its header")
    ni, no, nd, nk, nl, na, ns, zeroed, arena, wsize = _PLAN_HDR.unpack_from(p)
    want = (_PLAN_HDR.size + _TENSOR.size * (ni + no) + 8 * nd + _KERNEL.size * nk
            + _LAUNCH.size * nl + _ARG.size * na + ns)
    if want != len(p):
        _fail(f"PLAN section is {len(p)} bytes, its counts need {want}")
    if zeroed > arena:
        _fail(f"PLAN zeroed arena tail {zeroed} exceeds the arena size {arena}")
    if wsize != weights_size:
        _fail(f"PLAN weights size {wsize} != WEIGHTS section size {weights_size}")
    pos = _PLAN_HDR.size + _TENSOR.size * (ni + no)
    dims = struct.unpack_from(f"<{nd}Q", p, pos)
    pos += 8 * nd
    kpos, lpos = pos, pos + _KERNEL.size * nk
    apos = lpos + _LAUNCH.size * nl
    strtab = p[apos + _ARG.size * na:]

    def string(off: int, ln: int, what: str) -> str:
        if off + ln >= ns or strtab[off + ln] != 0 or b"\0" in strtab[off:off + ln]:
            _fail(f"{what} name [{off}, +{ln}) outside the string table")
        return strtab[off:off + ln].decode("utf-8", "replace")

    tensors = []
    for i in range(ni + no):
        off, ln, dt, rank, r2, ds = _TENSOR.unpack_from(p, _PLAN_HDR.size + i * _TENSOR.size)
        what = f"input {i}" if i < ni else f"output {i - ni}"
        if dt not in _DTYPE_NAMES or rank > MAX_RANK or ds + rank > nd or r2:
            _fail(f"{what}: dtype {dt}, rank {rank} or dims [{ds}, +{rank}) invalid")
        spec = TensorSpec(string(off, ln, what), _DTYPE_NAMES[dt], tuple(dims[ds:ds + rank]))
        n = DTYPE_SIZES[spec.dtype]
        for d in spec.shape:  # same partial-product rule as engine.c
            if d and n > ((1 << 62) - 1) // d:
                _fail(f"{what} '{spec.name}' byte size overflows")
            n *= d
        tensors.append(spec)
    ins, outs = tensors[:ni], tensors[ni:]
    for group, what in ((ins, "input"), (outs, "output")):
        if len({t.name for t in group}) != len(group):
            _fail(f"duplicate {what} names")
    kernels = []
    for i in range(nk):
        name = string(*_KERNEL.unpack_from(p, kpos + i * _KERNEL.size), f"kernel {i}")
        if not _IDENT.match(name):
            _fail(f"kernel {i} name {name!r} is not a C identifier")
        kernels.append(name)
    sizes = {"input": [t.nbytes for t in ins], "output": [t.nbytes for t in outs]}
    launches = []
    for i in range(nl):
        k, g0, g1, g2, b0, b1, b2, smem, a0, ac = _LAUNCH.unpack_from(p, lpos + i * _LAUNCH.size)
        if k >= nk or a0 + ac > na or 0 in (g0, g1, g2, b0, b1, b2):
            _fail(f"launch {i}: kernel {k}, args [{a0}, +{ac}) or zero grid/block invalid")
        args = []
        for j in range(a0, a0 + ac):
            kind, idx, off = _ARG.unpack_from(p, apos + j * _ARG.size)
            name = _REF_NAMES.get(kind)
            if name in sizes:
                ok = idx < len(sizes[name]) and (off == 0 or off < sizes[name][idx])
            else:
                ok = name is not None and idx == 0 and (off == 0 or off < (arena if kind == 2 else wsize))
            if not ok:
                _fail(f"launch {i} arg {j - a0}: kind {kind} index {idx} offset {off} out of bounds")
            args.append(BufferRef(name, idx, off))
        launches.append(Launch(kernels[k], (g0, g1, g2), (b0, b1, b2), smem, args))
    return ins, outs, (arena, zeroed), launches


def read_engine(data: bytes) -> EnginePlan:
    """Parse and validate an engine image; EngineFormatError names what is wrong."""
    secs = _sections(data)
    weights = _section(secs, SEC_WEIGHTS)[1]
    ins, outs, (arena, zeroed), launches = _parse_plan(_section(secs, SEC_PLAN)[1], len(weights))
    try:
        man = json.loads(_section(secs, SEC_MANIFEST)[1])
        mls = man.get("launches", [])
        if len(mls) == len(launches):
            for ln, m in zip(launches, mls):
                ln.bytes, ln.flops, ln.region = int(m.get("bytes", 0)), int(m.get("flops", 0)), str(m.get("region", ""))
        extra = man.get("extra", {})
    except (ValueError, UnicodeDecodeError, AttributeError, TypeError) as e:
        _fail(f"MANIFEST is not valid ({e})")
    ptx = _section(secs, SEC_PTX)
    host = _section(secs, SEC_HOST_LIB)
    return EnginePlan(inputs=ins, outputs=outs, arena_size=arena, arena_zeroed=zeroed, weights=weights,
                      launches=launches, cubins={t: d for k, t, d in secs if k == SEC_CUBIN},
                      ptx=ptx[1] if ptx else b"", ptx_arch=ptx[0] if ptx else "",
                      host_lib=host[1] if host else b"", manifest=extra if isinstance(extra, dict) else {})
