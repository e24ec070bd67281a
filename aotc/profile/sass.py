"""Instruction mix of each kernel's main loop and its local-memory traffic, from the cubin's SASS.

Whether a GEMM keeps its tensor cores busy shows in the machine code: the share of HMMA/IMMA (or FFMA for the
f32 fallbacks) among the instructions of the loop that runs K times. nvdisasm (the `nvidia-cuda-nvdisasm`
wheel) prints the SASS; the main loop is taken to be the longest innermost loop, an innermost loop being the
span from a backward branch's target to the branch that contains no other backward branch; where some
innermost loops hold tensor-core instructions, the longest of those (a GEMM's epilogue loop, with erf say, may
be longer than its K loop); a kernel whose tensor-core instructions are all outside innermost loops (its K
loop unrolled away, or only in a loop that holds another, like dot_mma's cold unaligned-input copy) has none,
as straight-line code has none, unless every mma sits in a loop that holds another loop (an attention's key
loop around its staging loops): then the innermost such loop is the main loop, the one with the larger tensor
share where the kernel is built twice (its fast path). A kernel with straight-line mma has its shares taken
over its straight-line code (the instructions outside every loop, which each block issues once): the model
would otherwise charge it no issue cost at all. LDL/STL anywhere in the kernel are local memory: spills or
local arrays. Without nvdisasm the caller gets None and says so.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from aotc.errors import AotcError

_FUNC = re.compile(r"^\s*\.section\s+\.text\.([A-Za-z_][\w$]*),")
_LABEL = re.compile(r"^\s*(\.L\w+):")
_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[\w.]+)?\s*([^;]*);")
_TARGET = re.compile(r"`\((\.L\w+)\)")
FP_OTHER_OPS = ("FADD", "FMUL", "FMNMX", "HADD2", "HMUL2", "HMNMX2", "DADD", "DMUL", "DMNMX")
TENSOR_OPS = ("HMMA", "IMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA", "BMMA")


def nvdisasm_path() -> str | None:
    """The nvdisasm of the installed wheel, else one on PATH, else None."""
    try:
        import nvidia.cu13
        for base in nvidia.cu13.__path__:
            p = Path(base) / "bin" / "nvdisasm"
            if p.is_file():
                return str(p)
    except ImportError:
        pass
    return shutil.which("nvdisasm")


@dataclass
class KernelSass:
    instructions: list[tuple[int, str, str]] = field(default_factory=list)   # (address, opcode, operands)
    labels: dict[str, int] = field(default_factory=dict)


def parse(text: str) -> dict[str, KernelSass]:
    """nvdisasm's output, per kernel: its instructions and labels."""
    out: dict[str, KernelSass] = {}
    cur: KernelSass | None = None
    pending: list[str] = []
    for line in text.splitlines():
        if m := _FUNC.match(line):
            cur = out.setdefault(m.group(1), KernelSass())
            pending = []
        elif cur is None:
            continue
        elif m := _LABEL.match(line):
            pending.append(m.group(1))
        elif m := _INSN.match(line):
            addr = int(m.group(1), 16)
            for lab in pending:
                cur.labels[lab] = addr
            pending = []
            cur.instructions.append((addr, m.group(2), m.group(4)))
    return out


def _loops(k: KernelSass) -> list[tuple[int, int]]:
    """(first, last) address of every loop: a backward branch's target to the branch."""
    loops = []
    for addr, op, args in k.instructions:
        if op.startswith("BRA") and (t := _TARGET.search(args)) and k.labels.get(t.group(1), addr + 1) <= addr:
            loops.append((k.labels[t.group(1)], addr))
    return loops


def main_loop(k: KernelSass) -> tuple[int, int] | None:
    """(first, last) address of the longest innermost loop (of those with tensor-core instructions, where
    any has them), or None for straight-line code."""
    loops = _loops(k)
    inner = [a for a in loops if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in loops)]
    # a tensor-core kernel's K loop is the one with the mma instructions, however long its epilogue loop;
    # where no innermost loop has them (a K of one or two stages, its loop unrolled away) the math is
    # straight-line code, and the kernel has no main loop, as one without loops
    mma = [a for a, op, _ in k.instructions if op in TENSOR_OPS]

    def holds_mma(s):
        return any(s[0] <= a <= s[1] for a in mma)
    tensor = [s for s in inner if holds_mma(s)]
    if not tensor and mma:
        if any(not any(s[0] <= a <= s[1] for s in loops) for a in mma):
            return None
        # every mma sits in a loop that also holds a loop (an attention's key loop around its staging
        # loops, built twice: an aligned cp.async path and a per-element one): the innermost of the
        # mma-holding loops, the one with the larger tensor share being the fast path
        outer = [s for s in loops if holds_mma(s) and not any(b != s and s[0] <= b[0] and b[1] <= s[1] and
                                                              holds_mma(b) for b in loops)]
        return max(outer, key=lambda s: sum(1 for a in mma if s[0] <= a <= s[1]) /
                   sum(1 for a, _, _ in k.instructions if s[0] <= a <= s[1]))
    return max(tensor or inner, key=lambda s: s[1] - s[0], default=None)


def straight_line_math(k: KernelSass) -> list[str]:
    """A tensor-core kernel with no main loop and mma outside every loop (its K loop unrolled away): the
    opcodes outside every loop, which each block issues once, the math among them; [] for any other kernel.
    Loops left out are per-element paths (a cold unaligned copy) and epilogue loops: the code a block runs
    once for its tile is what the tensor cores wait on, so its share is the issue efficiency's measure."""
    loops = _loops(k)
    outside = [(a, op) for a, op, _ in k.instructions if not any(s[0] <= a <= s[1] for s in loops)]
    if not any(op in TENSOR_OPS for _, op in outside) or main_loop(k) is not None:
        return []
    return [op for _, op in outside]


def mix(k: KernelSass) -> dict:
    """The main loop's size and shares of tensor-core, FFMA and memory instructions; local memory ops.
    A tensor-core kernel with straight-line math has no loop (loop_instructions 0): its shares are over
    that straight-line code instead (straight_line_instructions), which the model reads the same way."""
    loop = main_loop(k)
    body = [op for a, op, _ in k.instructions if loop and loop[0] <= a <= loop[1]]
    n = len(body)
    straight = [] if n else straight_line_math(k)
    body = body or straight

    def share(pred) -> float:
        return round(sum(1 for op in body if pred(op)) / len(body), 4) if body else 0.0
    return {"loop_instructions": n,
            "straight_line_instructions": len(straight),
            "tensor_share": share(lambda op: op in TENSOR_OPS),
            "ffma_share": share(lambda op: op in ("FFMA", "HFMA2", "DFMA")),
            # one-flop floating-point ALU instructions: a pooling or reduction loop's adds and max/min
            "fp_other_share": share(lambda op: op in FP_OTHER_OPS),
            "global_share": share(lambda op: op in ("LDG", "STG", "LDGSTS")),
            "shared_share": share(lambda op: op in ("LDS", "STS", "LDSM", "LDGSTS")),
            "local_ops": sum(1 for _, op, _ in k.instructions if op in ("LDL", "STL"))}


def disassemble(cubin: bytes) -> str:
    tool = nvdisasm_path()
    if tool is None:
        raise AotcError("nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    with tempfile.TemporaryDirectory(prefix="aotc-sass-") as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([tool, "-c", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AotcError(f"nvdisasm failed: {(proc.stderr.strip().splitlines() or ['?'])[0]}")
    return proc.stdout


def cubin_mix(cubin: bytes) -> dict[str, dict] | None:
    """mix() of every kernel in `cubin`; None when nvdisasm is not installed."""
    if nvdisasm_path() is None:
        return None
    return {name: mix(k) for name, k in parse(disassemble(cubin)).items()}
