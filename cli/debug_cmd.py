"""`aotc debug compare` and `aotc debug reduce`: where an engine goes wrong, and a small model that shows it.

polygraphy's habits (`run --onnx-outputs mark all`, `debug precision`, `debug reduce`)
with what aotc knows beyond them: which ONNX nodes each fused kernel holds. The work
is in aotc/debug; this is the command line.
"""
from __future__ import annotations

import functools
import json

import click

PRECISION_CHOICES = ["fp32", "tf32", "fp16", "bf16", "int8"]    # int8 answers with a clear error


def handle_errors(fn):
    """cli.main's one-line-error wrapper, looked up at call time (cli.main imports this module)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .main import handle_errors as wrap
        return wrap(fn)(*args, **kwargs)
    return wrapper


def _progress(quiet: bool):
    def say(msg):
        if not quiet:
            click.echo(f"  .. {msg}", err=True)
    return say


def _names(text: str) -> list[str]:
    return [k.strip() for k in (text or "").split(",") if k.strip()]


@click.group("debug")
def debug():
    """Find the kernel that breaks accuracy, keep nodes in fp32, shrink a failing model."""


@debug.command("compare")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--precision", type=click.Choice(PRECISION_CHOICES), default="fp32", show_default=True)
@click.option("--keep-fp32", default="", help="Comma-separated ONNX node names kept in f32 (as aotc compile).")
@click.option("--inputs", "inputs_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help=".npz with one array per model input (random inputs when omitted).")
@click.option("--seed", default=0, show_default=True, help="Seed for random inputs.")
@click.option("--rtol", type=float, default=None,
              help="Tolerance on each tensor's max abs error over its largest reference magnitude "
                   "[default: fp32 1e-4, tf32/fp16 1e-2, bf16 5e-2].")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME:DIMS",
              help="Fix a model input's symbolic dims, e.g. input_ids:1x128 (repeatable).")
@click.option("--layout", type=click.Choice(["nhwc", "nchw"]), default="nhwc", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="auto: the cpu device, and cuda too when a GPU is present.")
@click.option("--bisect-precision", is_flag=True,
              help="fp16/bf16: find ONNX nodes to keep in fp32 so the outputs meet the tolerance.")
@click.option("--max-trials", default=16, show_default=True, help="Compiles --bisect-precision may spend.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@handle_errors
def compare_cmd(model, precision, keep_fp32, inputs_path, seed, rtol, input_shape, layout, device,
                bisect_precision, max_trials, as_json, quiet):
    """Each kernel's error vs onnxruntime, and the first bad one.

    Compiles a debug build of MODEL's engine (the production kernels, every kernel's
    results also written out), runs it on the cpu device (and cuda, with a GPU) and
    onnxruntime on the same inputs, and reports per kernel its ONNX nodes, results,
    max abs/rel error and NaN/Inf mismatches. Fused values no ONNX tensor holds are
    compared with aotc's reference interpreter at fp32.
    """
    from aotc.debug.bisect import bisect_precision as bisect
    from aotc.debug.compare import Session, check_precision, run_compare

    from .main import _parse_input_shapes
    check_precision(precision)
    say = _progress(quiet or as_json)
    session = Session(model, inputs=inputs_path, seed=seed, input_shapes=_parse_input_shapes(input_shape),
                      layout=layout)
    report = run_compare(session, precision, _names(keep_fp32), rtol, None if device == "auto" else [device], say)
    fix = None
    if bisect_precision:
        fix = bisect(session, precision, _names(keep_fp32), rtol, max_trials=max_trials, first=report.main,
                     progress=say)
    if as_json:
        out = report.as_dict()
        if fix is not None:
            out.update(fix.as_dict())
        click.echo(json.dumps(out, indent=2))
        return
    from aotc.debug.text import format_bisect, format_compare
    click.echo(format_compare(report))
    if fix is not None:
        click.echo(format_bisect(fix))


@debug.command("reduce")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The reduced model (.onnx); its inputs go beside it as .npz.")
@click.option("--until", "until", default=None, metavar="COND",
              help="Still fails while COND holds for the engine against onnxruntime: rel>X, abs>X or nonfinite>0 "
                   "(a NaN/Inf mismatch counts as an infinite error).")
@click.option("--check", "check", default=None, metavar="CMD",
              help="Still fails while the shell command CMD exits 0; {model} and {inputs} are replaced by the "
                   "candidate's .onnx and .npz (the model path is appended when CMD names neither).")
@click.option("--precision", type=click.Choice(PRECISION_CHOICES), default="fp32", show_default=True,
              help="With --until: the engine precision.")
@click.option("--keep-fp32", default="", help="With --until: ONNX node names kept in f32.")
@click.option("--inputs", "inputs_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help=".npz with one array per model input (random inputs when omitted).")
@click.option("--seed", default=0, show_default=True, help="Seed for random inputs.")
@click.option("--max-tests", default=200, show_default=True, help="Candidates delta debugging may try.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@handle_errors
def reduce_cmd(model, output, until, check, precision, keep_fp32, inputs_path, seed, max_tests, as_json, quiet):
    """Shrink MODEL to a small subgraph that still fails.

    Delta debugging over MODEL's nodes; tensors cut off become graph inputs carrying the
    values onnxruntime computed for them in the whole model, saved beside the reduced
    model as .npz. With --until, a candidate fails while its engine at --precision meets
    COND against onnxruntime; with --check, while CMD exits 0.
    """
    from aotc.debug import reduce as R
    from aotc.debug.compare import Session, check_precision, run_compare
    from aotc.debug.metrics import parse_condition
    if (until is None) == (check is None):
        raise click.UsageError("give exactly one of --until COND and --check CMD")
    check_precision(precision)
    say = _progress(quiet or as_json)
    keep = _names(keep_fp32)
    seeds, feeds, error = (), None, None
    if until is not None:
        condition = parse_condition(until)
        session = Session(model, inputs=inputs_path, seed=seed)
        feeds = session.feeds
        first = run_compare(session, precision, keep, devices=["cpu"], progress=say).main.first_bad
        seeds = first.onnx_nodes if first is not None else ()
        test = R.until_test(condition, precision, keep)
        result = R.reduce_model(model, test, inputs=feeds, seed_nodes=seeds, budget=max_tests, progress=say)
        error = R.engine_error(R.Candidate(result.model, result.feeds), precision, keep)
    else:
        with R.work_dir() as tmp:
            result = R.reduce_model(model, R.check_command_test(check, tmp), inputs=inputs_path, seed=seed,
                                    budget=max_tests, progress=say)
    npz = R.save(result, output)
    summary = {"model": model, "output": output, "inputs": str(npz), "nodes_before": result.original_nodes,
               "nodes_after": len(result.nodes), "nodes": result.nodes, "tests": result.tests,
               "graph_inputs": sorted(result.feeds)}
    if error is not None:
        summary.update(error.as_dict())
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    more = f", ... {len(result.nodes) - 12} more" if len(result.nodes) > 12 else ""
    click.echo(f"aotc debug reduce: {result.original_nodes} -> {len(result.nodes)} node(s) in {result.tests} tests: "
               + ", ".join(result.nodes[:12]) + more)
    if error is not None:
        click.echo(f"  reduced model ({precision}): outputs max abs {error.max_abs_err:.3g}, "
                   f"max rel {error.max_rel_err:.3g}, NaN/Inf {error.nan}/{error.inf}")
    click.echo(f"  wrote {output} and its inputs {npz} ({', '.join(sorted(result.feeds)) or 'none'})")
