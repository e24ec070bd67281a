"""Region -> CUDA C kernel: one template per region kind, slots filled by the emitter.

Templates live in `templates/<kind>.cu` as plain CUDA with `${slot}`s; this
module computes the slots (index unravelling, operand loads with their
prologue, the epilogue and store) and the launch geometry. Kernel names come
from a hash of the kernel text, so identical regions share one kernel.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from aotc.errors import UnsupportedError
from aotc.fusion.region import GatedPayload, Region
from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph, Value
from aotc.kernels import split_k
from aotc.kernels.aliasing import may_alias_output
from aotc.kernels.codegen_gated import gated_b_load, gated_epilogue, gated_width
from aotc.kernels.codegen_norm_prologue import norm_row_stats
from aotc.kernels.codegen_vector import vector_loop
from aotc.kernels.emitter import Emitter, compute_type, linear, literal, store_expr

TEMPLATES = Path(__file__).parent / "templates"
MAX_GRID = 4096          # grid-stride loops cover the rest
LOOP_BLOCK = 256
WARP_ROW_MAX = 256       # rows up to this long get a warp each (8 per block), longer ones a block
ROW_WARPS = 8


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

    def sources(self) -> list[Value]:
        """The materialized values the kernel reads (a view's source in its place)."""
        return [self.views[v][0] if v in self.views else v for v in self.params[:-1]]

    @property
    def uses_fp16(self) -> bool:
        return any(v.dtype in (dtypes.f16, dtypes.bf16) for v in self.params)


def _template(kind: str) -> Template:
    return Template((TEMPLATES / f"{kind}.cu").read_text())


def _idx_t(region: Region) -> str:
    values = list(region.inputs) + [region.root] + [v for n in region.nodes for v in n.outputs]
    return "long long" if any(v.type.size >= 2**31 for v in values) else "int"


def _unravel(em: Emitter, flat: str, shape, prefix: str) -> list[str]:
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


class _Builder:
    """Shared state for generating one region's kernel."""

    def __init__(self, graph: Graph, region: Region, producer, split_k: bool = True):
        self.graph = graph
        self.split_k = split_k
        self.region = region
        self.producer = producer
        self.idx_t = _idx_t(region)
        small = {v for v in region.inputs if v in graph.constants and v.type.size == 1}
        params = [v for v in region.inputs if v not in small]
        # a slice of an input is read through a pointer to its first element (a view) with the
        # slice's start taken out of the index math, so kernels that differ only in where they
        # slice (an RNN's steps) are one kernel
        # A slice of such a view is a view too (a bidirectional RNN slices its direction, then the
        # step): offsets add up and strides multiply, indices keep the source's layout.
        self.views: dict[Value, tuple[Value, int]] = {}
        self.view_layout: dict[Value, tuple[tuple, tuple]] = {}     # view -> (source shape, strides)
        viewed = set()
        for n in region.nodes:        # graph order: an outer slice is seen before a slice of it
            src = n.inputs[0] if n.op == "slice" and n is not region.anchor else None
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

    def emitter(self, indent: int, overrides=None) -> Emitter:
        return Emitter(self.members, self.producer, self.param_names, self.consts,
                       overrides, self.idx_t, indent, self.view_layout)

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
                idx = _unravel(em, f"lin{k}", n.outputs[0].shape, f"e{k}_")
        if len(idx) != region.root.type.rank:       # no path (should not happen): the linear offset
            em.emit(f"const {self.idx_t} lin = {linear(idx, out.shape)};")
            idx = _unravel(em, "lin", region.root.shape, "e")
        return idx

    def store_root(self, em: Emitter, idx, overrides=None):
        root = self.region.root
        val = em.value(root, idx)
        em.emit(store_expr("out", linear(idx, root.shape), val, root.dtype))

    def finish(self, kind: str, slots: dict, grid, block, smem=0, split=None) -> Kernel:
        """`split` = (splits, workspace bytes, tile counters) of a kernel doing its own split handoff."""
        slots = dict({"row_stats": ""}, **slots)
        params, splits, extra, counters = self.signature(), 1, 0, 0
        if split is not None:
            splits, extra, counters = split
            params += ", float *__restrict__ aotc_ws, unsigned int *__restrict__ aotc_sem"
        if kind in split_k.GEMM_TEMPLATES:
            B, M, N, K = (slots[key] for key in ("batch", "m", "n", "k"))
            more, splits, _ = split_k.split_slots(kind, B, M, N, K, self.idx_t, self.split_k)
            slots.update(more)
            if splits > 1:
                grid = (grid[0], grid[1], B * splits)
                params += ", float *__restrict__ aotc_ws, unsigned int *__restrict__ aotc_sem"
                extra = splits * B * M * N * 4          # f32 partials: L2-resident (see split_k.py)
                counters = grid[0] * grid[1] * grid[2] // splits
        slots = dict(slots, name="${name}", params=params, idx_t=self.idx_t,
                     what=self.region.describe().replace("\n", " "))
        text = _template(kind).safe_substitute(slots)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        name = f"aotc_{kind}_{digest}"
        text = text.replace("${name}", name)
        region = self.region
        nbytes = sum(touched_bytes(v, region.nodes) for v in self.params) + region.root.type.nbytes \
            + sum(v.type.nbytes for v in region.extra_roots)
        flops = sum(ops.node_flops(n.op, n.attrs, [v.type for v in n.inputs], [v.type for v in n.outputs])
                    for n in region.nodes)
        return Kernel(name, text, self.params + [region.root], tuple(grid), tuple(block), smem,
                      region, nbytes, flops, splits, extra, counters, dict(self.views),
                      list(region.extra_roots))


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
    """Bytes of input `v` a kernel reads: the rows a gather picks or a slice keeps, else all of v.

    An embedding lookup reads seq rows of a 50k-row table, an LSTM step one
    time slice; counting the whole tensor would overstate their traffic 100x.
    """
    users = [n for n in nodes if v in n.inputs]
    partial = all((n.op == "gather" and n.inputs[0] is v and v not in n.inputs[1:]) or n.op == "slice"
                  for n in users)
    if not users or not partial:
        return v.type.nbytes
    return min(v.type.nbytes, sum(n.outputs[0].type.size for n in users) * v.dtype.itemsize)


def _grid_1d(total: int, block: int) -> tuple[int, int, int]:
    return (max(1, min(math.ceil(total / block), MAX_GRID)), 1, 1)


def generate(graph: Graph, region: Region, producer=None, split_k: bool = True) -> Kernel:
    """The kernel computing `region` of `graph` (`split_k`: may split a GEMM's K loop, see split_k.py)."""
    producer = producer if producer is not None else graph.producers()
    b = _Builder(graph, region, producer, split_k)
    from aotc.kernels.codegen_attention import generate_attention
    from aotc.kernels.codegen_chain import generate_chain
    gen = {"loop": _loop, "reduction": _reduction, "dot": _dot, "conv": _conv, "window": _window,
           "row": _row, "attention": generate_attention, "chain": generate_chain}
    return gen[region.kind](b)


def _loop(b: _Builder) -> Kernel:
    root = b.region.root
    total = root.type.size
    em = b.emitter(indent=2)
    idx = _unravel(em, "i", root.shape, "o")
    b.store_root(em, idx)
    for j, v in enumerate(b.region.extra_roots):      # a merged sibling loop: same index, own buffer
        em.emit(store_expr(f"out{j + 1}", linear(idx, v.shape), em.value(v, idx), v.dtype))
    block = LOOP_BLOCK
    vector, start = vector_loop(b, _unravel, em.text()) if not b.region.extra_roots else ("", "0")
    threads = total // (16 // root.dtype.itemsize) if vector else total
    return b.finish("loop", dict(body=em.text(), total=total, block=block, vector=vector, scalar_start=start),
                    _grid_1d(threads, block), (block, 1, 1))


def _row(b: _Builder) -> Kernel:
    """Softmax/norm-style regions: per-row reductions as phases, then the outputs."""
    region = b.region
    reduces = [n for n in region.nodes if n.op == "reduce"]
    shape = reduces[0].inputs[0].shape
    rows_shape = reduces[0].outputs[0].shape
    inner = shape[len(rows_shape):]
    rows, extent = math.prod(rows_shape), math.prod(inner)
    warp = extent <= WARP_ROW_MAX
    block = 256 if extent >= 256 or warp else max(32, 32 * math.ceil(extent / 32))
    first, step = ("lane", "32") if warp else ("threadIdx.x", "blockDim.x")
    em_row = b.emitter(indent=2)
    kept = _unravel(em_row, "row", rows_shape, "o")
    phases, overrides = [], {}
    for j, red in enumerate(reduces):
        kind = red.attrs["kind"]
        em = b.emitter(indent=3, overrides=dict(overrides))
        em.emit(f"float acc = {_identity(kind, red.inputs[0].dtype)};")
        em.open(f"for ({b.idx_t} c = {first}; c < {extent}; c += {step})")
        idx = kept + _unravel(em, "c", inner, f"c{j}_")
        v = em.value(red.inputs[0], idx)
        em.emit(f"acc = AOTC_COMBINE_{kind}(acc, {v});")
        em.close()
        em.emit(f"red{j} = aotc_warp_{kind}(acc);" if warp else f"red{j} = aotc_block_{kind}(acc, aotc_sh);")
        phases.append(f"    float red{j};\n    {{\n{em.text()}\n    }}")
        overrides[red.outputs[0]] = f"red{j}"
    em_store = b.emitter(indent=3, overrides=overrides)
    idx = kept + _unravel(em_store, "c", inner, "cs_")
    b.store_root(em_store, idx)
    slots = dict(row_index=em_row.text(), phases="\n".join(phases), store=em_store.text(), rows=rows,
                 extent=extent, block=block, warps=ROW_WARPS)
    if warp:
        return b.finish("row_warp", slots, (max(1, min(math.ceil(rows / ROW_WARPS), MAX_GRID)), 1, 1), (block, 1, 1))
    return b.finish("row", slots, (max(1, min(rows, MAX_GRID)), 1, 1), (block, 1, 1))


def _acc_type(dt) -> str:
    if dt.is_float:
        return "float"
    return "long long" if dt == dtypes.i64 else ("unsigned int" if dt == dtypes.u8 else "int")


def _identity(kind: str, dt) -> str:
    if kind == "sum":
        return "0" if not dt.is_float else "0.0f"
    if kind == "prod":
        return "1" if not dt.is_float else "1.0f"
    if dt.is_float:
        return "(-AOTC_INF)" if kind == "max" else "AOTC_INF"
    lim = {dtypes.i64: ("(-9223372036854775807LL - 1)", "9223372036854775807LL"),
           dtypes.i32: ("(-2147483647 - 1)", "2147483647"),
           dtypes.i8: ("-128", "127"), dtypes.u8: ("0u", "255u")}[dt]
    return lim[0] if kind == "max" else lim[1]


def _reduction(b: _Builder) -> Kernel:
    anchor = b.region.anchor
    x = anchor.inputs[0]
    axes = anchor.attrs["axes"]
    kind = anchor.attrs["kind"]
    out = anchor.outputs[0]
    rows = out.type.size
    extent = math.prod(x.shape[a] for a in axes)
    acc_t = _acc_type(x.dtype)
    warp = extent <= WARP_ROW_MAX
    block = 256 if extent >= 256 or warp else max(32, 32 * math.ceil(extent / 32))
    em_row = b.emitter(indent=2)
    kept = _unravel(em_row, "row", out.shape, "o")
    em_load = b.emitter(indent=3)
    red = _unravel(em_load, "r", [x.shape[a] for a in axes], "q")
    full, ki, ri = [], iter(kept), iter(red)
    for d in range(x.type.rank):
        full.append(next(ri) if d in axes else next(ki))
    v = em_load.value(x, full)
    em_load.emit(f"acc = AOTC_COMBINE_{kind}(acc, ({acc_t})({v}));")
    acc_val = "acc" if x.dtype.is_float else f"(({compute_type(out.dtype)})acc)"
    em_epi = b.emitter(indent=4, overrides={out: acc_val})
    b.store_root(em_epi, b.root_index(em_epi, kept))     # the epilogue may reshape or transpose
    slots = dict(row_index=em_row.text(), load=em_load.text(), epilogue=em_epi.text(), rows=rows,
                 extent=extent, acc_t=acc_t, init=_identity(kind, x.dtype), kind=kind, block=block, warps=ROW_WARPS)
    if warp:
        return b.finish("reduce_warp", slots, (max(1, min(math.ceil(rows / ROW_WARPS), MAX_GRID)), 1, 1),
                        (block, 1, 1))
    return b.finish("reduce", slots, (max(1, min(rows, MAX_GRID)), 1, 1), (block, 1, 1))


def dot_operand_load(b: _Builder, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b,
                     shape_a, shape_b, target: str, indent: int = 4, overrides=None) -> str:
    """Code setting `target` to a dot operand at (batch b, flat_a, flat_b), prologue included."""
    em = b.emitter(indent=indent, overrides=overrides)
    bi = _unravel(em, "b", bshape, f"{var}b_") if bshape else []
    ai = _unravel(em, flat_a, shape_a, f"{var}x_")
    ci = _unravel(em, flat_b, shape_b, f"{var}y_")
    idx = [""] * value.type.rank
    for d, e in zip(batch_dims, bi):
        idx[d] = e
    for d, e in zip(dims_a, ai):
        idx[d] = e
    for d, e in zip(dims_b, ci):
        idx[d] = e
    em.emit(f"{target} = {em.value(value, idx)};")
    return em.text()


def dot_epilogue(b: _Builder, bshape, mshape, nshape, M, N, indent: int) -> Emitter:
    """Epilogue + store for output element (b, m, n), the accumulator in `accv`."""
    out = b.region.anchor.outputs[0]
    em = b.emitter(indent=indent, overrides={out: "accv"})
    idx = (_unravel(em, "b", bshape, "ob") if bshape else []) + _unravel(em, "m", mshape, "om") \
        + _unravel(em, "n", nshape, "on")
    if len(idx) != out.type.rank:      # the dot's output dims are (batch, lhs free, rhs free) in order
        em.emit(f"const {b.idx_t} lin_o = (b * {M} + m) * {N} + n;")
        idx = _unravel(em, "lin_o", out.shape, "oo")
    b.store_root(em, b.root_index(em, idx))
    return em


def dot_fetch(idx_t: str, load_a: str, load_b: str, M: int, N: int, K: int) -> str:
    """The SIMT GEMM template's tile fetch: A (64 m x 16 k) into ra[], B (16 k x 64 n) into rb[]."""
    return "\n".join([
        "    for (int l = 0; l < 4; ++l) {",
        f"      const {idx_t} am = m0 + (threadIdx.x >> 4) + 16 * l;",
        f"      const {idx_t} ak = k0 + (threadIdx.x & 15);",
        "      float a = 0.0f;",
        f"      if (am < {M} && ak < {K}) {{",
        load_a,
        "      }",
        "      ra[l] = a;",
        f"      const {idx_t} bk = k0 + (threadIdx.x >> 6) + 4 * l;",
        f"      const {idx_t} bn = n0 + (threadIdx.x & 63);",
        "      float bv = 0.0f;",
        f"      if (bk < {K} && bn < {N}) {{",
        load_b,
        "      }",
        "      rb[l] = bv;",
        "    }"])


def _dot(b: _Builder) -> Kernel:
    anchor = b.region.anchor
    lhs, rhs = anchor.inputs
    lb, rb = anchor.attrs["lhs_batch"], anchor.attrs["rhs_batch"]
    lc, rc = anchor.attrs["lhs_contract"], anchor.attrs["rhs_contract"]
    lf, rf = ops.dot_free_dims(anchor.attrs, lhs.type.rank, rhs.type.rank)
    bshape = [lhs.shape[d] for d in lb]
    mshape, nshape = [lhs.shape[d] for d in lf], [rhs.shape[d] for d in rf]
    kshape = [lhs.shape[d] for d in lc]
    B, M, N, K = (math.prod(s) for s in (bshape, mshape, nshape, kshape))
    if B > 65535:
        raise UnsupportedError(f"dot_general '{anchor.name}': batch {B} exceeds the grid's z limit 65535")

    row_stats, norm = norm_row_stats(b, _unravel, mshape, kshape, M, K)
    if lhs.dtype == rhs.dtype and (lhs.dtype in (dtypes.f16, dtypes.bf16) or
                                   anchor.attrs.get("precision") == "tf32"):
        from aotc.kernels.codegen_dot_mma import generate_dot_mma
        return generate_dot_mma(b, (bshape, mshape, nshape, kshape, B, M, N, K), row_stats, norm)

    def operand_load(var, value, batch_dims, dims_a, dims_b, flat_a, flat_b, shape_a, shape_b):
        return dot_operand_load(b, bshape, var, value, batch_dims, dims_a, dims_b, flat_a, flat_b,
                                shape_a, shape_b, "a" if var == "A" else "bv",
                                overrides=norm if var == "A" else None)

    load_a = operand_load("A", lhs, lb, lf, lc, "am", "ak", mshape, kshape)
    gated = b.region.payload_as(GatedPayload)
    if gated:                      # SwiGLU / LSTM-cell epilogue over the GEMM's k column blocks
        f, k = gated.width, gated.blocks
        N = gated_width(f, k)
        load_b = gated_b_load(lambda flat: operand_load("B", rhs, rb, rc, rf, "bk", flat, kshape, nshape),
                              "simt", f, b.idx_t, 4, k)
        em = gated_epilogue(b, _unravel, "simt", bshape, mshape, f, indent=4, k=k)
    else:
        load_b = operand_load("B", rhs, rb, rc, rf, "bk", "bn", kshape, nshape)
        em = dot_epilogue(b, bshape, mshape, nshape, M, N, indent=4)
    fetch = dot_fetch(b.idx_t, load_a, load_b, M, N, K)
    slots = dict(fetch=fetch, epilogue=em.text(), batch=B, m=M, n=N, k=K, row_stats=row_stats)
    return b.finish("dot", slots, (math.ceil(N / 64), math.ceil(M / 64), B), (256, 1, 1))


def _window_loops(em: Emitter, names, out_idx, spatial_dims, kshape, strides_, pads, dils, sizes):
    """Open one loop per window dim; returns the input coordinates. Caller closes."""
    coords = []
    for j, d in enumerate(spatial_dims):
        k, q = f"{names}k{j}", f"{names}q{j}"
        em.open(f"for ({em.idx_t} {k} = 0; {k} < {kshape[j]}; ++{k})")
        base = out_idx[d] if strides_[j] == 1 else f"{out_idx[d]} * {strides_[j]}"
        off = f" - {pads[j][0]}" if pads[j][0] else ""
        kd = k if dils[j] == 1 else f"{k} * {dils[j]}"
        em.emit(f"const {em.idx_t} {q} = {base}{off} + {kd};")
        em.emit(f"if ({q} < 0 || {q} >= {sizes[j]}) continue;")
        coords.append(q)
    return coords


def _conv(b: _Builder) -> Kernel:
    anchor = b.region.anchor
    x, w = anchor.inputs
    out = anchor.outputs[0]
    a = anchor.attrs
    nsp = x.type.rank - 2
    total = out.type.size
    if a.get("layout", "NCHW") == "NHWC":
        from aotc.kernels import codegen_conv as cc
        if cc.project_source(b.region) is not None:
            return cc.generate_depthwise_project(b)
        if cc.is_depthwise(b) and cc.depthwise_fits(b):
            return cc.generate_depthwise(b)
        if a["groups"] == 1:
            return cc.generate_implicit_gemm(b)
    # direct kernel: NCHW and grouped convs. NCHW: x (N, C, *S), w (O, C/g, *K), out (N, O, *S); NHWC: channels last in all three
    last = a.get("layout", "NCHW") == "NHWC"
    cdim = x.type.rank - 1 if last else 1
    spatial = list(range(1, 1 + nsp)) if last else list(range(2, 2 + nsp))
    em_idx = b.emitter(indent=2)
    oidx = _unravel(em_idx, "i", out.shape, "o")
    oc = f"o{cdim}"            # the template reads the channel variable even when the dim is 1
    if out.shape[cdim] == 1:
        em_idx.emit(f"(void){oc};")
    em_win = b.emitter(indent=3)
    q = _window_loops(em_win, "", oidx, spatial, [w.shape[d] for d in spatial], a["strides"],
                      a["padding"], a["dilations"], [x.shape[d] for d in spatial])
    ks = [f"k{j}" for j in range(nsp)]
    if last:
        xv = em_win.value(x, [oidx[0]] + q + ["ci"])
        wv = em_win.value(w, [oidx[cdim]] + ks + ["c"])
    else:
        xv = em_win.value(x, [oidx[0], "ci"] + q)
        wv = em_win.value(w, [oidx[1], "c"] + ks)
    if a.get("precision") == "tf32":        # the op's operands are tf32 values (see ops.round_tf32)
        xv, wv = f"aotc_tf32({xv})", f"aotc_tf32({wv})"
    em_win.emit(f"acc += {xv} * {wv};")
    for _ in range(nsp):
        em_win.close()
    em_epi = b.emitter(indent=2, overrides={out: "acc"})
    b.store_root(em_epi, b.root_index(em_epi, oidx))
    cg, og = w.shape[cdim], w.shape[0] // a["groups"]
    slots = dict(out_index=em_idx.text(), window=em_win.text(), epilogue=em_epi.text(), total=total,
                 cg=cg, og=og, oc=oc, block=LOOP_BLOCK)
    return b.finish("conv", slots, _grid_1d(total, LOOP_BLOCK), (LOOP_BLOCK, 1, 1))


def _window(b: _Builder) -> Kernel:
    anchor = b.region.anchor
    (x,) = anchor.inputs
    out = anchor.outputs[0]
    a = anchor.attrs
    kind = a["kind"]
    total = out.type.size
    acc_t = _acc_type(x.dtype)
    em_idx = b.emitter(indent=2)
    oidx = _unravel(em_idx, "i", out.shape, "o")
    em_win = b.emitter(indent=2)
    dims = list(range(x.type.rank))
    q = _window_loops(em_win, "", oidx, dims, a["window"], a["strides"], a["padding"],
                      a["dilations"], x.shape)
    v = em_win.value(x, q)
    em_win.emit(f"acc = AOTC_COMBINE_{kind}(acc, ({acc_t})({v}));")
    for _ in dims:
        em_win.close()
    acc_val = "acc" if x.dtype.is_float else f"(({compute_type(out.dtype)})acc)"
    em_epi = b.emitter(indent=2, overrides={out: acc_val})
    b.store_root(em_epi, b.root_index(em_epi, oidx))
    slots = dict(out_index=em_idx.text(), window=em_win.text(), epilogue=em_epi.text(), total=total,
                 acc_t=acc_t, init=_identity(kind, x.dtype), block=LOOP_BLOCK)
    return b.finish("window", slots, _grid_1d(total, LOOP_BLOCK), (LOOP_BLOCK, 1, 1))


def module_source(kernels: list[Kernel]) -> str:
    """One translation unit holding every distinct kernel of an engine."""
    parts = []
    if any(k.uses_fp16 for k in kernels):
        parts.append("#define AOTC_USE_FP16 1")
    parts += ['#include "aotc_prelude.cuh"', '#include "aotc_ops.cuh"']
    if any(k.name.startswith(("aotc_dot_mma_", "aotc_dot_tf32_")) for k in kernels):
        parts.append('#include "aotc_mma.cuh"')
    parts.append("")
    seen = set()
    for k in kernels:
        if k.name not in seen:
            seen.add(k.name)
            parts.append(k.source)
    return "\n".join(parts) + "\n"


__all__ = ["Kernel", "generate", "module_source", "literal"]
