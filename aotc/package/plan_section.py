"""The PLAN section of an engine: the binary launch plan and shape program the C runtime reads.

engine_format.py owns the container (header, section table, checksums); this
module owns the bytes of one section, and `runtime/engine.c` mirrors it field
by field. All integers are little-endian. Layout (format version 2):

  header, 64 bytes:
    u32 input_count, output_count, pool_count, kernel_count, launch_count,
        arg_count, strtab_size, arena_zeroed, dim_count, op_count,
        check_count, reserved (0)
    u64 arena_size, weights_size (== size of the WEIGHTS section)
  arena_zeroed (<= arena_size): the runtime zeroes the arena's last
  arena_zeroed bytes when it creates a context (split-K tile counters).
  tensors, (input_count + output_count) x 16 bytes, inputs first:
    u32 name_off, name_len (into strtab; strtab[name_off + name_len] == 0)
    u8 dtype (plan.DTYPE_CODES), u8 rank (<= 8), u16 reserved (0)
    u32 pool_start: 2 x rank pool entries, the shape then the max shape
  pool, pool_count x u64: a value below 2^63, or REG_FLAG | register (a
    dynamic dim of a shape; an input's names a dim register < dim_count).
    A max-shape entry is always a value; a static dim's equals the dim.
  dims, dim_count x 24 bytes: u32 name_off, name_len, min, max, divisor,
    reserved (0); 0 <= min <= max < 2^31, divisor >= 1. Registers
    0..dim_count-1 hold the dims' values.
  ops, op_count x 24 bytes: u32 opcode (plan.SHAPE_OPS), a, b, reserved (0),
    i64 imm. Op k writes register dim_count + k from registers a, b < that
    (a = b = 0 for "const", whose value is imm; imm = 0 for the others).
  checks, check_count x 16 bytes: u32 register, msg_off, msg_len, reserved (0);
    the message is UTF-8 without control characters.
  kernels, kernel_count x 8 bytes: u32 name_off, name_len ([A-Za-z0-9_]+)
  launches, launch_count x 48 bytes:
    u32 kernel_index, grid[3], block[3], smem, arg_start, arg_count,
        when (NO_REG, or the register that must be nonzero for the launch to
        run), grid_regs (bit k set: grid[k] is a register, else a nonzero value)
  args, arg_count x 16 bytes: u32 kind (plan.REF_*), u32 index, u64 offset;
    kind "dim" passes register `index` by value (offset 0).
  strtab, strtab_size bytes of NUL-terminated names and messages.
The section size equals exactly the sum of these parts.
"""
from __future__ import annotations

import re
import struct

from aotc.errors import EngineFormatError
from aotc.package.plan import (DTYPE_CODES, DTYPE_SIZES, REF_DIM, REF_KINDS, SHAPE_OPS, BufferRef,
                               DimSpec, EnginePlan, Launch, Reg, ShapeOp, TensorSpec)

MAX_RANK = 8
REG_FLAG = 1 << 63
NO_REG = 0xFFFFFFFF
DIM_LIMIT = 1 << 31                                # dims lie in [0, 2^31)
_HDR = struct.Struct("<12I2Q")                    # 64 bytes
_TENSOR = struct.Struct("<IIBBHI")                # 16 bytes
_DIM = struct.Struct("<6I")                       # 24 bytes
_OP = struct.Struct("<4Iq")                       # 24 bytes
_CHECK = struct.Struct("<4I")                     # 16 bytes
_KERNEL = struct.Struct("<II")                    # 8 bytes
_LAUNCH = struct.Struct("<12I")                   # 48 bytes
_ARG = struct.Struct("<IIQ")                      # 16 bytes
_DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
_REF_NAMES = {v: k for k, v in REF_KINDS.items()}
_OP_NAMES = {v: k for k, v in SHAPE_OPS.items()}
_IDENT = re.compile(r"[A-Za-z0-9_]+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _fail(msg: str):
    raise EngineFormatError(f"corrupt engine: {msg}")


# ----------------------------------------------------------------- writer --

def plan_bytes(plan: EnginePlan) -> bytes:
    """The PLAN section of `plan`; ValueError names what the reader would refuse."""
    strtab = bytearray()
    names: dict[str, int] = {}

    def intern(name: str) -> tuple[int, int]:
        raw = name.encode()
        if name not in names:
            names[name] = len(strtab)
            strtab.extend(raw + b"\0")
        return names[name], len(raw)

    def entry(d) -> int:
        if isinstance(d, Reg):
            if d.index < 0:
                raise ValueError(f"negative register {d}")
            return REG_FLAG | d.index
        if not isinstance(d, int) or not 0 <= d < REG_FLAG:
            raise ValueError(f"dim {d!r} is not a Reg or an int in [0, 2^63)")
        return d

    tensors, pool = [], []
    for t in list(plan.inputs) + list(plan.outputs):
        if t.dtype not in DTYPE_CODES:
            raise ValueError(f"tensor {t.name!r}: unknown dtype {t.dtype!r}")
        if len(t.shape) > MAX_RANK:
            raise ValueError(f"tensor {t.name!r}: rank {len(t.shape)} above {MAX_RANK}")
        top = t.static_shape
        if len(top) != len(t.shape):
            raise ValueError(f"tensor {t.name!r}: max_shape {top} does not match shape {t.shape}")
        tensors.append(_TENSOR.pack(*intern(t.name), DTYPE_CODES[t.dtype], len(t.shape), 0, len(pool)))
        pool += [entry(d) for d in t.shape] + [entry(d) for d in top]
    dims = [_DIM.pack(*intern(d.name), d.min, d.max, d.divisor, 0) for d in plan.dims]
    ops = []
    for op in plan.program:
        if op.op not in SHAPE_OPS:
            raise ValueError(f"unknown shape op {op.op!r}")
        ops.append(_OP.pack(SHAPE_OPS[op.op], op.a, op.b, 0, op.imm))
    checks = [_CHECK.pack(reg.index, *intern(msg), 0) for reg, msg in plan.checks]
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
            args.append(_ARG.pack(kind, a.index if kind in (0, 1, REF_DIM) else 0, a.offset))
        grid = [g.index if isinstance(g, Reg) else g for g in ln.grid]
        grid_regs = sum(1 << k for k, g in enumerate(ln.grid) if isinstance(g, Reg))
        when = NO_REG if ln.when is None else ln.when.index
        launches.append(_LAUNCH.pack(kidx[ln.kernel], *grid, *ln.block, ln.smem, start, len(ln.args),
                                     when, grid_regs))
    head = _HDR.pack(len(plan.inputs), len(plan.outputs), len(pool), len(kernels), len(launches),
                     len(args), len(strtab), plan.arena_zeroed, len(dims), len(ops), len(checks), 0,
                     plan.arena_size, len(plan.weights))
    try:
        out = b"".join([head, *tensors, struct.pack(f"<{len(pool)}Q", *pool), *dims, *ops, *checks,
                        *kern_rows, *launches, *args, bytes(strtab)])
    except struct.error as e:
        raise ValueError(f"invalid engine plan: a field does not fit its slot ({e})") from None
    try:  # the writer never produces what the reader rejects
        parse_plan(out, len(plan.weights))
    except EngineFormatError as e:
        raise ValueError(f"invalid engine plan: {str(e).removeprefix('corrupt engine: ')}") from None
    return out


# ----------------------------------------------------------------- reader --

class _Reader:
    """Cursor over the PLAN bytes with the string table at hand."""

    def __init__(self, p: bytes, strtab: bytes):
        self.p, self.strtab = p, strtab

    def string(self, off: int, ln: int, what: str, text: bool = False) -> str:
        s = self.strtab
        if off + ln >= len(s) or s[off + ln] != 0 or b"\0" in s[off:off + ln]:
            _fail(f"{what} [{off}, +{ln}) outside the string table")
        if not text:
            return s[off:off + ln].decode("utf-8", "replace")
        try:
            out = s[off:off + ln].decode("utf-8")
        except UnicodeDecodeError:
            _fail(f"{what} is not UTF-8")
        if _CONTROL.search(out):
            _fail(f"{what} has a control character")
        return out


def _dim_specs(r: _Reader, pos: int, nd: int) -> list[DimSpec]:
    out = []
    for i in range(nd):
        off, ln, lo, hi, div, rsv = _DIM.unpack_from(r.p, pos + i * _DIM.size)
        name = r.string(off, ln, f"dim {i} name", text=True)
        if not name or rsv or not lo <= hi < DIM_LIMIT or div < 1:
            _fail(f"dim {i} '{name}': range {lo}..{hi}, divisor {div} invalid (need 0 <= min <= max < 2^31, "
                  f"divisor >= 1)")
        if any(d.name == name for d in out):
            _fail(f"duplicate dim name '{name}'")
        out.append(DimSpec(name, lo, hi, div))
    return out


def _program(p: bytes, pos: int, nd: int, no: int) -> list[ShapeOp]:
    out = []
    for k in range(no):
        code, a, b, rsv, imm = _OP.unpack_from(p, pos + k * _OP.size)
        name = _OP_NAMES.get(code)
        reg = nd + k
        ok = name is not None and not rsv and (
            (a == b == 0) if name == "const" else (a < reg and b < reg and imm == 0))
        if not ok:
            _fail(f"shape op {k} (register {reg}): opcode {code}, registers {a}, {b}, imm {imm} invalid "
                  f"(operands must be earlier registers)")
        out.append(ShapeOp(name, a, b, imm))
    return out


def _tensors(r: _Reader, ni: int, no: int, pool: tuple, dims: list[DimSpec], nregs: int):
    tensors = []
    for i in range(ni + no):
        off, ln, dt, rank, rsv, ps = _TENSOR.unpack_from(r.p, _HDR.size + i * _TENSOR.size)
        what = f"input {i}" if i < ni else f"output {i - ni}"
        if dt not in _DTYPE_NAMES or rank > MAX_RANK or ps + 2 * rank > len(pool) or rsv:
            _fail(f"{what}: dtype {dt}, rank {rank} or dims [{ps}, +{2 * rank}) invalid")
        name = r.string(off, ln, f"{what} name")
        shape, top = [], pool[ps + rank:ps + 2 * rank]
        for k, (d, m) in enumerate(zip(pool[ps:ps + rank], top)):
            if m & REG_FLAG:
                _fail(f"{what} '{name}' max dim {k} is a register")
            if d & REG_FLAG:
                reg = d & ~REG_FLAG
                lim = len(dims) if i < ni else nregs
                if reg >= lim or (i < ni and m < dims[reg].max):
                    _fail(f"{what} '{name}' dim {k}: register {reg} or max {m} invalid (an input's dynamic dim "
                          f"names a dim, its max covers the dim's range)")
                shape.append(Reg(reg))
            elif d != m:
                _fail(f"{what} '{name}' static dim {k} is {d} but its max is {m}")
            else:
                shape.append(d)
        n = DTYPE_SIZES[_DTYPE_NAMES[dt]]
        for d in top:  # same partial-product rule as engine.c
            if d and n > ((1 << 62) - 1) // d:
                _fail(f"{what} '{name}' byte size overflows")
            n *= d
        dynamic = any(isinstance(d, Reg) for d in shape)
        tensors.append(TensorSpec(name, _DTYPE_NAMES[dt], tuple(shape), tuple(top) if dynamic else None))
    ins, outs = tensors[:ni], tensors[ni:]
    for group, what in ((ins, "input"), (outs, "output")):
        if len({t.name for t in group}) != len(group):
            _fail(f"duplicate {what} names")
    used = {d.index for t in ins for d in t.shape if isinstance(d, Reg)}
    for i, d in enumerate(dims):   # a dim takes its value from the inputs
        if i not in used:
            _fail(f"dim {i} '{d.name}' is used by no input")
    return ins, outs


def _launches(r: _Reader, lpos: int, apos: int, nl: int, na: int, kernels: list[str], sizes: dict,
              arena: int, wsize: int, nregs: int) -> list[Launch]:
    launches = []
    for i in range(nl):
        k, *grid, b0, b1, b2, smem, a0, ac, when, grid_regs = _LAUNCH.unpack_from(r.p, lpos + i * _LAUNCH.size)
        regs_ok = all(grid[j] < nregs if grid_regs >> j & 1 else grid[j] for j in range(3))
        if (k >= len(kernels) or a0 + ac > na or 0 in (b0, b1, b2) or grid_regs > 7 or not regs_ok
                or (when != NO_REG and when >= nregs)):
            _fail(f"launch {i}: kernel {k}, args [{a0}, +{ac}), grid {grid} (registers {grid_regs:#x}), "
                  f"block or predicate {when} invalid")
        args = []
        for j in range(a0, a0 + ac):
            kind, idx, off = _ARG.unpack_from(r.p, apos + j * _ARG.size)
            name = _REF_NAMES.get(kind)
            if name in sizes:
                ok = idx < len(sizes[name]) and (off == 0 or off < sizes[name][idx])
            elif name == "dim":
                ok = idx < nregs and off == 0
            else:
                ok = name is not None and idx == 0 and (off == 0 or off < (arena if name == "arena" else wsize))
            if not ok:
                _fail(f"launch {i} arg {j - a0}: kind {kind} index {idx} offset {off} out of bounds")
            args.append(BufferRef(name, idx, off))
        grid_t = tuple(Reg(g) if grid_regs >> j & 1 else g for j, g in enumerate(grid))
        launches.append(Launch(kernels[k], grid_t, (b0, b1, b2), smem, args,
                               when=None if when == NO_REG else Reg(when)))
    return launches


def parse_plan(p: bytes, weights_size: int) -> dict:
    """Validate a PLAN section; the plan's fields as a dict (EnginePlan keyword arguments)."""
    if len(p) < _HDR.size:
        _fail(f"PLAN section is {len(p)} bytes, shorter than its header")
    ni, no, npool, nk, nl, na, ns, zeroed, nd, nops, nc, rsv, arena, wsize = _HDR.unpack_from(p)
    parts = [_HDR.size, _TENSOR.size * (ni + no), 8 * npool, _DIM.size * nd, _OP.size * nops,
             _CHECK.size * nc, _KERNEL.size * nk, _LAUNCH.size * nl, _ARG.size * na, ns]
    if sum(parts) != len(p) or rsv:
        _fail(f"PLAN section is {len(p)} bytes, its counts need {sum(parts)}" + (" (reserved field set)" if rsv else ""))
    if zeroed > arena:
        _fail(f"PLAN zeroed arena tail {zeroed} exceeds the arena size {arena}")
    if wsize != weights_size:
        _fail(f"PLAN weights size {wsize} != WEIGHTS section size {weights_size}")
    starts = [sum(parts[:i]) for i in range(len(parts))]
    pool = struct.unpack_from(f"<{npool}Q", p, starts[2])
    r = _Reader(p, p[starts[9]:])
    dims = _dim_specs(r, starts[3], nd)
    program = _program(p, starts[4], nd, nops)
    nregs = nd + nops
    checks = []
    for i in range(nc):
        reg, off, ln, crsv = _CHECK.unpack_from(p, starts[5] + i * _CHECK.size)
        msg = r.string(off, ln, f"check {i} message", text=True)
        if reg >= nregs or crsv:
            _fail(f"check {i}: register {reg} invalid (the program has {nregs})")
        checks.append((Reg(reg), msg))
    ins, outs = _tensors(r, ni, no, pool, dims, nregs)
    kernels = []
    for i in range(nk):
        name = r.string(*_KERNEL.unpack_from(p, starts[6] + i * _KERNEL.size), f"kernel {i} name")
        if not _IDENT.match(name):
            _fail(f"kernel {i} name {name!r} is not a C identifier")
        kernels.append(name)
    sizes = {"input": [t.nbytes for t in ins], "output": [t.nbytes for t in outs]}
    launches = _launches(r, starts[7], starts[8], nl, na, kernels, sizes, arena, wsize, nregs)
    return {"inputs": ins, "outputs": outs, "arena_size": arena, "arena_zeroed": zeroed,
            "launches": launches, "dims": dims, "program": program, "checks": checks}
