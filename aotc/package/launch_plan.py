"""Regions + their generated kernels -> the launch sequence with every pointer resolved.

The compiler generates the kernels (aotc.kernels.codegen) and hands them here;
this module reads what a kernel says about itself (its name, geometry, params,
views, split-K workspace) and generates nothing.

Decides where each value lives: graph inputs and outputs in the caller's
buffers, constants in the weights blob, everything else in the arena at the
offset the memory plan gives. A graph output that is not computed by its own
region (an input, a constant, or a value returned twice) gets a copy region.
"""
from __future__ import annotations

import numpy as np

from aotc.fusion.region import GatedPayload, Region
from aotc.ir import dims as D
from aotc.ir.graph import Graph, Value
from aotc.kernels.aliasing import may_alias_output
from aotc.kernels.variants import buckets_for
from aotc.package import plan as P
from aotc.package.memory_plan import ALIGN, Buffer, MemoryPlan, align_up, plan_memory
from aotc.package.shape_program import ShapeProgram


def add_output_copies(graph: Graph, regions: list[Region]) -> tuple[list[Region], dict[int, int]]:
    """Append copy regions so each graph output position has a region writing it.

    Returns the regions and a map region index -> output position it writes.
    """
    regions = list(regions)
    root_index = {r.root: i for i, r in enumerate(regions)}
    writes: dict[int, int] = {}
    for j, v in enumerate(graph.outputs):
        i = root_index.get(v)
        if i is not None and i not in writes:
            writes[i] = j
            continue
        regions.append(Region("loop", v, [], inputs=[v], reasons=["copy into a graph output"]))
        writes[len(regions) - 1] = j
    return regions, writes


def build_launches(graph: Graph, regions: list[Region], kernels: list, writes: dict[int, int],
                   program: ShapeProgram | None = None, variants: dict | None = None):
    """Resolve the arguments of the kernels generated for `regions` (output copies included, see
    add_output_copies, whose `writes` map says which region writes which graph output).

    `kernels[i]` is region i's aotc.kernels.codegen.Kernel. Returns (launches, weights bytes,
    memory plan). A split-K launch also gets an f32 workspace live during that launch only,
    and the tile counters at the arena's end (memory.zeroed bytes, zeroed by the runtime
    once per context and left zero by every launch).

    A dynamic graph's sizes (grids, the dims kernels take by value) become registers of
    `program` (shape_program.py); every buffer is planned at the top of the ranges, so
    offsets stay fixed. `variants` (region index -> [(bucket index, Kernel)], from
    aotc.kernels.variants) adds each region's bucket kernels: launches of one region, each
    predicated so that exactly one runs per shape (the first bucket that holds, else the
    generic kernel).
    """
    variants = variants or {}
    if len(kernels) != len(regions):
        raise ValueError(f"{len(kernels)} kernels for {len(regions)} regions")

    refs: dict[Value, P.BufferRef] = {v: P.BufferRef("input", index=i) for i, v in enumerate(graph.inputs)}
    for i, j in writes.items():
        r = regions[i]
        if r.nodes:      # a computed root lives in the output buffer; copies do not redefine
            refs[r.root] = P.BufferRef("output", index=j)

    # weights: lay out first, then copy each array once into one buffer (BERT-base: 440 MB). A kernel's
    # derived constants (a norm folded into its weights, kernels/norm_fold.py) are weights too.
    placed, size = [], 0
    for k in [*kernels, *(v for vs in variants.values() for _, v in vs)]:
        for v in k.sources():
            data = graph.constants.get(v)
            if data is None:
                data = k.derived.get(v)
            if data is not None and v not in refs:
                off = align_up(size, ALIGN)
                refs[v] = P.BufferRef("weight", offset=off)
                placed.append((v, off, data))
                size = off + v.type.nbytes
    view = np.empty(size, np.uint8)          # not bytearray(size): zero-filling 440 MB costs what the copy does
    end = 0
    for v, off, data in placed:
        view[end:off] = 0                    # alignment padding
        view[off:off + v.type.nbytes] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        end = off + v.type.nbytes
    weights = memoryview(view)

    # intermediates: written by region i, read until the last region using them
    first = {r.root: i for i, r in enumerate(regions) if r.nodes and r.root not in refs}
    first.update({v: i for i, r in enumerate(regions) for v in r.extra_roots})
    last = dict(first)
    for i, k in enumerate(kernels):
        for v in k.sources():
            if v in last:
                last[v] = max(last[v], i)
    buffers = [Buffer(v, v.type.max_nbytes, first[v], last[v],
                      in_place_input(regions[first[v]], kernels[first[v]], first, last)) for v in first]
    alternatives = {i: [k] + [v for _, v in variants.get(i, [])] for i, k in enumerate(kernels)}
    buffers += [Buffer(("split-k workspace", i), max(k.workspace for k in ks), i, i)
                for i, ks in alternatives.items() if any(k.splits > 1 for k in ks)]
    memory = plan_memory(buffers)
    for v, off in memory.offsets.items():
        if not isinstance(v, tuple):
            refs[v] = P.BufferRef("arena", offset=off)
    counters = max((k.counters for ks in alternatives.values() for k in ks), default=0)
    counter_ref = None
    if counters:
        counter_ref = P.BufferRef("arena", offset=align_up(memory.size, ALIGN))
        memory.zeroed = align_up(4 * counters, ALIGN)
        memory.size = counter_ref.offset + memory.zeroed

    launches = []
    buckets = buckets_for(graph.dims) if variants else []
    for i, k in enumerate(kernels):
        choices = [(b, v, program.within(dict(buckets[b].bounds)), buckets[b].name) for b, v in variants.get(i, [])]
        for j, (b, v, holds, name) in enumerate(choices):      # the first bucket that holds wins
            with D.dim_ranges(buckets[b].ranges(graph.dims)):   # sizes the bucket pins become ints
                launches.append(_launch(v, i, refs, writes, memory, counter_ref, program,
                                        program.all_of([holds] + [program.not_(c[2]) for c in choices[:j]]), name))
        when = program.all_of([program.not_(c[2]) for c in choices]) if choices else None
        launches.append(_launch(k, i, refs, writes, memory, counter_ref, program, when,
                                "generic" if choices else ""))
    return launches, weights, memory


def _launch(k, i: int, refs, writes, memory, counter_ref, program, when, variant: str) -> P.Launch:
    """Region i's launch of kernel `k`, its pointers resolved and its sizes as registers."""
    args = [_view_ref(refs, k, v) for v in k.params[:-1]]
    args.append(P.BufferRef("output", index=writes[i]) if i in writes else refs[k.region.root])
    args += [refs[v] for v in k.extra_outputs]
    if k.splits > 1:
        args += [P.BufferRef("arena", offset=memory.offsets[("split-k workspace", i)]), counter_ref]
    grid = k.grid
    if k.dims or not all(isinstance(g, int) for g in grid):
        if program is None:
            raise ValueError(f"kernel {k.name} has dynamic sizes but no shape program was given")
        grid = tuple(program.ref(g if D.known(g) is None else D.known(g)) for g in grid)
        args += [P.BufferRef("dim", index=program.register(D.sym(d))) for d in k.dims]
    return P.Launch(k.name, grid, k.block, k.smem, args, k.bytes, k.flops, describe(k), when, variant,
                    k.bytes_expr, k.flops_expr)


def describe(k) -> str:
    """The launch's region as `aotc inspect` shows it, with what the kernel does beyond the nodes."""
    gated = k.region.payload_as(GatedPayload)
    extras = ([f"split-K x{k.splits}"] if k.splits > 1 else []) + \
        ([f"gated {gated.blocks}xF, F={gated.width}"] if gated else []) + \
        ([f"{len(k.views)} slice view(s)"] if k.views else [])
    return k.region.describe() + (f" [{', '.join(extras)}]" if extras else "")


def _view_ref(refs, k, v: Value) -> P.BufferRef:
    """Where param `v` points: its buffer, or inside its source's buffer for a view."""
    if v not in k.views:
        return refs[v]
    src, off = k.views[v]
    r = refs[src]
    return P.BufferRef(r.kind, r.index, r.offset + off)


def in_place_input(region: Region, kernel, first: dict, last: dict):
    """An input the region's output may overwrite in place, or None.

    One the kernel declares may alias its output (aliasing.may_alias_output:
    a pure elementwise map at the output's shape, so each thread reads element
    i before it writes element i), that is an arena intermediate written by an
    earlier launch and last read by this one.
    """
    step = first.get(region.root)
    if step is None:            # the region writes a graph output, not the arena
        return None
    for v in may_alias_output(region, kernel.params[:-1]):
        if v in first and first[v] < step and last[v] == step:
            return v
    return None


__all__ = ["build_launches", "add_output_copies", "in_place_input", "MemoryPlan"]
