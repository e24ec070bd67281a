"""The one-screen text of `aotc debug compare` (and of its --bisect-precision result).

One line per kernel: index, max abs and rel error, NaN/Inf mismatches, the kernel's
name, its ONNX nodes and results; a marker on the kernels beyond tolerance, then the
model's outputs and the first kernel beyond tolerance.
"""
from __future__ import annotations

from aotc.debug.metrics import TensorError

SHOWN_NODES = 4


def _nodes(names: list[str], fallback: list[str]) -> str:
    if not names:
        return "(no ONNX node: " + ", ".join(dict.fromkeys(fallback)) + ")" if fallback else "(data movement only)"
    more = len(names) - SHOWN_NODES
    return ", ".join(names[:SHOWN_NODES]) + (f", ... {more} more" if more > 0 else "")


def _err(e: TensorError | None) -> str:
    if e is None:
        return f"{'-':>9} {'-':>9} {'-':>9}"
    return f"{e.max_abs_err:9.2e} {e.max_rel_err:9.2e} {f'{e.nan}/{e.inf}':>9}"


def format_device(d, precision: str) -> list[str]:
    lines = [f"  {d.device} device (rtol {d.rtol:g})",
             f"  {'kernel':>6} {'max abs':>9} {'max rel':>9} {'NaN/Inf':>9}  name, ONNX nodes -> results"]
    for k in d.kernels:
        bad = k.error is not None and k.error.fails(d.rtol)
        lines.append(f"  {'#' + str(k.index):>6} {_err(k.error)}  {k.name}  {_nodes(k.onnx_nodes, k.nodes)} -> "
                     f"{', '.join(k.outputs)}" + ("   <- beyond tolerance" if bad else ""))
    for name, e in d.outputs.items():
        lines.append(f"  output {name}: max abs {e.max_abs_err:.3g}, max rel {e.max_rel_err:.3g}, "
                     f"NaN/Inf {e.nan}/{e.inf}" + ("" if not e.fails(d.rtol) else "   <- beyond tolerance"))
    first = d.first_bad
    if first is None:
        lines.append("  every kernel is within tolerance" if d.passes else
                     "  no single kernel is beyond tolerance, but the outputs are (errors add up)")
    else:
        lines.append(f"  first kernel beyond tolerance: #{first.index} {first.name}: "
                     f"{_nodes(first.onnx_nodes, first.nodes)} -> {', '.join(first.outputs)}")
        if first.error.nonfinite and precision in ("fp16", "bf16"):
            lines.append(f"  (NaN/Inf in an {precision} engine: an overflow? try --bisect-precision)")
    return lines


def format_compare(report) -> str:
    lines = [f"aotc debug compare: {report.model} ({report.precision}"
             + (f", keep fp32: {','.join(report.keep_fp32)}" if report.keep_fp32 else "") + ")"]
    for d in report.devices:
        lines += format_device(d, report.precision)
    return "\n".join(lines)


def format_bisect(fix) -> str:
    e = fix.after.output_error
    if not fix.fixed:
        return (f"  bisect: no set within {fix.trials} trial(s) met the tolerance; best tried: "
                f"{len(fix.keep_fp32)} node(s) in f32, outputs max rel {e.max_rel_err:.3g}, NaN/Inf {e.nan}/{e.inf}"
                f" (raise --max-trials, or --rtol)")
    if not fix.added:
        return "  bisect: the outputs meet the tolerance already; nothing to keep in fp32"
    return (f"  bisect: {len(fix.added)} node(s) kept in fp32 after {fix.trials} trial(s): outputs max abs "
            f"{e.max_abs_err:.3g}, max rel {e.max_rel_err:.3g}, NaN/Inf {e.nan}/{e.inf}\n"
            f"  {fix.argument()}")


__all__ = ["format_compare", "format_device", "format_bisect"]
