"""What every kernel family shares: the Kernel record, KernelBuilder and `unravel`.

A code generator (codegen*.py) takes a KernelBuilder for its region: it knows the
kernel's pointer parameters (slices of inputs read as views), hands out expression
emitters over the region's members, maps the anchor's index to the root's through
the epilogue, and `finish` fills the family's template (template.py), names the
kernel by a hash of its text and counts its bytes and FLOPs. `unravel` declares the
coordinates of a flat index, the index math every family needs. The helpers at the
end are shared by several families (reductions' accumulator types and identities;
GEMM operand loads and epilogues for the SIMT, tensor-core and conv GEMMs), so no
family module imports another's.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from aotc.fusion.region import Region
from aotc.ir import dims as D
from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph, Value
from aotc.kernels import split_k
from aotc.kernels.aliasing import may_alias_output
from aotc.kernels.band_constants import band_constants
from aotc.kernels.emitter import Emitter, linear, store_expr
from aotc.kernels.template import instantiate

MAX_GRID = 4096          # blocks of a grid-stride launch; the loops cover the rest
_NAME_MARK = "__aotc_kernel_name__"   # the name slot while the text is hashed; replaced by the hash name


@dataclass
class Kernel:
    """One generated kernel and how to launch it."""
    name: str
    source: str
    params: list[Value]            # pointer parameters: region inputs, then the output
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    region: Region
    bytes: int
    flops: int
    splits: int = 1                # split-K: extra params (f32 workspace, tile counters) follow `out`
    workspace: int = 0             # bytes of that workspace
    counters: int = 0              # tile counters (u32) it uses in the arena's zeroed tail
    views: dict = field(default_factory=dict)   # param -> (input it is a slice of, byte offset)
    extra_outputs: list = field(default_factory=list)   # written after `out` (region.extra_roots)
    dims: list = field(default_factory=list)    # dynamic dim names passed by value after the pointers
    bytes_expr: object = None      # `bytes` and `flops` as expressions of the dynamic dims (ints when static);
    flops_expr: object = None      # the ints above are their values at the top of the ranges
    norm_phases: list = field(default_factory=list)   # a GEMM's norm prologue: the reduce nodes of each read of
                                                       # the row (a one-pass LayerNorm: both in one phase)
    derived: dict = field(default_factory=dict)  # params that are constants computed by codegen -> their arrays
                                                 # (a norm folded into the weights, norm_fold.py)

    def sources(self) -> list[Value]:
        """The materialized values the kernel reads (a view's source in its place)."""
        return [self.views[v][0] if v in self.views else v for v in self.params[:-1]]

    @property
    def uses_fp16(self) -> bool:
        return any(v.dtype in (dtypes.f16, dtypes.bf16) for v in self.params)


def _idx_t(region: Region) -> str:
    values = list(region.inputs) + [region.root] + [v for n in region.nodes for v in n.outputs]
    return "long long" if any(D.upper(v.type.size) >= 2**31 for v in values) else "int"


def unravel(em: Emitter, flat: str, shape, prefix: str) -> list[str]:
    """Declare `prefix<i>` = coordinate i of row-major offset `flat` in `shape`."""
    names = []
    stride = 1
    strides_ = []
    for d in reversed(shape):
        strides_.append(stride)
        stride *= d
    strides_.reverse()
    for i, (d, s) in enumerate(zip(shape, strides_)):
        name = f"{prefix}{i}"
        e = flat if s == 1 else f"{flat} / {s}"
        if i > 0:
            e = f"({e}) % {d}"
        em.emit(f"const {em.idx_t} {name} = {e};")
        names.append(name if d != 1 else "0")
    return names


class KernelBuilder:
    """Shared state for generating one region's kernel: parameters, views, emitters, the template fill."""

    def __init__(self, graph: Graph, region: Region, producer, split_k: bool = True):
        self.graph = graph
        self.split_k = split_k
        self.region = region
        self.producer = producer
        self.idx_t = _idx_t(region)
        self.norm_phases: list[list] = []     # set by codegen_norm_prologue.norm_row_stats
        self.epilogue_overrides: dict = {}    # an epilogue norm's row stats (norm_row_stats), for dot_epilogue
        self.fold = None                      # a norm folded into the weights (apply_fold)
        small = {v for v in region.inputs if v in graph.constants and v.type.size == 1}
        # constant masks that are a comparison of indices (band_constants.py) are computed, not loaded
        self.bands = band_constants(graph, region, [v for v in region.inputs if v not in small])
        params = [v for v in region.inputs if v not in small and v not in self.bands]
        # a slice of an input is read through a pointer to its first element (a view) with the
        # slice's start taken out of the index math, so kernels that differ only in where they
        # slice (an RNN's steps) are one kernel
        # A slice of such a view is a view too (a bidirectional RNN slices its direction, then the
        # step): offsets add up and strides multiply, indices keep the source's layout.
        self.views: dict[Value, tuple[Value, int]] = {}
        self.view_layout: dict[Value, tuple[tuple, tuple]] = {}     # view -> (source shape, strides)
        viewed = set()
        for n in region.nodes:        # graph order: an outer slice is seen before a slice of it
            # a slice whose start moves with a dynamic dim (x[:, -1] of a dynamic sequence) stays index
            # math: a view's offset is a fixed byte offset in the launch plan
            src = (n.inputs[0] if n.op == "slice" and n is not region.anchor and
                   D.is_static(slice_offset(n)) else None)
            if src in params:
                self.views[n.outputs[0]] = (src, slice_offset(n))
                self.view_layout[n.outputs[0]] = (src.shape, tuple(n.attrs["stride"]))
            elif src in self.views:
                root, offset = self.views[src]
                shape, strides = self.view_layout[src]
                start = [a * k for a, k in zip(n.attrs["start"], strides)]
                self.views[n.outputs[0]] = (root, offset + _linear_offset(start, shape) * root.dtype.itemsize)
                self.view_layout[n.outputs[0]] = (shape, tuple(a * k for a, k in zip(n.attrs["stride"], strides)))
            else:
                continue
            viewed.add(n)
        still_read = {v for n in region.nodes if n not in viewed for v in n.inputs} | {region.root}
        self.params = []
        for v in params:
            if v in still_read:
                self.params.append(v)
            self.params += [w for w, (src, _) in self.views.items() if src is v and w in still_read]
        self.views = {w: view for w, view in self.views.items() if w in self.params}   # what the kernel reads
        self.param_names = {v: f"p{i}" for i, v in enumerate(self.params)}
        self.consts = {v: graph.constants[v] for v in small}
        anchor = region.anchor
        self.members = [n for n in region.nodes if n is not anchor]

    def apply_fold(self, fold) -> None:
        """Bind the params to a norm fold (norm_fold.NormFold): the weight's param carries W' (the rhs's
        index math still names the weight's Value, which now resolves to W'), the correction vectors
        follow, and inputs only the folded chain read (gamma, beta) leave."""
        self.fold = fold
        self.params = [fold.folded if v is fold.weight else v for v in self.params if v not in fold.unread]
        self.params += [c for _, c in fold.corrections]
        self.param_names = {v: f"p{i}" for i, v in enumerate(self.params)}
        self.param_names[fold.weight] = self.param_names[fold.folded]

    def operands(self) -> tuple[Value, Value]:
        """The anchor's (lhs, rhs) as the GEMM reads them: a folded norm's raw input as the lhs."""
        lhs, rhs = self.region.anchor.inputs
        return (self.fold.x if self.fold is not None else lhs), rhs

    def dense(self, v: Value) -> bool:
        """Whether param `v`'s element i sits at its pointer + i: not a view, or a view that is one run of
        its source (unit strides, whole trailing dims, size-1 leading dims), such as rows [a, b) of a matrix.
        A column slice (Q, K and V out of one merged GEMM's rows) is not."""
        if v not in self.views:
            return True
        source, strides = self.view_layout[v]
        dims = list(zip(v.shape, source, strides))
        while dims and dims[0][0] == 1:
            dims.pop(0)
        return all(k == 1 for _, _, k in dims) and all(n == m for n, m, _ in dims[1:])

    def emitter(self, indent: int, overrides=None) -> Emitter:
        return Emitter(self.members, self.producer, self.param_names, self.consts, bands=self.bands,
                       overrides=overrides, idx_t=self.idx_t, indent=indent, views=self.view_layout)

    def signature(self) -> str:
        # An input the output may overwrite in place (aliasing.py) and `out` are plain pointers.
        shared = set(may_alias_output(self.region, self.params))
        ps = [f"const {v.dtype.c} *{'' if v in shared else '__restrict__ '}{self.param_names[v]}"
              for v in self.params]
        ps.append(f"{self.region.root.dtype.c} *{'' if shared else '__restrict__ '}out")
        ps += [f"{v.dtype.c} *__restrict__ out{j + 1}" for j, v in enumerate(self.region.extra_roots)]
        return ", ".join(ps)

    def root_index(self, em: Emitter, idx) -> list[str]:
        """The root's index for anchor-output index `idx`, through the epilogue's reshapes and transposes.

        The epilogue evaluates the root at that index; walking back, every op maps it to
        `idx` again, where the anchor's value is the accumulator. Elementwise ops keep the
        index, a transpose permutes it, a reshape keeps the linear offset.
        """
        region = self.region
        out = region.anchor.outputs[0]
        for k, n in enumerate(_epilogue_path(region, self.producer)):
            if n.op == "transpose":
                idx = [idx[d] for d in n.attrs["permutation"]]
            elif n.op == "reshape":
                em.emit(f"const {self.idx_t} lin{k} = {linear(idx, n.inputs[0].shape)};")
                idx = unravel(em, f"lin{k}", n.outputs[0].shape, f"e{k}_")
        if len(idx) != region.root.type.rank:       # no path (should not happen): the linear offset
            em.emit(f"const {self.idx_t} lin = {linear(idx, out.shape)};")
            idx = unravel(em, "lin", region.root.shape, "e")
        return idx

    def row_major_root(self) -> bool:
        """The root holds the anchor's output at its own linear offsets: no transpose on the epilogue's path
        (a reshape keeps the offset)."""
        return all(n.op != "transpose" for n in _epilogue_path(self.region, self.producer))

    def store_root(self, em: Emitter, idx, overrides=None):
        root = self.region.root
        val = em.value(root, idx)
        em.emit(store_expr("out", linear(idx, root.shape), val, root.dtype))

    def _traffic(self):
        """The kernel's modelled bytes: every parameter's touched bytes and the outputs (an expression of
        the dynamic dims for a dynamic shape)."""
        region = self.region
        return sum(touched_bytes(v, region.nodes) for v in self.params) + region.root.type.nbytes \
            + sum(v.type.nbytes for v in region.extra_roots)

    def finish(self, kind: str, slots: dict, grid, block, smem=0, split=None) -> Kernel:
        """The Kernel: template `<kind>.cu` filled with `slots` and the common ones (name, params, idx_t, what).

        `split` = (splits, workspace bytes, tile counters) of a kernel doing its own split handoff.
        """
        slots, params, splits, extra, counters = dict(slots), self.signature(), 1, 0, 0
        if split is not None:
            splits, extra, counters = split
            params += ", float *__restrict__ aotc_ws, unsigned int *__restrict__ aotc_sem"
        if kind in split_k.GEMM_TEMPLATES:
            slots.setdefault("row_stats", "")          # a norm prologue's pre-pass (codegen_norm_prologue.py)
            B, M, N, K = (slots[key] for key in ("batch", "m", "n", "k"))
            tiling = slots.pop("tiling", None)          # dot.cu's callers chose it (simt_tiling)
            if tiling is None:
                tiling = split_k.gemm_tiling(kind, B, M, N, K, self._traffic(), self.split_k)
            slots.update(split_k.split_slots(kind, B, M, N, K, self.idx_t, tiling))
            splits = tiling.splits
            if splits > 1:
                grid = (grid[0], grid[1], B * splits)
                params += ", float *__restrict__ aotc_ws, unsigned int *__restrict__ aotc_sem"
                extra = D.upper(splits * B * M * N * 4)          # f32 partials: L2-resident (see split_k.py)
                counters = D.upper(grid[0] * grid[1] * grid[2] // splits)
        slots = dict(slots, name=_NAME_MARK, params=params, idx_t=self.idx_t,
                     what=self.region.describe().replace("\n", " "))
        text = instantiate(f"{kind}.cu", slots)
        dims = sorted(set(re.findall(r"\baotc_d_(\w+)", text)))       # dynamic sizes the kernel computes with
        if dims:
            text = text.replace(f"{_NAME_MARK}({params})",
                                f"{_NAME_MARK}({params}, {', '.join(f'{self.idx_t} aotc_d_{d}' for d in dims)})")
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        name = f"aotc_{kind}_{digest}"
        text = text.replace(_NAME_MARK, name)
        region = self.region
        bytes_expr = self._traffic()
        flops_expr = sum(ops.node_flops_expr(n.op, n.attrs, [v.type for v in n.inputs], [v.type for v in n.outputs])
                    for n in region.nodes)
        return Kernel(name, text, self.params + [region.root], tuple(grid), tuple(block), smem,
                      region, D.upper(bytes_expr), D.upper(flops_expr), splits, extra, counters, dict(self.views),
                      list(region.extra_roots), dims, bytes_expr, flops_expr, list(self.norm_phases),
                      dict(self.fold.arrays) if self.fold is not None else {})


def _epilogue_path(region: Region, producer) -> list:
    """The epilogue ops from the anchor's output to the root, in order, following anchor-dependent inputs."""
    anchor, deps = region.anchor, set(region.epilogue)
    path, node = [], producer.get(region.root)
    while node is not None and node is not anchor and node in deps:
        path.append(node)
        nxt = [producer.get(v) for v in node.inputs if producer.get(v) is anchor or producer.get(v) in deps]
        node = nxt[0] if nxt else None
    return path[::-1] if node is anchor else []


def slice_offset(n) -> int:
    """Byte offset of a slice's first element in its input (a view's pointer offset)."""
    return _linear_offset(n.attrs["start"], n.inputs[0].shape) * n.inputs[0].dtype.itemsize


def _linear_offset(index, shape) -> int:
    offset, stride = 0, 1
    for i in reversed(range(len(shape))):
        offset += index[i] * stride
        stride *= shape[i]
    return offset


def touched_bytes(v: Value, nodes) -> int:
    """Bytes of input `v` a kernel reads: the rows a gather picks or a slice keeps, else all of v
    (an expression of the dynamic dims for a dynamic shape).

    An embedding lookup reads seq rows of a 50k-row table, an LSTM step one
    time slice; counting the whole tensor would overstate their traffic 100x.
    """
    users = [n for n in nodes if v in n.inputs]
    partial = all((n.op == "gather" and n.inputs[0] is v and v not in n.inputs[1:]) or n.op == "slice"
                  for n in users)
    if not users or not partial:
        return v.type.nbytes
    return D.dmin(v.type.nbytes, sum(n.outputs[0].type.size for n in users) * v.dtype.itemsize)


# -- shared by several families: reductions (reduce, window, chain), GEMM operands and epilogues

def acc_type(dt) -> str:
    """The C type a reduction of `dt` values accumulates in."""
    if dt.is_float:
        return "double" if dt == dtypes.f64 else "float"
    wide = {dtypes.i64: "long long", dtypes.u64: "unsigned long long", dtypes.u32: "unsigned int",
            dtypes.u16: "unsigned int", dtypes.u8: "unsigned int"}
    return wide.get(dt, "int")


def simt_accumulator(dt) -> dict:
    """dot.cu's slots acc_t (its tiles' and accumulators' C type) and mad (one multiply-add).

    f64 operands accumulate in double through an explicit fma: NVRTC's -fmad=true would contract
    `acc += a * b` on the GPU while the host build (no FMA instructions enabled) rounds twice; fma()
    rounds once on both (DFMA, libm's correctly rounded fma). Other floats keep the float
    tile and `+=` (their kernels stay byte-identical)."""
    if dt == dtypes.f64:
        return dict(acc_t="double", mad="acc[i][j] = fma(av[i], bw[j], acc[i][j]);")
    return dict(acc_t="float", mad="acc[i][j] += av[i] * bw[j];")


def multiply_add(dt, acc: str, x: str, y: str) -> str:
    """The C statement adding x * y to `acc`: an explicit fma for f64 (see simt_accumulator)."""
    if dt == dtypes.f64:
        return f"{acc} = fma({x}, {y}, {acc});"
    return f"{acc} += {x} * {y};"


def reduce_identity(kind: str, dt) -> str:
    """The C literal a `kind` reduction of `dt` values starts from."""
    if kind == "sum":
        return "0" if not dt.is_float else "0.0f"
    if kind == "prod":
        return "1" if not dt.is_float else "1.0f"
    if dt.is_float:
        return "(-AOTC_INF)" if kind == "max" else "AOTC_INF"
    lim = {dtypes.i64: ("(-9223372036854775807LL - 1)", "9223372036854775807LL"),
           dtypes.i32: ("(-2147483647 - 1)", "2147483647"),
           dtypes.i16: ("-32768", "32767"), dtypes.u16: ("0u", "65535u"),
           dtypes.u32: ("0u", "4294967295u"), dtypes.u64: ("0ull", "18446744073709551615ull"),
           dtypes.i8: ("-128", "127"), dtypes.u8: ("0u", "255u")}[dt]
    return lim[0] if kind == "max" else lim[1]


def operand_index(em, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b, shape_a, shape_b):
    """The index expressions of a dot operand at (batch b, flat_a, flat_b), one per dim of `value`."""
    bi = unravel(em, "b", bshape, f"{var}b_") if bshape else []
    ai = unravel(em, flat_a, shape_a, f"{var}x_")
    ci = unravel(em, flat_b, shape_b, f"{var}y_")
    idx = [""] * value.type.rank
    for d, e in zip(batch_dims, bi):
        idx[d] = e
    for d, e in zip(dims_a, ai):
        idx[d] = e
    for d, e in zip(dims_b, ci):
        idx[d] = e
    return idx


def dot_operand_load(b: KernelBuilder, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b,
                     shape_a, shape_b, target: str, indent: int = 4, overrides=None) -> str:
    """Code setting `target` to a dot operand at (batch b, flat_a, flat_b), prologue included."""
    em = b.emitter(indent=indent, overrides=overrides)
    idx = operand_index(em, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b, shape_a, shape_b)
    em.emit(f"{target} = {em.value(value, idx)};")
    return em.text()


def plain_operand(b: KernelBuilder, value, overrides=None) -> bool:
    """`value` is read straight from a kernel parameter (no view, prologue or conversion in between)."""
    return value in b.param_names and value not in b.views and value not in (overrides or {}) \
        and b.producer.get(value) not in b.members


def dot_operand_pointer(b: KernelBuilder, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b,
                        shape_a, shape_b, target: str, indent: int = 4) -> str:
    """Code setting pointer `target` to a plain dot operand's element at (batch b, flat_a, flat_b), and
    `nbytes` to 16 (dot_mma's cp.async staging, mma_staging.py)."""
    em = b.emitter(indent=indent)
    idx = operand_index(em, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b, shape_a, shape_b)
    em.emit(f"{target} = {b.param_names[value]} + {linear(idx, value.shape)};")
    em.emit("nbytes = 16;")
    return em.text()


def contiguous_dim(b: KernelBuilder, value) -> int:
    """The dim of `value` whose neighbours lie next to each other in memory: the last, seen through the
    region's transposes (a transposed weight read as index math)."""
    node = b.producer.get(value)
    if node is not None and node in b.members and node.op == "transpose":
        return list(node.attrs["permutation"]).index(contiguous_dim(b, node.inputs[0]))
    return value.type.rank - 1


def simt_tiling(b: KernelBuilder, B, M, N, K, gated: bool = False) -> split_k.Tiling:
    """dot.cu's block tile and K split for this region (split_k.choose_tiling). A gated epilogue's column
    layout (codegen_gated.py) needs the 64x64 tile; the split-K workspace holds f32 partials only."""
    may_split = b.split_k and simt_accumulator(b.region.anchor.inputs[0].dtype)["acc_t"] == "float"
    tiles = split_k.SIMT_TILES[:1] if gated else split_k.SIMT_TILES
    return split_k.gemm_tiling("dot", B, M, N, K, b._traffic(), may_split, tiles)


def simt_tile_slots(tiling: split_k.Tiling, k_contiguous: bool, dt) -> dict:
    """dot.cu's slots for a block tile: its sizes, the thread layout, the loads per thread, the shared
    memory, the accumulator type and the B-tile thread mapping (consecutive lanes along whichever of B's k
    and n is contiguous in memory, so a warp's B loads are coalesced)."""
    bm, bn, threads = tiling.bm, tiling.bn, tiling.threads
    cols = bn // 4
    smem = 32 * (bm + 2) + 32 * (bn + 2)                    # two stages of A and B tiles
    if tiling.splits > 1:
        smem = max(smem, bm * split_k.simt_handoff_stride(bn))
    if k_contiguous:
        mapping = dict(b_kk="(threadIdx.x & 15)", b_nn=f"((threadIdx.x >> 4) + {threads // 16} * l)")
    else:
        mapping = dict(b_kk=f"((threadIdx.x >> {bn.bit_length() - 1}) + {threads // bn} * l)",
                       b_nn=f"(threadIdx.x & {bn - 1})")
    # A split launch states the blocks an SM that make 25% occupancy (16 warps): without a minimum,
    # ptxas (CUDA 13, sm_80) held a 64x32 split kernel that shares aotc_split_last's flag with another
    # to 80 registers and spilled one (ResNet-50's stage-4 3x3 convs at batch 1); stated, it takes
    # 108 and spills none, and no split tile drops under the 25%.
    min_blocks = f", {max(1, 16 * 32 // threads)}" if tiling.splits > 1 else ""
    return dict(bm=bm, bn=bn, threads=threads, min_blocks=min_blocks, rows=bm // 4, cols=cols, cols_mask=cols - 1,
                cols_shift=cols.bit_length() - 1, a_loads=16 * bm // threads, b_loads=16 * bn // threads,
                a_step=threads // 16, smem_elems=smem, tiling=tiling, **mapping, **simt_accumulator(dt))


def simt_grid(tiling: split_k.Tiling, B, M, N) -> tuple:
    """dot.cu's grid before a split: one block per (bn, bm) tile per batch."""
    return (D.ceildiv(N, tiling.bn), D.ceildiv(M, tiling.bm), B)


def dot_epilogue(b: KernelBuilder, bshape, mshape, nshape, M, N, indent: int) -> Emitter:
    """Epilogue + store for output element (b, m, n), the accumulator in `accv`."""
    out = b.region.anchor.outputs[0]
    em = b.emitter(indent=indent, overrides={out: "accv", **b.epilogue_overrides})
    idx = (unravel(em, "b", bshape, "ob") if bshape else []) + unravel(em, "m", mshape, "om") \
        + unravel(em, "n", nshape, "on")
    if len(idx) != out.type.rank:      # the dot's output dims are (batch, lhs free, rhs free) in order
        em.emit(f"const {b.idx_t} lin_o = (b * {M} + m) * {N} + n;")
        idx = unravel(em, "lin_o", out.shape, "oo")
    b.store_root(em, b.root_index(em, idx))
    return em


__all__ = ["Kernel", "KernelBuilder", "unravel", "slice_offset", "touched_bytes", "acc_type", "reduce_identity",
           "simt_accumulator", "multiply_add",
           "dot_operand_load", "dot_operand_pointer", "plain_operand", "contiguous_dim", "simt_tiling", "simt_tile_slots", "simt_grid",
           "dot_epilogue", "MAX_GRID"]
