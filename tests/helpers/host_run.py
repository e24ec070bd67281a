"""Run a compiled region list on the host build directly (no engine, no C runtime).

Used by fusion and codegen tests so they exercise generated kernels against the
interpreter without depending on the engine container.
"""
from __future__ import annotations

import numpy as np

from aotc.compiler import generate_kernels
from aotc.fusion.regions import check_partition, partition
from aotc.ir import dims as D
from aotc.ir.dims import dim_ranges
from aotc.ir.graph import Graph
from aotc.ir.specialize import bind_dims
from aotc.kernels import codegen
from aotc.kernels.host_compile import compile_host
from aotc.kernels.host_exec import HostLibrary
from aotc.package import plan as P
from aotc.package.launch_plan import build_launches
from aotc.package.shape_program import ShapeProgram

POISON = {"f": np.nan}


def poisoned(shape, dtype) -> np.ndarray:
    """A buffer whose every element is a value no kernel should leave behind."""
    a = np.empty(shape, dtype)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16" or a.dtype.name.startswith("float8"):
        a.fill(np.nan)
    elif a.dtype == np.bool_ or a.dtype.name in ("int4", "uint4", "int2", "uint2", "float4_e2m1fn"):
        a.view(np.uint8).fill(0x5A)   # 0x5A: no bool, no 4- or 2-bit value
    else:
        a.fill(np.iinfo(a.dtype).max // 3 + 7)
    return a


def run_on_host(graph: Graph, inputs: list[np.ndarray], regions=None, split_k: bool = True, runs: int = 1,
                shapes: list | None = None, force=None):
    """Run the graph's kernels on the host build; `runs` > 1 repeats the launches on the same arena.

    A dynamic graph (one with dims) is compiled once and run at each input list of `shapes`
    (a list of input lists; default: just `inputs`); the outputs are then a list per run.
    `force(launches) -> launches` may rewrite the launch list first (tests force one variant)."""
    with dim_ranges(graph.dims):
        regions = regions if regions is not None else partition(graph)
        check_partition(graph, regions)
        variants: dict = {}
        regions, kernels, writes = generate_kernels(graph, regions, split_k, variants)
        program = ShapeProgram(graph.dims)
        launches, weights, memory = build_launches(graph, regions, kernels, writes, program, variants)
        plan = P.EnginePlan([], [], memory.size, b"", launches, dims=program.specs(), program=program.ops)
        if force is not None:
            launches = force(launches)
        built = kernels + [k for vs in variants.values() for _, k in vs]
    source = codegen.module_source(built)
    lib = HostLibrary(compile_host(source, list(dict.fromkeys(k.name for k in built))))
    arena = np.full(max(memory.size, 1) // 4 + 1, np.nan, np.float32).view(np.uint8)
    arena[memory.size - memory.zeroed:memory.size] = 0       # as the runtime does at context creation
    wbuf = np.frombuffer(weights, np.uint8).copy() if weights else np.zeros(1, np.uint8)
    if shapes is None:
        return _run(graph, lib, launches, plan, arena, wbuf, inputs, runs) + (kernels, arena[memory.size - memory.zeroed:memory.size])
    results = [_run(graph, lib, launches, plan, arena, wbuf, ins, runs)[0] for ins in shapes]
    return results, kernels, arena[memory.size - memory.zeroed:memory.size]


def _run(graph, lib, launches, plan, arena, wbuf, inputs, runs):
    env = bind_dims(graph, {v.name: np.shape(a) for v, a in zip(graph.inputs, inputs)}) if graph.dims else {}
    regs = P.evaluate_program(plan, env) if graph.dims else []
    outs = [poisoned(tuple(D.evaluate(d, env) for d in v.shape), v.dtype.np) for v in graph.outputs]
    ins = [np.ascontiguousarray(a) for a in inputs]

    def pointer_array(ref):
        if ref.kind == "dim":
            return np.int64(regs[ref.index])
        if ref.kind in ("input", "output"):
            a = (ins if ref.kind == "input" else outs)[ref.index]
            return a.reshape(-1).view(np.uint8)[ref.offset:] if ref.offset else a
        base = arena if ref.kind == "arena" else wbuf
        return base[ref.offset:]

    def value(x):
        return regs[x.index] if isinstance(x, P.Reg) else x

    for _ in range(runs):
        for launch in launches:
            grid = tuple(value(g) for g in launch.grid)
            if (launch.when is not None and not value(launch.when)) or 0 in grid:
                continue
            args = [pointer_array(ref) for ref in launch.args]
            lib.launch(launch.kernel, grid, launch.block, args, smem=launch.smem)
    return (outs,)
