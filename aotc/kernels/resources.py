"""Resource checks: reject at compile time a kernel that cannot launch on a target arch.

A launch fails on the GPU (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, INVALID_VALUE)
when a block asks for more threads, registers or shared memory than one SM
can give it. aotc knows everything needed to decide this before any GPU is
involved: the launch geometry from codegen (`Kernel.grid/block/smem`) and the
compiled usage read back from the cubin itself (`cubin_resources`), so a
cached cubin, or one inside an engine, gives the same answer as a fresh
compile. The compiler runs `check_kernels` for every target arch.

Usage comes from the cubin's ELF, not from a ptxas log: `.nv.info` holds
EIATTR_REGCOUNT and the stack-frame sizes per function, `.nv.info.<kernel>`
its __launch_bounds__ (EIATTR_MAX_THREADS), and `.nv.shared.<kernel>` its
static shared memory. tests/kernels/test_resources.py checks these against
`ptxas -v` for every kernel it compiles.

To support a new arch, add a row to LIMITS; an arch without a row is held to
the portable floor every CUDA device guarantees (48 KiB shared per block).
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

from aotc.errors import CompileError


@dataclass(frozen=True)
class ArchLimits:
    """Per-block launch limits of one compute capability."""
    arch: str
    max_smem_per_block: int                  # static + dynamic, with the opt-in the runtime performs
    static_smem_per_block: int = 48 * 1024   # __shared__ arrays alone (no opt-in for static)
    regs_per_block: int = 64 * 1024          # 32-bit registers one block may hold (= per SM on 8.x/9.0)
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256                # registers are allocated per warp in units of 256
    sub_partitions: int = 4                  # warps are rounded up to a multiple of this for the check
    max_threads_per_block: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)


# Figures from NVIDIA's CUDA C++ Programming Guide, "Compute Capabilities",
# technical specifications table
# (https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-capabilities.html):
# 64K 32-bit registers per SM and per block, 255 registers per thread, 1024
# threads per block, block (1024, 1024, 64), grid (2^31-1, 65535, 65535),
# 48 KB static shared memory per block; opt-in shared memory per block 163 KB
# on 8.0 (A100: 164 KB per SM less the 1 KB CUDA reserves per block, Ampere
# tuning guide), 99 KB on 8.6/8.9, 227 KB on 9.0 (Hopper tuning guide:
# 228 KB per SM less 1 KB). Register allocation per warp in units of 256 and
# warps rounded to 4 sub-partitions follow cudaOccMaxBlocksPerSMRegsLimit in
# cuda_occupancy.h (nvidia-cuda-runtime wheel).
LIMITS = {
    "sm_80": ArchLimits("sm_80", max_smem_per_block=163 * 1024),
    "sm_86": ArchLimits("sm_86", max_smem_per_block=99 * 1024),
    "sm_89": ArchLimits("sm_89", max_smem_per_block=99 * 1024),
    "sm_90": ArchLimits("sm_90", max_smem_per_block=227 * 1024),
}
PORTABLE = ArchLimits("portable", max_smem_per_block=48 * 1024)
RESERVED_SMEM = 1024     # per-block shared memory the driver reserves on 8.x and later


def limits_for(arch: str) -> ArchLimits:
    """Limits for "sm_90", "sm_90a" or "compute_90"; the portable floor for archs without a row."""
    m = re.match(r"^(?:sm|compute)_(\d+)[af]?$", arch)
    return LIMITS.get(f"sm_{m.group(1)}", PORTABLE) if m else PORTABLE


class ResourceError(CompileError):
    """A kernel whose launch needs more than its target arch gives one block."""


def check(cond: bool, reason: str) -> None:
    """Raise ResourceError(reason) unless `cond`; `reason` names the kernel, the arch and the limit."""
    if not cond:
        raise ResourceError(reason)


@dataclass(frozen=True)
class KernelResources:
    """What ptxas allotted one kernel, read from its cubin."""
    registers: int               # per thread
    static_smem: int             # bytes of __shared__ arrays per block (the driver's reserve excluded)
    local_bytes: int             # per-thread stack frame: register spills and local arrays
    max_threads: int = 0         # __launch_bounds__ threads per block; 0 when the kernel has none

    def as_dict(self) -> dict:
        return {"registers": self.registers, "static_smem": self.static_smem, "local_bytes": self.local_bytes}


# cubin ELF: nv.info attribute records are (u8 format, u8 attribute, u16 size-or-value[, payload]).
# NVIDIA does not document them; the numbering is the one public cubin tools
# (cuobjdump's names, CuAssembler's CuNVInfo) use, and the tests hold it to ptxas -v.
EM_CUDA = 190
SHT_NOBITS = 8                         # .nv.shared.* sections: a size, no bytes in the file
EIFMT_SVAL = 0x04                      # the u16 is a payload size; every other format carries no payload
EIATTR_MAX_THREADS = 0x05              # (x, y, z) from __launch_bounds__ / .maxntid
EIATTR_FRAME_SIZE = 0x11               # (symbol, bytes)
EIATTR_MIN_STACK_SIZE = 0x12           # (symbol, bytes)
EIATTR_MAX_STACK_SIZE = 0x23           # (symbol, bytes), with callees
EIATTR_REGCOUNT = 0x2F                 # (symbol, registers per thread)
_SHDR = struct.Struct("<IIQQQQIIQQ")   # name, type, flags, addr, offset, size, link, info, align, entsize
_SYM = struct.Struct("<IBBHQQ")        # name, info, other, shndx, value, size


def _bad(why: str):
    raise CompileError(f"cannot read kernel resources from cubin: {why}")


def _sections(cubin: bytes) -> tuple[dict[str, tuple[int, int, int, int]], list[tuple[int, int]]]:
    """Section name -> (type, offset, size, link) of a 64-bit little-endian CUDA ELF, and
    (offset, size) of every section by index (for the symbol table's string-table link)."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        _bad("not a 64-bit little-endian ELF")
    if struct.unpack_from("<H", cubin, 18)[0] != EM_CUDA:
        _bad("ELF machine is not CUDA")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shentsize != _SHDR.size or shstrndx >= shnum or shoff + shnum * _SHDR.size > len(cubin):
        _bad("section table out of bounds")
    heads = [_SHDR.unpack_from(cubin, shoff + i * _SHDR.size) for i in range(shnum)]
    for h in heads:
        if h[1] != SHT_NOBITS and h[4] + h[5] > len(cubin):
            _bad("section data out of bounds")
    spans = [(h[4], h[5]) for h in heads]
    names = {_string(cubin, spans[shstrndx], h[0]): (h[1], h[4], h[5], h[6]) for h in heads}
    return names, spans


def _string(cubin: bytes, table: tuple[int, int], off: int) -> str:
    start, size = table
    end = cubin.find(b"\0", start + off, start + size)
    if off >= size or end < 0:
        _bad("string out of bounds")
    return cubin[start + off:end].decode(errors="replace")


def _symbol_names(cubin: bytes, secs, spans) -> list[str]:
    _, off, size, link = secs[".symtab"]
    if link >= len(spans):
        _bad("symbol table has no string table")
    return [_string(cubin, spans[link], _SYM.unpack_from(cubin, off + i * _SYM.size)[0])
            for i in range(size // _SYM.size)]


def _records(data: bytes):
    """(attribute, payload or u16 value) for each nv.info record."""
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr, val = data[pos], data[pos + 1], struct.unpack_from("<H", data, pos + 2)[0]
        if fmt == EIFMT_SVAL:
            yield attr, data[pos + 4:pos + 4 + val]
            pos += 4 + val
        else:
            yield attr, val
            pos += 4


def cubin_resources(cubin: bytes) -> dict[str, KernelResources]:
    """Registers, static shared memory, stack frame and launch bounds of every kernel in `cubin`."""
    secs, spans = _sections(cubin)
    if ".symtab" not in secs:
        _bad("no symbol table")
    symbols = _symbol_names(cubin, secs, spans)
    per_symbol: dict[str, dict[int, int]] = {}
    if ".nv.info" in secs:
        _, off, size, _ = secs[".nv.info"]
        for attr, payload in _records(cubin[off:off + size]):
            if isinstance(payload, bytes) and len(payload) == 8:
                sym, value = struct.unpack("<II", payload)
                if sym < len(symbols):
                    per_symbol.setdefault(symbols[sym], {})[attr] = value
    # On sm_90 each kernel's shared section also holds the driver's per-block
    # reserve; ptxas and the launch limits count only the kernel's own arrays.
    reserved = RESERVED_SMEM if any(n.startswith(".nv.shared.reserved.") for n in secs) else 0
    out = {}
    for sec_name, (_, off, size, _) in secs.items():
        if not sec_name.startswith(".nv.info."):
            continue
        kernel = sec_name[len(".nv.info."):]
        attrs = per_symbol.get(kernel, {})
        if EIATTR_REGCOUNT not in attrs:
            _bad(f"kernel {kernel} has no register count (EIATTR_REGCOUNT)")
        max_threads = 0
        for attr, payload in _records(cubin[off:off + size]):
            if attr == EIATTR_MAX_THREADS and isinstance(payload, bytes) and len(payload) == 12:
                x, y, z = struct.unpack("<III", payload)
                max_threads = x * y * z
        shared = secs.get(f".nv.shared.{kernel}", (0, 0, 0, 0))[2]
        local = max(attrs.get(a, 0) for a in (EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE))
        out[kernel] = KernelResources(attrs[EIATTR_REGCOUNT], max(0, shared - reserved), local, max_threads)
    return out


def check_launch(name: str, grid, block, smem: int, arch: str, usage: KernelResources | None = None) -> None:
    """Raise ResourceError if launching kernel `name` this way cannot succeed on `arch`."""
    lim = limits_for(arch)
    where = f"kernel {name} on {arch}"
    threads = math.prod(block)
    check(all(b >= 1 for b in block) and all(g >= 1 for g in grid), f"{where}: empty grid {grid} or block {block}")
    check(threads <= lim.max_threads_per_block,
          f"{where}: block {tuple(block)} has {threads} threads, above the limit of "
          f"{lim.max_threads_per_block} threads per block")
    for axis, b, m in zip("xyz", block, lim.max_block):
        check(b <= m, f"{where}: block {axis} dimension {b} is above the limit of {m}")
    for axis, g, m in zip("xyz", grid, lim.max_grid):
        check(g <= m, f"{where}: grid {axis} dimension {g} is above the limit of {m}")
    static = usage.static_smem if usage else 0
    check(static + smem <= lim.max_smem_per_block,
          f"{where}: {static} B static + {smem} B dynamic shared memory per block is above the "
          f"{lim.max_smem_per_block} B ({lim.max_smem_per_block // 1024} KiB) limit")
    if usage is None:
        return
    check(static <= lim.static_smem_per_block,
          f"{where}: {static} B static shared memory is above the {lim.static_smem_per_block} B static limit")
    if usage.max_threads:
        check(threads <= usage.max_threads,
              f"{where}: block of {threads} threads exceeds its __launch_bounds__ of {usage.max_threads}")
    regs = usage.registers
    check(regs <= lim.max_regs_per_thread,
          f"{where}: {regs} registers per thread is above the limit of {lim.max_regs_per_thread}")
    per_warp = -(-regs * 32 // lim.reg_alloc_unit) * lim.reg_alloc_unit
    warps = -(-threads // 32)
    needed = per_warp * -(-warps // lim.sub_partitions) * lim.sub_partitions
    check(needed <= lim.regs_per_block,
          f"{where}: {regs} registers per thread x {threads} threads needs {needed} registers per block, "
          f"above the {lim.regs_per_block} registers per SM")


def check_kernels(kernels, arch: str, cubin: bytes | None = None) -> dict[str, KernelResources]:
    """Check each codegen Kernel's launch on `arch` against its usage in `cubin` (None: launch only).

    Returns the usage per kernel name, for the engine manifest.
    """
    usage = cubin_resources(cubin) if cubin is not None else {}
    for k in kernels:
        if cubin is not None and k.name not in usage:
            raise CompileError(f"kernel {k.name} is missing from the {arch} cubin")
        check_launch(k.name, k.grid, k.block, k.smem, arch, usage.get(k.name))
    return usage
