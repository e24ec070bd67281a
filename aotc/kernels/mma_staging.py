"""How the f16/bf16 tensor-core GEMM (templates/dot_mma.cu) stages its operands and reads its fragments.

Each 64-deep K stage of A (the block tile's bm rows of M) and B (its bn columns of N; `Operand.extent`,
64 or 32, split_k.MMA_TILES, or 128 for a "k" B, split_k.ROW_TILE) goes into one of two stage buffers in
shared memory as a tile of b16 in aotc_async.cuh's XOR swizzle (aotc_swz_mn64), laid out by which dimension
is contiguous in the operand's memory:
- "k":  `extent` rows (m or n) of 64 k values, the fragments read by ldmatrix;
- "mn": 64 rows (k) of `extent` m or n values, the fragments read by ldmatrix.trans.
Either tile is stored as a flat run of 128-byte physical rows (64 b16, 8 chunks), each permuting its chunks
by XOR (row % 8): a 32-wide "mn" tile puts two k rows in one physical row. Either is conflict-free for the
16-byte writes of a quarter-warp along a physical row and for the 8 rows one ldmatrix phase reads (for the
32-wide tile: 4 physical rows, each k row's two halves 4 chunks apart). An operand that is a plain load of
a kernel parameter whose contiguous run is a whole number of 16-byte chunks is staged by cp.async, 16 bytes
a thread, extent / 16 chunks a thread a stage ("async");
where its address is linear in k (`k_stride`), each chunk's pointer is computed once before the loop and
advanced by the stage's k. Anything else (a fused prologue, a converted or gathered load, odd sizes) is
computed per element by the region's load code ("elem"), walking the contiguous dimension so that a warp's
loads are coalesced.

A caller may bind an input that is not 16-byte aligned: the kernel then runs a second instantiation of
the K loop (mainloop_code) that stages every async operand per element. That copy is cold, so its staging
is a rolled loop: the profile's main loop (the innermost loop with the mma instructions, profile/sass.py)
is the aligned one, the loop that runs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from aotc.kernels.template import instantiate

CHUNK = 8          # b16 elements in a 16-byte chunk
BK = 64            # K per pipeline stage
STAGES = 2         # stage buffers of dot_mma.cu (2 x (bm + bn) x 128 bytes a stage: 32 KiB at 64x64)
THREADS = 128      # dot_mma.cu's block: 4 warps in a 2x2 grid of (bm / 2) x (bn / 2) warp tiles
ROW_MARK = "@"     # in Operand.row_setup and .address: the index of the thread's chunk row


@dataclass
class Operand:
    """One GEMM operand's staging: `which` 'A' or 'B', `layout` 'k' or 'mn', and its load code.

    `address` (async) is code that sets `src` to the chunk's first element and `nbytes` = 16, given the
    operand's coordinates (it leaves nbytes 0 for a chunk that reads nothing: a conv's padding); `load`
    (elem) is code that sets the element's f32 value. The coordinate variables are
    (am, ak) for A, (bn, bk) for B; the value is `a` for A, `bv` for B. `k_stride`, where given, is the
    C expression of the elements between k and k + 1 at the same m (or n): the address is then linear
    in k and hoisted out of the loop; `mn_stride` likewise between m and m + 1 (n and n + 1): the thread's
    four chunks then share one pointer. `row_setup` (async, not linear in k) is code run before the loop for
    each of the thread's chunk rows, whose names carry ROW_MARK, replaced by the chunk's index; `address`
    may use them (a conv's pixel coordinates); such an operand's `stage_setup` runs once a stage before its
    rows (the k coordinates the rows share), and its `address` sets src and nbytes without a branch."""
    which: str
    layout: str
    address: str | None = None
    load: str | None = None
    k_stride: str | None = None
    mn_stride: str | None = None
    row_setup: str | None = None
    stage_setup: str = ""
    extent: int = 64         # rows of m (A) or columns of n (B) in the block tile (staging_slots sets it)
    base: int = 0            # bytes from aotc_smem to the operand's stage buffers (staging_slots sets it)

    @property
    def width(self) -> int:
        """b16 elements of one logical row of the stage tile: 64 k ("k") or `extent` m/n values ("mn")."""
        return BK if self.layout == "k" else self.extent

    @property
    def rows(self) -> int:
        """16-byte chunks each thread stages per stage (the tile's extent x 64 b16 over 128 threads)."""
        return self.extent * BK // CHUNK // THREADS

    @property
    def stage_bytes(self) -> int:
        return self.extent * BK * 2

    @property
    def chunk_stride(self) -> str | None:
        """Elements between the thread's consecutive chunks (16 physical rows of the tile apart: 16 rows of
        m/n, or 16 x 64 / width rows of k), if constant."""
        step = self.k_stride if self.layout == "mn" else self.mn_stride
        rows = 16 * BK // self.width if self.layout == "mn" else 16
        return f"{rows} * ({step})" if self.k_stride and step else None

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


def _chunk_coords(op: Operand, l: int | str, idx_t: str, k0: str) -> str:
    """(r, c): logical row and chunk of the tile this thread stages as its `l`-th chunk; the operand's
    coordinates.

    Thread x takes chunk x % 8 of physical rows x / 8 + 16 l: a quarter-warp writes one 128-byte row
    (of a 32-wide "mn" tile: k rows 2p and 2p + 1, 4 chunks each)."""
    _, vmn, vk, _ = _names(op.which)
    origin = "m0" if op.which == "A" else "n0"
    row = f"(threadIdx.x >> 3) + {16 * l}" if isinstance(l, int) else f"(threadIdx.x >> 3) + 16 * {l}"
    per = op.width // CHUNK             # chunks of a logical row
    if per == 8:
        head = f"const int r = {row}, c = threadIdx.x & 7;\n"
    else:
        head = (f"const int r = {8 // per} * ({row}) + ((threadIdx.x & 7) >> {per.bit_length() - 1}), "
                f"c = threadIdx.x & {per - 1};\n")
    if op.layout == "k":
        return head + f"const {idx_t} {vmn} = {origin} + r, {vk} = {k0} + {CHUNK} * c;"
    return head + f"const {idx_t} {vmn} = {origin} + {CHUNK} * c, {vk} = {k0} + r;"


def _inside(vmn: str, mn: str, vk: str | None = None, tile: int = 64) -> str:
    """The condition that (vmn, vk) lies in the operand; a static extent that is a whole number of tiles
    (`tile` rows of m or columns of n) needs no m (n) test, since every block's rows lie inside it."""
    terms = [] if mn.isdigit() and int(mn) % tile == 0 else [f"{vmn} < {mn}"]
    terms += [f"{vk} < kend"] if vk else []
    return " && ".join(terms) or "true"


def _dst(op: Operand, l: int | str) -> str:
    """Bytes from the stage buffers' start to the thread's `l`-th chunk of buffer `st` (16 rows apart)."""
    step = f"{l} * 2048" if isinstance(l, str) else str(2048 * l)
    return f"{op.which}_s + st * {op.stage_bytes} + {step}"


def _pointer(op: Operand, l: int) -> tuple[str, str]:
    """The names of chunk `l`'s offset from the operand's base and of its k bound: kend, or kbeg where
    its row lies past the operand (it then reads nothing)."""
    return f"{op.which}_p{l}", f"{op.which}_kl{l}"


def setup_code(op: Operand, idx_t: str, ctype: str, mn: str, base: str) -> str:
    """Before the loop, for an async operand: the thread's offset in the tile; where the address is linear
    in k, each of the thread's chunks' pointer at k = kbeg (one pointer where the chunks are a constant
    stride apart) and its k bound (kbeg where its row lies past `mn`: it reads nothing)."""
    if not op.is_async:
        return ""
    vmn = _names(op.which)[1]
    out = [f"const unsigned {op.which}_s = aotc_swz_mn64(threadIdx.x >> 3, threadIdx.x & 7) * 2 + {op.base};"]
    if op.row_setup:            # a row past `mn` reads nothing: its k bound is kbeg (one compare a stage)
        origin = "m0" if op.which == "A" else "n0"
        out += [op.row_setup.replace(ROW_MARK, str(l)) + f"\nconst {idx_t} {op.which}_kl{l} = "
                f"{_inside(f'{origin} + (threadIdx.x >> 3) + {16 * l}', mn, tile=op.extent)} ? kend : kbeg;"
                for l in range(op.rows)]
    if not op.k_stride:
        return "\n".join(out)
    for l in range(op.rows):
        p, ok = _pointer(op, l)
        coords = _indent(_chunk_coords(op, l, idx_t, "kbeg"), 2)
        if op.chunk_stride and l:
            out.append(f"{idx_t} {ok};\n{{\n{coords}\n  {ok} = {_inside(vmn, mn, tile=op.extent)} ? kend : kbeg;\n}}")
            continue
        out.append(f"{idx_t} {p} = 0, {ok} = kbeg;\n{{\n{coords}\n"
                   f"  if ({_inside(vmn, mn, tile=op.extent)}) {{\n    const {ctype} *src = {base};\n    unsigned nbytes = 0;\n"
                   f"{_indent(op.address, 2)}\n    {p} = ({idx_t})(src - {base});\n    {ok} = nbytes ? kend : kbeg;\n  }}\n}}")
    return "\n".join(out)


def stage_code(op: Operand, idx_t: str, ctype: str, to_elt: str, mn: str, base: str,
               rolled: bool = False) -> str:
    """Code staging this thread's share of the stage at `k0` into buffer `st`; `mn` bounds m (or n), kend
    K; `base` is the parameter `src` starts from (the async path's pointer where nothing is read).
    `rolled`: the per-element loop is not unrolled (the cold unaligned-input copy of the loop)."""
    tile, vmn, vk, val = _names(op.which)
    if op.is_async and op.k_stride:
        out = []
        for l in range(op.rows):
            p, ok = _pointer(op, l)
            off = f"{_pointer(op, 0)[0]} + {l} * {op.chunk_stride}" if op.chunk_stride and l else p
            out.append(f"{{\n{_indent(_chunk_coords(op, l, idx_t, 'k0'), 2)}\n"
                       f"  aotc_cp_async_16_at(aotc_smem, {_dst(op, l)}, {base} + ({off} + (k0 - kbeg) * ({op.k_stride})), "
                       f"{vk} < {ok} ? 16u : 0u);\n}}")
        return "\n".join(out)
    if op.is_async and op.row_setup:
        rows = "\n".join(
            f"{{\n{_indent(_chunk_coords(op, l, idx_t, 'k0'), 2)}\n  const {ctype} *src;\n  unsigned nbytes;\n"
            f"{op.address.replace(ROW_MARK, str(l))}\n  if (!({vk} < {op.which}_kl{l})) nbytes = 0;\n"
            f"  aotc_cp_async_16_at(aotc_smem, {_dst(op, l)}, src, nbytes);\n}}" for l in range(op.rows))
        return f"{{\n{_indent(op.stage_setup, 2)}\n{_indent(rows, 2)}\n}}"
    if op.is_async:
        return (f"#pragma unroll\nfor (int l = 0; l < {op.rows}; ++l) {{\n"
                + _indent(_chunk_coords(op, "l", idx_t, "k0"), 2) + "\n"
                f"  const {ctype} *src = {base};\n"
                f"  unsigned nbytes = 0;\n"
                f"  if ({_inside(vmn, mn, vk, op.extent)}) {{\n{op.address}\n  }}\n"
                f"  aotc_cp_async_16_at(aotc_smem, {_dst(op, 'l')}, src, nbytes);\n}}")
    # element e of the tile is its flat position: e -> (row, kk) = (e / width, e % width), 32 consecutive
    # k of a row ("k") or m/n of a k row ("mn") per warp
    shift, origin = op.width.bit_length() - 1, "m0" if op.which == "A" else "n0"
    coords = f"const int r = e >> {shift}, kk = e & {op.width - 1};\n"
    if op.layout == "k":
        coords += f"const {idx_t} {vmn} = {origin} + r, {vk} = k0 + kk;"
    else:
        coords += f"const {idx_t} {vmn} = {origin} + kk, {vk} = k0 + r;"
    slot = "aotc_swz_mn64(r, kk >> 3) + (kk & 7)" if op.width == BK else "aotc_swz_mn64(e >> 6, (e >> 3) & 7) + (e & 7)"
    unroll = "#pragma unroll 1" if rolled else "#pragma unroll"
    return (f"{unroll}\nfor (int l = 0; l < {op.extent * BK // THREADS}; ++l) {{\n"
            f"  const int e = aotc_fresh(threadIdx.x + 128 * l);\n{_indent(coords, 2)}\n"
            f"  float {val} = 0.0f;\n"
            f"  if ({_inside(vmn, mn, vk, op.extent)}) {{\n{op.load}\n  }}\n"
            f"  {tile}[st][{slot}] = {to_elt}({val});\n}}")


# Fragment reads: each lane's ldmatrix row, in bytes from the start of the operand's stage buffers, splits
# into a part that the swizzle makes lane-dependent, kept in registers {A,B}_f[] before the loop, and
# constants (the stage buffer, and 16 tile rows: 2048 bytes) that fold into the instruction. A "k" tile's
# k16 steps move along its chunks (XOR-swizzled: one register each); an "mn" tile's move 16 k rows down (a
# constant: 8 or 16 physical rows, which keep each row's swizzle), and its matrices 16 columns apart are
# the registers (extent / 32 of them: the warp tile's m16 tiles, or pairs of n8 tiles). mi = lane / 8
# numbers the lane's matrix.


def fragment_setup(op: Operand) -> str:
    """The registers {A,B}_f[4] ("k": per k16 step) or [extent / 32] ("mn": per 16 columns) of
    fragment_code."""
    x = "wm" if op.which == "A" else "wn"
    if op.layout == "k":              # A: rows +0/+8 by mi & 1, k 0-7/8-15 by mi >> 1; B the other way
        row, half = ("((lane >> 3) & 1)", "(lane >> 4)") if op.which == "A" else ("(lane >> 4)", "((lane >> 3) & 1)")
        return (f"unsigned {op.which}_f[4];\n#pragma unroll\nfor (int ks = 0; ks < 4; ++ks)\n"
                f"  {op.which}_f[ks] = (({x} + 8 * {row} + (lane & 7)) * 64 + (((2 * ks + {half}) ^ (lane & 7)) << 3)) * 2;")
    row, col = ("(lane >> 4)", "((lane >> 3) & 1)") if op.which == "A" else ("((lane >> 3) & 1)", "(lane >> 4)")
    n = op.extent // 32
    if op.width == BK:
        return (f"unsigned {op.which}_f[{n}];\n#pragma unroll\nfor (int h = 0; h < {n}; ++h)\n"
                f"  {op.which}_f[h] = (((lane & 7) + 8 * {row}) * 64 + (((({x} >> 3) + 2 * h + {col}) ^ (lane & 7)) << 3)) * 2;")
    return (f"unsigned {op.which}_f[{n}];\n#pragma unroll\nfor (int h = 0; h < {n}; ++h) {{\n"
            f"  const int e = ((lane & 7) + 8 * {row}) * {op.width} + {x} + 8 * (2 * h + {col});   // (k, m/n) flat\n"
            f"  {op.which}_f[h] = aotc_swz_mn64(e >> 6, (e >> 3) & 7) * 2;\n}}")


def fragment_code(op: Operand) -> str:
    """Code reading the warp's fragments of k16 step `ks` of stage `cur` into af[nb] (A: extent / 32 x 4
    registers) or bf[nb] (B: extent / 16 x 2), the mma.m16n8k16 layouts; `i` (A) or `j / 2` (B) is 16 rows
    or columns on."""
    trans = "_trans" if op.layout == "mn" else ""
    if op.layout == "k":
        off = f"{op.which}_f[ks] + cur * {op.stage_bytes} + {'i' if op.which == 'A' else '(j >> 1)'} * 2048"
    else:
        off = f"{op.which}_f[{'i' if op.which == 'A' else 'j >> 1'}] + cur * {op.stage_bytes} + ks * {32 * op.width}"
    smem = f"aotc_smem + {op.base}" if op.base else "aotc_smem"
    if op.which == "A":
        return (f"#pragma unroll\nfor (int i = 0; i < {op.extent // 32}; ++i)\n"
                f"  aotc_ldmatrix_x4{trans}_at(af[nb][i], {smem}, {off});")
    return (f"#pragma unroll\nfor (int j = 0; j < {op.extent // 16}; j += 2) {{\n  unsigned r4[4];\n"
            f"  aotc_ldmatrix_x4{trans}_at(r4, {smem}, {off});\n"
            f"  bf[nb][j][0] = r4[0];\n  bf[nb][j][1] = r4[1];\n  bf[nb][j + 1][0] = r4[2];\n  bf[nb][j + 1][1] = r4[3];\n}}")


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line and not line.startswith("#") else line for line in text.split("\n"))


def tile_slots(tile: tuple[int, int] = (64, 64)) -> dict:
    """mma_setup.part's and dot_mma.cu's slots for a (bm, bn) block tile: 4 warps in a 2x2 grid of
    (bm / 2) x (bn / 2) warp tiles, each mi x nj m16n8 accumulators; which block index walks M
    (`m_fastest`)."""
    bm, bn = tile
    m_block, n_block = ("blockIdx.x", "blockIdx.y") if m_fastest(tile) else ("blockIdx.y", "blockIdx.x")
    return dict(bm=bm, bn=bn, warp_m=bm // 2, warp_n=bn // 2, mi=bm // 32, nj=bn // 16, m_block=m_block,
                n_block=n_block)


def m_fastest(tile: tuple[int, int]) -> bool:
    """The grid's x walks M (not N): split_k.ROW_TILE's, taken for a GEMM whose N is wide and M small
    (GPT-2's LM head: 4 row tiles by 393 column tiles at batch 1). Consecutive blocks then share their B
    tile, and its 77 MB of weights stream from DRAM once rather than once a row of tiles (more than L2)."""
    return tile[1] > 64


def min_blocks(tile: tuple[int, int]) -> int:
    """dot_mma.cu's __launch_bounds__ minimum: 4 for split_k.ROW_TILE, which ptxas otherwise gives 130
    registers (3 blocks an SM: 19% occupancy; held to 128 it spills nothing and its sm_90 K loop's HMMA
    share rises 32% -> 35%), 1 for the others (the template's comment)."""
    return 4 if tile[1] > 64 else 1


def c_stride(bn: int) -> int:
    """Row stride of dot_mma.cu's f32 output tile Cs: bn + 8 floats, so that a half-warp's float2 stores
    (rows g, columns 2t) hit 16 distinct bank pairs."""
    return bn + 8


def store_slot(epilogue: str, idx_t: str, m, n, registers: bool, tile: tuple[int, int] = (64, 64),
               sector: int = 0) -> str:
    """dot_mma.cu's `store` slot: the epilogue through shared memory (coalesced along n), or straight from
    the accumulator registers where the epilogue needs their layout (`registers`: a gated epilogue).
    `sector`: the output's elements per 32-byte sector where its rows of `n` start off the sector grid
    (`off_grid_rows`); its warps then store windows that start on the grid (mma_store_smem_sectors.part)."""
    t = tile_slots(tile)
    slots = dict(epilogue=epilogue, idx_t=idx_t, m=m, n=n, c_stride=c_stride(tile[1]))
    if registers:
        slots.update(mi=t["mi"], nj=t["nj"])
        return instantiate("mma_store_regs.part", slots, indent=2)
    slots.update(tile_elems=tile[0] * tile[1], shift=tile[1].bit_length() - 1, mask=tile[1] - 1)
    if sector:
        return instantiate("mma_store_smem_sectors.part", dict(slots, bn=tile[1], sector=sector), indent=2)
    return instantiate("mma_store_smem.part", slots, indent=2)


def off_grid_rows(n, itemsize: int) -> int:
    """Elements per 32-byte sector of an output whose rows of `n` elements (static) start off the sector
    grid, else 0: the row-major output of a GEMM with N = 50257 (GPT-2's vocabulary) in f32 or f16."""
    return 32 // itemsize if isinstance(n, int) and (n * itemsize) % 32 and 32 % itemsize == 0 else 0


def mainloop_code(a: Operand, b: Operand, idx_t: str, ctype: str, to_elt: str, elt: str, m, n,
                  base_a: str, base_b: str, rolled: bool = False) -> str:
    """One instantiation of mma_mainloop.part for this pair of operands (4 spaces deep)."""
    pad = 4
    stage_a = stage_code(a, idx_t, ctype, to_elt, str(m), base_a, rolled)
    stage_b = stage_code(b, idx_t, ctype, to_elt, str(n), base_b, rolled)

    def step(cur: int) -> str:
        return instantiate("mma_kstep.part", dict(
            cur=cur, idx_t=idx_t, elt=elt, mi=a.extent // 32, nj=b.extent // 16, stage_a=_indent(stage_a, 4), stage_b=_indent(stage_b, 4),
            frag_a=_indent(fragment_code(a), 6), frag_b=_indent(fragment_code(b), 6)), indent=pad + 2)
    return instantiate("mma_mainloop.part", dict(
        idx_t=idx_t, even=step(0), odd=step(1),
        setup=_indent("\n".join(s for s in (setup_code(a, idx_t, ctype, str(m), base_a),
                                            setup_code(b, idx_t, ctype, str(n), base_b),
                                            fragment_setup(a), fragment_setup(b)) if s), pad),
        stage_a=_indent(stage_a, pad + 2), stage_b=_indent(stage_b, pad + 2)), indent=pad)


def _per_element(op: Operand) -> Operand:
    return replace(op, address=None, k_stride=None, row_setup=None) if op.is_async and op.load is not None else op


def staging_slots(a: Operand, b: Operand, idx_t: str, ctype: str, to_elt: str, elt: str, m, n,
                  base_a: str, base_b: str, tile: tuple[int, int] = (64, 64)) -> dict:
    """The dot_mma.cu slots for this pair of operands and a (bm, bn) block tile (the store slot aside):
    the tile's, the stage buffers', the K loop, and where an async operand has a per-element load too, a
    kernel-level branch on its pointer's alignment between that loop and a copy staging per element (a
    caller may bind an unaligned input)."""
    bm, bn = tile
    a = replace(a, extent=bm, base=0)
    b = replace(b, extent=bn, base=STAGES * a.stage_bytes)
    fast = mainloop_code(a, b, idx_t, ctype, to_elt, elt, m, n, base_a, base_b)
    checks = [f"(reinterpret_cast<unsigned long long>({base}) & 15) == 0"
              for op, base in ((a, base_a), (b, base_b)) if op.is_async and op.load is not None]
    if checks:
        slow = mainloop_code(_per_element(a), _per_element(b), idx_t, ctype, to_elt, elt, m, n, base_a, base_b,
                             rolled=True)
        loop = f"  if ({' && '.join(checks)}) {{\n{fast}\n  }} else {{\n{slow}\n  }}"
    else:
        loop = f"  {{\n{fast}\n  }}"
    stages = STAGES * (a.stage_bytes + b.stage_bytes)
    return dict(tile_slots(tile), min_blocks=min_blocks(tile), c_stride=c_stride(bn),
                smem_bytes=max(stages, bm * c_stride(bn) * 4), mainloop=loop,
                a_stage=bm * BK, b_stage=bn * BK, b_base=b.base)
