"""The pass manager, in the style of XLA's HloPassPipeline and HloPassFix.

A `Pass` is a name, a pure `Graph -> Graph` function and a one-line
description. `PASSES` registers every pass by its short, stable name; the
names are what `disabled=` and the dump files use. A `Pipeline` runs passes
(or nested pipelines) in order and, after each pass, runs `verify` as the
invariant checker, so a broken IR is blamed on the pass that broke it. A
pipeline with `fixed_point=True` repeats its passes until one round changes
nothing (same nodes, values and constants) or `max_iterations` is reached.

With `dump_dir`, the input graph is written to `00-input.txt` and the graph
after every pass to `NN-<pass>.txt`, numbered in the order passes ran.

The input graph is never mutated; the result is always a new Graph object.

To add a pass: write `aotc/hlo_passes/<pass>.py` with `run(graph) -> Graph`,
register it below with one `register(...)` line, and list it in
`default_pipeline()`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Union

from aotc.errors import AotcError, VerifyError
from aotc.hlo_passes import (algsimp, bn_fold, channel_pad, constant_folding, cse, dce, dot_views, infer_shapes, layout,
                              merge_dots, merge_reduces, precision, qdq_propagate, quantize, transpose_sink,
                              weight_layout)
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import Graph


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph], Graph]
    description: str = ""


PASSES: dict[str, Pass] = {}


def register(name: str, run: Callable[[Graph], Graph], description: str) -> Pass:
    """Register a pass under a short stable name; returns the Pass."""
    if name in PASSES:
        raise AotcError(f"pass '{name}' is already registered")
    PASSES[name] = Pass(name, run, description)
    return PASSES[name]


def get_pass(name: str) -> Pass:
    if name not in PASSES:
        raise AotcError(f"unknown pass '{name}'; known passes: {', '.join(sorted(PASSES))}")
    return PASSES[name]


def _verify_only(graph: Graph) -> Graph:
    verify(graph)
    return graph


register("verify", _verify_only, "check IR invariants; changes nothing")
register("infer-shapes", infer_shapes.run, "re-derive output types from the op table")
register("constant-folding", constant_folding.run, "evaluate nodes whose inputs are all constants")
register("dce", dce.run, "remove nodes and constants that no graph output needs")
register("cse", cse.run, "merge nodes with equal op, inputs and attributes, and equal constants")
register("qdq-propagate", qdq_propagate.run, "move QuantizeLinear above max pools, reshapes, transposes and concats")
register("quantize", quantize.run, "dot/conv of dequantized (Q/DQ) operands run in int8/fp8 with a scale epilogue")
register("algsimp", algsimp.run, "local algebraic simplification (x*1, double transpose, x/c -> x*(1/c), ...)")
register("dot-views", dot_views.run, "a GEMM on a (B*S, D) view of a (B, S, D) activation reads it unviewed")
register("transpose-sink", transpose_sink.run, "sink transposes/reshapes below elementwise ops, fold them into dots")
register("bn-fold", bn_fold.run, "fold per-channel scale/shift chains (batch norm, bias) into conv/matmul weights")
register("layout-nhwc", layout.run, "run convolutions, pooling and their neighbours channels-last")
register("merge-dots", merge_dots.run, "sibling matmuls on one activation (Q/K/V) become one wider GEMM")
register("merge-reduces", merge_reduces.run, "per-head statistics of touching column windows (Q/K norms) as one reduction")
register("precision", precision.run, "convert to fp16/bf16 keeping norms and softmax sums in f32 (configured)")
register("channel-pad", channel_pad.run, "f16/bf16 NHWC convs with C % 8 != 0 read zero-padded channels (stem convs)")
register("weight-kmajor", weight_layout.run, "f16/bf16 GEMMs read a constant (K, N) B with N off 16-byte chunks as (N, K)")

LAYOUTS = ("nhwc", "nchw")
_precision_module = precision


@dataclass
class PassRecord:
    """One pass application."""
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int
    changed: bool
    pipeline: str = ""       # name of the (sub-)pipeline that ran it
    iteration: int = 0       # round within a fixed-point pipeline, from 0


@dataclass
class PipelineReport:
    passes: list[PassRecord] = field(default_factory=list)
    iterations: dict[str, int] = field(default_factory=dict)   # fixed-point pipeline -> rounds run
    converged: dict[str, bool] = field(default_factory=dict)   # fixed-point pipeline -> reached it
    skipped: list[str] = field(default_factory=list)           # disabled passes, once each
    seconds: float = 0.0
    nodes_before: int = 0
    nodes_after: int = 0

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "nodes_before": self.nodes_before,
                "nodes_after": self.nodes_after, "iterations": dict(self.iterations),
                "converged": dict(self.converged), "skipped": list(self.skipped),
                "passes": [vars(r).copy() for r in self.passes]}

    def __str__(self) -> str:
        lines = [f"{'pass':<28} {'ms':>9} {'nodes':>13}"]
        for r in self.passes:
            where = f"{r.pipeline}[{r.iteration}]/" if r.pipeline else ""
            lines.append(f"{where + r.name:<28} {r.seconds * 1e3:9.2f} "
                         f"{r.nodes_before:>6}->{r.nodes_after:<6}")
        lines.append(f"{'total':<28} {self.seconds * 1e3:9.2f} "
                     f"{self.nodes_before:>6}->{self.nodes_after:<6}")
        return "\n".join(lines)


def _structure(graph: Graph) -> tuple:
    """What 'changed' means: nodes (op, value identities, attributes), constants, signature."""
    nodes = tuple(n.structure_key() for n in graph.nodes)
    return nodes, tuple(graph.constants), tuple(graph.inputs), tuple(graph.outputs)


def _copy(graph: Graph) -> Graph:
    return Graph(list(graph.inputs), list(graph.outputs), list(graph.nodes), dict(graph.constants),
                 graph.name, None if graph.output_names is None else list(graph.output_names), dict(graph.dims))


Step = Union[Pass, "Pipeline"]


class _Run:
    """State of one pipeline run: report, dump counter, options."""

    def __init__(self, dump_dir, disabled, check):
        self.report = PipelineReport()
        self.dump_dir = dump_dir
        self.disabled = frozenset(disabled)
        self.check = check
        self.counter = 0

    def dump(self, graph: Graph, label: str):
        if self.dump_dir is None:
            return
        with open(os.path.join(self.dump_dir, f"{self.counter:02d}-{label}.txt"), "w") as f:
            f.write(str(graph) + "\n")


class Pipeline:
    """Passes (or sub-pipelines) run in order, `verify` between them.

    fixed_point=True repeats the whole list until a round changes nothing or
    `max_iterations` rounds ran (then `report.converged[name]` is False).
    """

    def __init__(self, passes: Iterable[Step | str], *, name: str = "pipeline",
                 fixed_point: bool = False, max_iterations: int = 16):
        self.passes: list[Step] = [get_pass(p) if isinstance(p, str) else p for p in passes]
        self.name = name
        self.fixed_point = fixed_point
        self.max_iterations = max_iterations if fixed_point else 1

    def pass_names(self) -> list[str]:
        out = []
        for p in self.passes:
            out += p.pass_names() if isinstance(p, Pipeline) else [p.name]
        return out

    def run(self, graph: Graph, *, dump_dir: str | os.PathLike | None = None,
            disabled: Iterable[str] = (), verify_between: bool = True) -> tuple[Graph, PipelineReport]:
        """Run on `graph` (never mutated); returns (new graph, report)."""
        disabled = list(disabled)
        unknown = sorted(set(disabled) - set(PASSES))
        if unknown:
            raise AotcError(f"cannot disable unknown pass(es) {', '.join(unknown)}; "
                            f"known passes: {', '.join(sorted(PASSES))}")
        if dump_dir is not None:
            os.makedirs(dump_dir, exist_ok=True)
        state = _Run(dump_dir, disabled, verify_between)
        state.report.skipped = [n for n in dict.fromkeys(self.pass_names()) if n in state.disabled]
        state.dump(graph, "input")
        start = time.perf_counter()
        result = self._run(_copy(graph), state, "")
        state.report.seconds = time.perf_counter() - start
        state.report.nodes_before, state.report.nodes_after = len(graph.nodes), len(result.nodes)
        return result, state.report

    def _run(self, graph: Graph, state: _Run, parent: str) -> Graph:
        label = self.name if self.fixed_point else parent
        for it in range(self.max_iterations):
            before = _structure(graph)
            for p in self.passes:
                if isinstance(p, Pipeline):
                    graph = p._run(graph, state, label)
                elif p.name not in state.disabled:
                    graph = self._apply(p, graph, state, label, it)
            if not self.fixed_point:
                return graph
            state.report.iterations[self.name] = it + 1
            if _structure(graph) == before:
                state.report.converged[self.name] = True
                return graph
        state.report.converged[self.name] = False
        return graph

    @staticmethod
    def _apply(p: Pass, graph: Graph, state: _Run, label: str, it: int) -> Graph:
        start = time.perf_counter()
        out = p.run(graph)
        seconds = time.perf_counter() - start
        if state.check:
            try:
                verify(out)
            except VerifyError as e:
                raise VerifyError(f"after pass '{p.name}': {e}") from None
        state.counter += 1
        state.dump(out, p.name)
        state.report.passes.append(PassRecord(p.name, seconds, len(graph.nodes), len(out.nodes),
                                              _structure(out) != _structure(graph), label, it))
        return out


def _simplify(name: str) -> Pipeline:
    return Pipeline(["constant-folding", "algsimp", "dot-views", "transpose-sink", "bn-fold", "cse", "dce"],
                    name=name, fixed_point=True)


def default_pipeline(*, layout: str = "nhwc", precision: str = "fp32", keep_fp32=()) -> Pipeline:
    """The standard optimization pipeline, in order.

    `layout` 'nhwc' runs layout-nhwc (conv stacks channels-last), 'nchw' leaves
    the model's layout. `precision` 'fp16'/'bf16' adds the precision pass
    (with `keep_fp32` node names kept in f32), followed by one more cleanup,
    and with 'nhwc' channel-pad (stem convs' channels to a multiple of 8), then weight-kmajor (constant
    GEMM weights whose N rows are not whole 16-byte chunks stored K-major).
    """
    if layout not in LAYOUTS:
        raise AotcError(f"unknown layout '{layout}'; supported: {', '.join(LAYOUTS)}")
    steps: list = ["verify", "infer-shapes", "qdq-propagate", "quantize", _simplify("simplify"), "merge-dots",
                   "merge-reduces", "dce"]
    if layout == "nhwc":
        steps += ["layout-nhwc", _simplify("after-layout")]
    configured = _precision_module.make(precision, keep_fp32)
    if precision == "tf32" or _precision_module.PRECISIONS[precision].name != "f32":
        steps += [Pass("precision", configured, PASSES["precision"].description), _simplify("after-precision")]
        if layout == "nhwc":     # after the cleanups: nothing folds the channel pad back into the conv
            steps += ["channel-pad"]
        steps += ["weight-kmajor", "dce"]
    return Pipeline(steps, name="hlo")


def run_pipeline(graph: Graph, *, dump_dir: str | os.PathLike | None = None,
                 disabled: Iterable[str] = (), layout: str = "nhwc", precision: str = "fp32",
                 keep_fp32=()) -> tuple[Graph, PipelineReport]:
    """Run `default_pipeline(...)` on `graph`; returns (optimized graph, report)."""
    return default_pipeline(layout=layout, precision=precision, keep_fp32=keep_fp32).run(
        graph, dump_dir=dump_dir, disabled=disabled)
