"""`--bisect-precision`: a small set of ONNX nodes to keep in f32 so a low-precision engine meets the tolerance.

Greedy and bounded, in two phases, each trial one compile and run of the debug build
(compare.run_compare; onnxruntime's values are computed once per Session):

- grow: keep in f32 the ONNX nodes of the first kernel beyond tolerance (the kernel
  with the largest error when no single kernel is past it but the outputs are); when
  all of that kernel's nodes are kept already, the ONNX nodes that feed it; compile and
  compare again, until the model's outputs meet the tolerance;
- shrink: delta debugging (ddmin.py) over the names the grow phase added, a trial
  holding when the outputs still meet the tolerance, so every name left is needed.

`max_trials` bounds the compiles of both phases together. The result is what
`aotc compile --keep-fp32` takes: the names of the nodes the precision pass sees, which
are the ONNX node names (an unnamed node's op type in lower case), except where an
earlier pass made a node of several (merge-dots' `MatMul_11.merged`: the Q/K/V GEMMs
in one, kept in f32 together). With it comes the error the model's outputs then have.
Only fp16 and bf16 engines apply: fp32/tf32 have nothing to keep, and aotc builds no
int8 engines yet.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from aotc.debug.compare import DeviceReport, KernelReport, Session, check_precision, run_compare
from aotc.debug.ddmin import ddmin
from aotc.errors import AotcError

LOW_PRECISIONS = ("fp16", "bf16")


@dataclass
class BisectResult:
    keep_fp32: list[str]        # every name for --keep-fp32: the given ones, then the ones found
    added: list[str]
    fixed: bool
    trials: int
    before: DeviceReport
    after: DeviceReport         # compared with keep_fp32

    def argument(self) -> str:
        return "--keep-fp32 " + shlex.quote(",".join(self.keep_fp32))

    def as_dict(self) -> dict:
        bad = self.after.first_bad
        return {"keep_fp32": self.keep_fp32, "added": self.added, "fixed": self.fixed, "trials": self.trials,
                "error_after_fix": {**self.after.output_error.as_dict(), "within_tolerance": self.after.passes,
                                    "first_bad": None if bad is None else {"index": bad.index,
                                                                           "onnx_nodes": bad.onnx_nodes}}}


def _feeders(graph) -> dict[str, list[str]]:
    """Node name -> names of the nodes producing its inputs, in `graph` (the graph before precision)."""
    producer = graph.producers()
    out: dict[str, list[str]] = {}
    for n in graph.nodes:
        feeds = out.setdefault(n.name, [])
        feeds += [producer[v].name for v in n.inputs if v in producer and producer[v].name not in feeds]
    return out


def next_names(report: DeviceReport, keep: set[str], feeders: dict[str, list[str]]) -> list[str]:
    """The names to keep in f32 next: the worst kernel's nodes, or their feeders when all are kept."""
    ranked: list[KernelReport] = sorted((k for k in report.kernels if k.error is not None),
                                        key=lambda k: (-k.error.nonfinite, -k.error.max_rel_err))
    first = report.first_bad
    for k in ([first] if first else []) + ranked:
        new = [n for n in k.keep_names if n not in keep]
        if new:
            return new
        up = list(dict.fromkeys(f for n in k.keep_names for f in feeders.get(n, []) if f not in keep and f in feeders))
        if up:
            return up
    return []


def bisect_precision(session: Session, precision: str, keep_fp32=(), rtol=None, *, max_trials: int = 16,
                     first: DeviceReport | None = None, progress=None) -> BisectResult:
    """Find names to keep in f32 (see the module docstring); `first` is the compare report to start from."""
    check_precision(precision)
    if precision not in LOW_PRECISIONS:
        raise AotcError(f"--bisect-precision applies to fp16 and bf16 engines; a {precision} engine keeps "
                        f"everything in f32 already")
    say = progress or (lambda msg: None)
    given = list(dict.fromkeys(keep_fp32))
    trials = 0

    def trial(keep: list[str]) -> DeviceReport:
        nonlocal trials
        trials += 1
        report = run_compare(session, precision, keep, rtol, devices=["cpu"]).main
        e = report.output_error
        say(f"bisect trial {trials}: {len(keep)} node(s) in f32 -> outputs max rel {e.max_rel_err:.2e}"
            + (f", {e.nonfinite} NaN/Inf" if e.nonfinite else "") + (" (within tolerance)" if report.passes else ""))
        return report

    before = first if first is not None else trial(given)
    if before.passes:
        return BisectResult(given, [], True, trials, before, before)
    feeders = _feeders(session.before_precision())
    keep, added, current = list(given), [], before
    while not current.passes and trials < max_trials:
        new = next_names(current, set(keep), feeders)
        if not new:
            break
        keep += new
        added += new
        current = trial(keep)
    if not current.passes:
        return BisectResult(keep, added, False, trials, before, current)

    reports: dict[tuple, DeviceReport] = {tuple(added): current}

    def still_passes(subset: list[str]) -> bool:
        reports[tuple(subset)] = trial(given + subset)
        return reports[tuple(subset)].passes

    if len(added) > 1 and trials < max_trials:
        added, _ = ddmin(added, still_passes, budget=max_trials - trials)
    return BisectResult(given + added, added, True, trials, before, reports[tuple(added)])


__all__ = ["bisect_precision", "BisectResult", "next_names", "LOW_PRECISIONS"]
