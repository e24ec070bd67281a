"""Run a compiled region list on the host build directly (no engine, no C runtime).

Used by fusion and codegen tests so they exercise generated kernels against the
interpreter without depending on the engine container.
"""
from __future__ import annotations

import numpy as np

from aotc.compiler import generate_kernels
from aotc.fusion.regions import check_partition, partition
from aotc.ir.graph import Graph
from aotc.kernels import codegen
from aotc.kernels.host_compile import compile_host
from aotc.kernels.host_exec import HostLibrary
from aotc.package.launch_plan import build_launches

POISON = {"f": np.nan}


def poisoned(shape, dtype) -> np.ndarray:
    """A buffer whose every element is a value no kernel should leave behind."""
    a = np.empty(shape, dtype)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        a.fill(np.nan)
    elif a.dtype == np.bool_:
        a.view(np.uint8).fill(0x5A)
    else:
        a.fill(np.iinfo(a.dtype).max // 3 + 7)
    return a


def run_on_host(graph: Graph, inputs: list[np.ndarray], regions=None, split_k: bool = True, runs: int = 1):
    """Run the graph's kernels on the host build; `runs` > 1 repeats the launches on the same arena."""
    regions = regions if regions is not None else partition(graph)
    check_partition(graph, regions)
    regions, kernels, writes = generate_kernels(graph, regions, split_k)
    launches, weights, memory = build_launches(graph, regions, kernels, writes)
    source = codegen.module_source(kernels)
    lib = HostLibrary(compile_host(source, list(dict.fromkeys(k.name for k in kernels))))
    arena = np.full(max(memory.size, 1) // 4 + 1, np.nan, np.float32).view(np.uint8)
    arena[memory.size - memory.zeroed:memory.size] = 0       # as the runtime does at context creation
    wbuf = np.frombuffer(weights, np.uint8).copy() if weights else np.zeros(1, np.uint8)
    outs = [poisoned(v.shape, v.dtype.np) for v in graph.outputs]
    ins = [np.ascontiguousarray(a) for a in inputs]

    def pointer_array(ref):
        if ref.kind in ("input", "output"):
            a = (ins if ref.kind == "input" else outs)[ref.index]
            return a.reshape(-1).view(np.uint8)[ref.offset:] if ref.offset else a
        base = arena if ref.kind == "arena" else wbuf
        return base[ref.offset:]

    for _ in range(runs):
        for launch in launches:
            args = [pointer_array(ref) for ref in launch.args]
            lib.launch(launch.kernel, launch.grid, launch.block, args, smem=launch.smem)
    return outs, kernels, arena[memory.size - memory.zeroed:memory.size]
