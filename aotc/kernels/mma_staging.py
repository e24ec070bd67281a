"""How the f16/bf16 tensor-core GEMM (templates/dot_mma.cu) stages its operands and reads its fragments.

Each 16-deep K slice of A (64 rows of M) and B (64 columns of N) goes into one of the kernel's pipeline
stages in shared memory, in one of two XOR-swizzled layouts (aotc_async.cuh's aotc_swz_k16/aotc_swz_mn64),
chosen by which dimension is contiguous in the operand's memory:
- "k":  64 rows (m or n) of 16 k values, the fragments read by ldmatrix;
- "mn": 16 rows (k) of 64 m or n values, the fragments read by ldmatrix.trans.
Either layout is conflict-free for the 16-byte writes of one quarter-warp and the 8 rows one ldmatrix phase
reads. An operand that is a plain load of a kernel parameter whose contiguous run is a whole number of
16-byte chunks is staged by cp.async, 16 bytes a thread ("async"); anything else (a fused prologue, a
converted or gathered load, odd sizes) is computed per element by the region's load code ("elem"), walking
the contiguous dimension so that a warp's loads are coalesced.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotc.kernels.template import instantiate

CHUNK = 8          # b16 elements in a 16-byte chunk
STAGES = 3         # cp.async pipeline depth of dot_mma.cu (3 x 4 KiB of shared memory)


@dataclass
class Operand:
    """One GEMM operand's staging: `which` 'A' or 'B', `layout` 'k' or 'mn', and its load code.

    `address` (async) is code that sets `src` to the chunk's first element and `nbytes` = 16, given the
    operand's coordinates (it leaves nbytes 0 for a chunk that reads nothing: a conv's padding); `load`
    (elem) is code that sets the element's f32 value. The coordinate variables are
    (am, ak) for A, (bn, bk) for B; the value is `a` for A, `bv` for B."""
    which: str
    layout: str
    address: str | None = None
    load: str | None = None

    @property
    def is_async(self) -> bool:
        return self.address is not None


def choose_layout(contiguous: int, contract: list[int], free: list[int]) -> str:
    """'mn' when the operand's only free dim is its contiguous one (builder.contiguous_dim), else 'k'."""
    return "mn" if list(free) == [contiguous] and list(contract) != [contiguous] else "k"


def can_stage_async(layout: str, contract: list[int], rank: int, run: object) -> bool:
    """The contiguous run (K for 'k', M or N for 'mn') splits into whole 16-byte chunks, every one aligned."""
    if not isinstance(run, int) or run % CHUNK:
        return False
    return layout == "mn" or list(contract) == [rank - 1]


def _names(which: str):
    return ("As", "am", "ak", "a") if which == "A" else ("Bs", "bn", "bk", "bv")


def stage_code(op: Operand, idx_t: str, ctype: str, to_elt: str, mn: str, k: str, base: str) -> str:
    """Code staging this thread's share of the slice at `k0` into stage `st`; `mn` bounds m (or n), `k` K,
    `base` is the parameter `src` starts from (the async path's pointer where nothing is read)."""
    if op.is_async and op.load is not None:     # a bound input may be unaligned: per element then
        per_element = stage_code(Operand(op.which, op.layout, load=op.load), idx_t, ctype, to_elt, mn, k, base)
        chunks = stage_code(Operand(op.which, op.layout, address=op.address), idx_t, ctype, to_elt, mn, k, base)
        return (f"if ((reinterpret_cast<unsigned long long>({base}) & 15) == 0) {{\n{_indent(chunks, 2)}\n"
                f"}} else {{\n{_indent(per_element, 2)}\n}}")
    tile, vmn, vk, val = _names(op.which)
    origin = "m0" if op.which == "A" else "n0"
    if op.is_async:
        if op.layout == "k":          # 64 rows x 2 chunks: thread -> (row, chunk)
            coords = (f"const int r = threadIdx.x >> 1, c = threadIdx.x & 1;\n"
                      f"const {idx_t} {vmn} = {origin} + r, {vk} = k0 + {CHUNK} * c;")
            slot = "aotc_swz_k16(r, c)"
        else:                          # 16 rows (k) x 8 chunks
            coords = (f"const int r = threadIdx.x >> 3, c = threadIdx.x & 7;\n"
                      f"const {idx_t} {vmn} = {origin} + {CHUNK} * c, {vk} = k0 + r;")
            slot = "aotc_swz_mn64(r, c)"
        return (f"{{\n{_indent(coords, 2)}\n"
                f"  const {ctype} *src = {base};\n"
                f"  unsigned nbytes = 0;\n"
                f"  if ({vmn} < {mn} && {vk} < {k}) {{\n{op.address}\n  }}\n"
                f"  aotc_cp_async_16(&{tile}[st][{slot}], src, nbytes);\n}}")
    if op.layout == "k":              # e -> (row, kk): 16 consecutive k of a row per half-warp
        coords = (f"const int r = e >> 4, kk = e & 15;\n"
                  f"const {idx_t} {vmn} = {origin} + r, {vk} = k0 + kk;")
        slot = "aotc_swz_k16(r, kk >> 3) + (kk & 7)"
    else:                              # e -> (kk, col): 32 consecutive m/n of a k row per warp
        coords = (f"const int r = e >> 6, col = e & 63;\n"
                  f"const {idx_t} {vmn} = {origin} + col, {vk} = k0 + r;")
        slot = "aotc_swz_mn64(r, col >> 3) + (col & 7)"
    return (f"#pragma unroll\nfor (int l = 0; l < 8; ++l) {{\n"
            f"  const int e = threadIdx.x + 128 * l;\n{_indent(coords, 2)}\n"
            f"  float {val} = 0.0f;\n"
            f"  if ({vmn} < {mn} && {vk} < {k}) {{\n{op.load}\n  }}\n"
            f"  {tile}[st][{slot}] = {to_elt}({val});\n}}")


def fragment_code(op: Operand) -> str:
    """Code reading the warp's fragments of stage `cur`: af[2][4] for A, bf[4][2] for B (mma.m16n8k16)."""
    if op.which == "A":               # af[i] = 4 matrices: (rows +0/+8) x (k 0-7 / 8-15)
        if op.layout == "k":
            addr = "aotc_swz_k16(wm + 16 * i + (lane & 7) + 8 * (mi & 1), mi >> 1)"
            call = "aotc_ldmatrix_x4"
        else:
            addr = "aotc_swz_mn64((lane & 7) + 8 * (mi >> 1), (wm >> 3) + 2 * i + (mi & 1))"
            call = "aotc_ldmatrix_x4_trans"
        return (f"#pragma unroll\nfor (int i = 0; i < 2; ++i) {{\n  const int mi = lane >> 3;\n"
                f"  {call}(af[i], &As[cur][{addr}]);\n}}")
    if op.layout == "k":              # bf[j], bf[j+1] = 4 matrices: (columns j / j+1) x (k 0-7 / 8-15)
        addr = "aotc_swz_k16(wn + 8 * (j + (mi >> 1)) + (lane & 7), mi & 1)"
        call = "aotc_ldmatrix_x4"
    else:
        addr = "aotc_swz_mn64((lane & 7) + 8 * (mi & 1), (wn >> 3) + j + (mi >> 1))"
        call = "aotc_ldmatrix_x4_trans"
    return (f"#pragma unroll\nfor (int j = 0; j < 4; j += 2) {{\n  const int mi = lane >> 3;\n  unsigned r4[4];\n"
            f"  {call}(r4, &Bs[cur][{addr}]);\n"
            f"  bf[j][0] = r4[0];\n  bf[j][1] = r4[1];\n  bf[j + 1][0] = r4[2];\n  bf[j + 1][1] = r4[3];\n}}")


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line else line for line in text.split("\n"))


def store_slot(epilogue: str, idx_t: str, m, n, registers: bool) -> str:
    """dot_mma.cu's `store` slot: the epilogue through shared memory (coalesced along n), or straight from
    the accumulator registers where the epilogue needs their layout (`registers`: a gated epilogue)."""
    part = "mma_store_regs.part" if registers else "mma_store_smem.part"
    return instantiate(part, dict(epilogue=epilogue, idx_t=idx_t, m=m, n=n), indent=2)


def staging_slots(a: Operand, b: Operand, idx_t: str, ctype: str, to_elt: str, m, n, k,
                  base_a: str, base_b: str) -> dict:
    """The dot_mma.cu slots for this pair of operands (the store slot aside)."""
    return dict(smem_bytes=max(2 * STAGES * 64 * 16 * 2, 64 * 72 * 4), stage_a=_indent(stage_code(a, idx_t, ctype, to_elt, str(m), str(k), base_a), 6),
                stage_b=_indent(stage_code(b, idx_t, ctype, to_elt, str(n), str(k), base_b), 6),
                frag_a=_indent(fragment_code(a), 6), frag_b=_indent(fragment_code(b), 6))
