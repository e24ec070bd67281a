"""`aotc bench`: time an engine against onnxruntime, TensorRT, torch and JAX, and check its accuracy.

trtexec's habits: warm-up, many timed runs, median and p99, throughput at
the batch, build time; plus what trtexec lacks: every system's max abs and
relative error against one reference, and the roofline floor from the
engine. The work is in aotc/bench; this is the command line.
"""
from __future__ import annotations

import functools

import click


def handle_errors(fn):
    """aotc.cli.main's one-line-error wrapper, looked up at call time (aotc.cli.main imports this module)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from aotc.cli.main import handle_errors as wrap
        return wrap(fn)(*args, **kwargs)
    return wrapper


@click.command("bench")
@click.argument("model_or_engine", type=click.Path(dir_okay=False))
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--against", default="onnxruntime,tensorrt,torch,jax", show_default=True,
              help="Comma-separated competitors (onnxruntime, tensorrt, torch, jax); empty for aotc alone.")
@click.option("--batch", type=int, default=None, help="Set dim 0 of every ONNX input (aotc and competitors alike).")
@click.option("--dim", "dims", multiple=True, metavar="NAME=INT",
              help="A dynamic engine's dim, e.g. batch=4 (repeatable; others at their max).")
@click.option("--precision", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]), default="fp32", show_default=True)
@click.option("--iterations", default=100, show_default=True, help="Timed runs per system (at most).")
@click.option("--warmup", default=10, show_default=True, help="Untimed runs first.")
@click.option("--max-seconds", default=30.0, show_default=True,
              help="Stop timing a system after this long (at least 5 runs); the run count is reported.")
@click.option("--input-sets", default=4, show_default=True, help="Distinct random input sets, rotated.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--inputs", "inputs_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help=".npz of real inputs: set 0 is this, the other sets perturb it.")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With a prebuilt engine: its source model (enables competitors and the reference).")
@click.option("--arch", default=None, help="Targets for the engine build (default: none on cpu, sm_80,sm_90 on cuda).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the result as JSON.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None, help="Write the rows as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG chart (needs matplotlib).")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@handle_errors
def bench(model_or_engine, device, against, batch, precision, iterations, warmup, max_seconds, input_sets, seed,
          inputs_path, model_path, arch, json_path, csv_path, plot_path, quiet, dims=()):
    """Benchmark MODEL_OR_ENGINE (.onnx, StableHLO, or a .engine) on DEVICE against competitors."""
    from aotc.bench import load_source, parse_against, run_bench
    from aotc.bench.report import format_table, write_csv, write_json, write_plot
    from aotc.errors import AotcError

    if iterations < 1 or warmup < 0 or input_sets < 1:
        raise AotcError("--iterations and --input-sets must be at least 1, --warmup at least 0")
    if plot_path:
        try:
            import matplotlib  # noqa: F401 - fail before the long part, not after it
        except ImportError:
            raise AotcError("--plot needs matplotlib (pip install matplotlib)") from None
    names = parse_against(against)
    source = load_source(model_or_engine, batch, model_path)
    if dims:
        from aotc.package.dim_values import parse_dim_values
        if source.model is not None:
            raise AotcError("--dim applies to a prebuilt dynamic engine given alone; a model's shapes come "
                            "from the model (or --batch)")
        source.dim_values = parse_dim_values(dims)
    base = None
    if inputs_path:
        from aotc.cli.main import _load_inputs
        base = _load_inputs(inputs_path, source.input_specs())

    def progress(msg):
        if not quiet:
            click.echo(f"  .. {msg}", err=True)

    result = run_bench(source, device=device, against=names, precision=precision, iterations=iterations,
                       warmup=warmup, input_count=input_sets, max_seconds=max_seconds, seed=seed,
                       base_inputs=base, arch=arch, progress=progress)
    click.echo(format_table(result))
    for path, write, what in ((json_path, write_json, "JSON"), (csv_path, write_csv, "CSV"),
                              (plot_path, write_plot, "chart")):
        if path:
            write(result, path)
            click.echo(f"{what} written to {path}")
