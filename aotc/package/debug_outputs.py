"""The debug build's extra outputs: every region's result also lands in an engine output.

`aotc debug compare` compiles a model with `debug_outputs=True`. After fusion, so that
every fusion decision is the production one, each region's root and extra roots that
are not graph outputs already become extra graph outputs. The kernels are generated
from the same regions, and a kernel's source depends on its region alone, so the debug
engine runs the production kernels: a region root is stored into its output buffer
instead of the arena, and an extra root (which the kernel writes to the arena beside
its root) is copied out by a copy kernel that add_output_copies appends after the
production launches. Launch i of the debug engine therefore runs production launch i,
and the production outputs keep their positions and names.

Each extra output is described by a DebugOutput (also written to the manifest), which
says which launch computed it and from which graph nodes (by name: for an imported
ONNX model, the ONNX node names).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from aotc.errors import CompileError
from aotc.fusion.region import Region
from aotc.ir import ops
from aotc.ir.graph import Graph, Value

PREFIX = "debug"
_INDEX_MATH = (ops.INJECTIVE, ops.SOURCE)     # recomputed wherever it is read (see fusion/regions.py)


@dataclass(frozen=True)
class DebugOutput:
    """One extra engine output: `output` (its name) holds value `value` computed by launch `kernel`."""
    output: str
    kernel: int
    value: str
    nodes: tuple[str, ...]      # names of the kernel's compute nodes, in graph order

    def as_dict(self) -> dict:
        d = asdict(self)
        d["nodes"] = list(self.nodes)
        return d


def compute_node_names(region: Region) -> tuple[str, ...]:
    """Names of the nodes `region` computes, each once (index math, which every reader recomputes, left out)."""
    return tuple(dict.fromkeys(n.name for n in region.nodes if n.name and ops.category(n.op) not in _INDEX_MATH))


def output_name(kernel: int, value: Value) -> str:
    return f"{PREFIX}.{kernel}.{value.name}"


def add_debug_outputs(graph: Graph, regions: list[Region]) -> tuple[Graph, list[DebugOutput]]:
    """`graph` with every region's roots (not yet graph outputs) appended as outputs, and what each one is.

    The graph's nodes, constants and inputs are shared, not copied: `regions` stay valid for it.
    """
    have = set(graph.outputs)
    names = graph.signature_output_names()
    outputs, debug = list(graph.outputs), []
    for i, r in enumerate(regions):
        nodes = compute_node_names(r)
        for v in [r.root] + list(r.extra_roots):
            if v in have or v in graph.constants or v in graph.inputs:
                continue
            have.add(v)
            outputs.append(v)
            debug.append(DebugOutput(output_name(i, v), i, v.name, nodes))
    taken = set(names)
    clash = [d.output for d in debug if d.output in taken]
    if clash:       # a model output named like ours: say so rather than bind the wrong buffer
        raise CompileError(f"debug output name(s) {clash} clash with the model's output names")
    out = Graph(list(graph.inputs), outputs, list(graph.nodes), dict(graph.constants), graph.name,
                names + [d.output for d in debug], dict(graph.dims))
    return out, debug


__all__ = ["DebugOutput", "add_debug_outputs", "compute_node_names", "output_name"]
