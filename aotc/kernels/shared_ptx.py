"""One NVVM run for all of a module's GPU archs: PTX from NVRTC in parallel pieces, ptxas per arch.

Most of NVRTC's time is its NVVM optimizer (ResNet-50's module: 4.4 of 5.7 CPU s per arch), and a
cubin per arch runs it once per arch over the same source. Where that source compiles to the same
PTX for every arch (`arch_dependence` finds nothing that branches on the arch), the work is done once:

- the kernels are split into pieces (`split_kernels`), each its own NVRTC program compiled to PTX
  for the oldest arch: NVVM is single-threaded, and independent pieces keep every core busy;
- the pieces' PTX becomes one module (`merge_ptx`): one header, what several pieces declare
  (a shared variable of a common helper, a math table) once;
- ptxas of NVRTC's own CUDA release (the nvidia-cuda-nvcc wheel's) assembles that PTX for each
  cubin arch (`assemble`), and the PTX shipped for compute_XY is the same text with its target
  renamed (`retarget`): PTX written for sm_80 is valid PTX for every later arch.

NVVM optimizes each kernel on its own save where kernels share module state (a helper's static
__shared__ variable is demoted into a kernel that is its one user; a helper function is inlined into
a single caller), and ptxas compiles each entry on its own; with the kernels that share state split
so that each piece sees what the whole module shows (`split_kernels`), every kernel's SASS is that
of NVRTC's whole-module compile (checked function by function: tests/kernels/test_shared_ptx.py;
`python -m bench.compile_breakdown MODEL --check-sass`: ResNet-50, MobileNetV2, ViT-B/16, BERT-base
and GPT-2 small in fp32, ResNet-50 and GPT-2 small in fp16, all equal). `find_ptxas` returns None
where the wheel is missing or of another release; the compile driver then runs NVRTC per arch as
before, as it does for an arch-dependent module.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path

from aotc.errors import CompileError
from aotc.kernels.cache import cached_bytes

# What makes NVVM's output differ between sm_80 and sm_90 in aotc's kernels: bf16 and fp8 arithmetic
# (cuda_bf16.hpp and cuda_fp8.hpp use native instructions from sm_90 / sm_89 on), the DPX intrinsics
# (__vimax*, __viaddmax*, ...: sm_90 instructions, emulated before), and any __CUDA_ARCH__ test,
# a kernel's or that of an aotc header it includes (_arch_headers).
_ARCH_DEPENDENT = re.compile(r"__CUDA_ARCH|bfloat16|bf16|fp8|f8e\d|e4m3|e5m2|e8m0|__vi(?:max|min|add|sub)|"
                             r"__vibmax|__vibmin")
_HEADER = re.compile(r"^\s*\.(version|target|address_size)\b")
_FUNC_NAME = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$.]*)")
_VAR_NAME = re.compile(r"([A-Za-z_$%][\w$.]*)\s*(?:\[[^\]]*\]\s*)*(?:=[^;]*)?;\s*$")


class MergeConflict(CompileError):
    """Two pieces define one PTX symbol differently (the module is then compiled whole)."""


@functools.lru_cache(maxsize=None)
def _arch_headers() -> frozenset[str]:
    """aotc's headers that test __CUDA_ARCH__ (aotc_mma8.cuh: the e4m3 MMA from sm_89 on)."""
    from aotc.kernels.nvrtc_compile import TEMPLATES_DIR
    return frozenset(p.name for p in TEMPLATES_DIR.glob("*.cuh") if "__CUDA_ARCH__" in p.read_text())


def arch_dependence(kernels) -> str:
    """'' where the kernels' PTX is the same for every arch, else the first thing that makes it differ."""
    from aotc.kernels.codegen import module_source
    for k in kernels:
        m = _ARCH_DEPENDENT.search(k.source)
        if m:
            return f"{k.name} uses {m.group(0)}"
        headers = set(re.findall(r'#include "([^"]+)"', module_source([k]))) & _arch_headers()
        if headers:
            return f"{k.name} includes {min(headers)}"
    return ""


@functools.lru_cache(maxsize=None)
def static_shared_helpers() -> frozenset[str]:
    """aotc's header functions that declare a static __shared__ variable (aotc_split_last's flag)."""
    from aotc.kernels.nvrtc_compile import TEMPLATES_DIR
    found, current = set(), None
    for path in sorted(TEMPLATES_DIR.glob("*.cuh")):
        for line in path.read_text().splitlines():
            m = re.match(r"^\s*(?:template\s*<[^>]*>\s*)?[\w\s:<>,*&]*\b(?:inline|__device__)\b[\w\s:<>,*&]*?"
                         r"\b(\w+)\s*\(", line)
            if m:
                current = m.group(1)
            elif current and "__shared__" in line and "extern" not in line:
                found.add(current)
    return frozenset(found)


def _units(distinct) -> list[list]:
    """The kernels in units a piece takes whole, so that NVVM sees each kernel's module-level company
    as in the whole module. A helper's static __shared__ (aotc_split_last's flag) is demoted into its
    kernel when exactly one kernel of the translation unit uses it: its users go in pairs (a triple
    for an odd count), never one alone unless it is the only one. f64 math's slow paths (sin, cos,
    pow) are functions inlined only into a single caller: f64 kernels form one unit."""
    helpers = static_shared_helpers()
    f64 = [k for k in distinct if re.search(r"\bdouble\b", k.source)]
    users: dict[frozenset, list] = {}
    for k in distinct:
        used = frozenset(h for h in helpers if h + "(" in k.source)
        if used and k not in f64:
            users.setdefault(used, []).append(k)
    if any(h + "(" in k.source for k in f64 for h in helpers):     # an f64 user: every user with it
        f64 += [k for ks in users.values() for k in ks]
        users = {}
    units = [f64] if f64 else []
    if len(users) > 1:                   # users of different helper sets: all together (no such kernels yet)
        units.append([k for ks in users.values() for k in ks])
    for ks in users.values() if len(users) == 1 else ():
        pairs = [ks[i:i + 2] for i in range(0, len(ks), 2)]
        if len(pairs) > 1 and len(pairs[-1]) == 1:
            odd = pairs.pop()
            pairs[-1] += odd
        units += pairs
    placed = {k.name for u in units for k in u}
    return units + [[k] for k in distinct if k.name not in placed]


def split_kernels(kernels, pieces: int) -> list[list]:
    """Distinct kernels in at most `pieces` groups of about equal source length (largest unit first
    into the lightest group); each group keeps the kernels' order, so a group's source is stable.
    Units (_units) keep kernels whose code depends on their company in the translation unit together."""
    distinct = list({k.name: k for k in kernels}.values())
    units = _units(distinct)
    groups: list[list] = [[] for _ in range(max(1, min(pieces, len(units))))]
    sizes = [0] * len(groups)
    order = {k.name: i for i, k in enumerate(distinct)}
    for unit in sorted(units, key=lambda u: -sum(len(k.source) for k in u)):
        g = sizes.index(min(sizes))
        groups[g] += unit
        sizes[g] += sum(len(k.source) for k in unit)
    return [sorted(g, key=lambda k: order[k.name]) for g in groups if g]


def _items(ptx: str):
    """(header lines, top-level items) of one PTX module: an item is a declaration up to its `;`
    or a function with its braced body; comments and blank lines between items are dropped."""
    header, items, buf, depth = [], [], [], 0
    for line in ptx.splitlines():
        code = line.split("//", 1)[0]
        if depth == 0 and not buf:
            if not code.strip():
                continue
            if _HEADER.match(code):
                header.append(code.strip())
                continue
        buf.append(line)
        depth += code.count("{") - code.count("}")
        if depth < 0:
            raise CompileError("PTX merge: unbalanced braces in NVRTC's output")
        if depth == 0 and (code.rstrip().endswith(";") or code.rstrip().endswith("}")):
            items.append("\n".join(buf))
            buf = []
    if buf or depth:
        raise CompileError("PTX merge: NVRTC's output ends inside a declaration")
    return header, items


def _defines(item: str) -> str | None:
    """The symbol an item defines (a function with a body, a variable that is not .extern), or None."""
    head = item.split("{", 1)[0] if (".entry" in item or ".func" in item) else item
    if re.search(r"\.(entry|func)\b", head):
        m = _FUNC_NAME.search(head)
        return m.group(1) if m and "{" in item else None
    if re.search(r"^\s*\.extern\b", item):
        return None
    m = _VAR_NAME.search(item.split("//", 1)[0])
    return m.group(1) if m else None


def merge_ptx(texts: list[str]) -> str:
    """One PTX module holding every piece's functions and declarations; what several pieces declare
    identically appears once. Different definitions of one name raise MergeConflict."""
    header, out, seen, defined = None, [], set(), {}
    for text in texts:
        h, items = _items(text)
        if header is None:
            header = h
        elif h != header:
            raise MergeConflict(f"PTX merge: pieces differ in their header ({header} vs {h})")
        for item in items:
            if item in seen:
                continue
            name = _defines(item)
            if name is not None and defined.setdefault(name, item) is not item:
                raise MergeConflict(f"PTX merge: {name} is defined differently by two pieces")
            seen.add(item)
            out.append(item)
    return "\n".join((header or []) + [""] + out) + "\n"


def retarget(ptx: str, sm_arch: str) -> str:
    """`ptx` with its `.target` naming `sm_arch` (PTX for an older arch is valid for a newer one)."""
    text, n = re.subn(r"^\.target\s+sm_\d+[af]?", f".target {sm_arch}", ptx, count=1, flags=re.M)
    if n != 1:
        raise CompileError("PTX has no .target line to retarget")
    return text


@functools.lru_cache(maxsize=None)
def _ptxas_release(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else ""


def _nvrtc_release() -> str:
    from importlib import metadata
    try:
        return metadata.version("nvidia-cuda-nvrtc")
    except metadata.PackageNotFoundError:
        return ""


def find_ptxas() -> str | None:
    """ptxas of NVRTC's exact release (so its SASS is NVRTC's), or None. $AOTC_PTXAS names one;
    `AOTC_PTXAS=none` turns the shared-PTX build off."""
    env = os.environ.get("AOTC_PTXAS")
    if env == "none":
        return None
    candidates = [env] if env else []
    try:
        import nvidia.cu13
        candidates += [str(Path(base) / "bin" / "ptxas") for base in nvidia.cu13.__path__]
    except ImportError:
        pass
    want = _nvrtc_release()
    for path in candidates:
        if path and os.access(path, os.X_OK) and want and _ptxas_release(path) == want:
            return path
    return None


def _run_ptxas(ptxas: str, ptx: str, sm_arch: str) -> tuple[bytes, float]:
    """(cubin, the child's CPU seconds) of one ptxas run; its log goes into the CompileError."""
    with tempfile.TemporaryDirectory(prefix="aotc-ptxas-") as tmp:
        src, out = Path(tmp) / "module.ptx", Path(tmp) / "module.cubin"
        src.write_text(ptx)
        proc = subprocess.Popen([ptxas, f"-arch={sm_arch}", str(src), "-o", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        log = proc.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            first = next((l for l in log.splitlines() if "error" in l.lower()), log.strip()[:200] or "no log")
            raise CompileError(f"ptxas for {sm_arch} failed: {first.strip()}", log=log)
        return out.read_bytes(), usage.ru_utime + usage.ru_stime


def assemble(ptx: str, sm_arch: str, ptxas: str) -> tuple[bytes, float]:
    """(cubin of `ptx` for `sm_arch`, ptxas's CPU seconds: 0 on a cache hit), cached by content."""
    if not re.fullmatch(r"sm_\d+[af]?", sm_arch):
        raise CompileError(f"bad cubin arch {sm_arch!r}: expected sm_XY")
    spent = [0.0]

    def run() -> bytes:
        cubin, spent[0] = _run_ptxas(ptxas, ptx, sm_arch)
        return cubin
    cubin = cached_bytes("ptxas", [ptx, sm_arch, f"ptxas={_ptxas_release(ptxas)}"], run)
    return cubin, spent[0]
