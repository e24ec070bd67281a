"""`aotc profile ENGINE`: what Nsight Compute would report per kernel, measured on the cpu device."""
from __future__ import annotations

import functools

import click


def handle_errors(fn):
    """cli.main's one-line-error wrapper, looked up at call time (cli.main imports this module)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .main import handle_errors as wrap
        return wrap(fn)(*args, **kwargs)
    return wrapper


@click.command("profile")
@click.argument("engine", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
@click.option("--arch", "archs", multiple=True, metavar="sm_XX",
              help="Occupancy and SASS for this arch only (repeatable; default: every cubin in the engine).")
@click.option("--dim", "dims", multiple=True, metavar="NAME=INT",
              help="A dynamic engine's dim, e.g. batch=4 (repeatable; others at their max).")
@click.option("--seed", default=0, show_default=True, help="Seed for the random inputs (and the sampled blocks).")
@click.option("--sample-blocks", type=click.IntRange(min=1), default=None, metavar="N",
              help="Run at most N thread blocks of each launch (the first, the last, N-2 spread between) and "
                   "scale the counts to the grid: a full-size engine in minutes instead of hours.")
@handle_errors
def profile(engine, as_json, archs, dims, seed, sample_blocks):
    """Run ENGINE once on the cpu device with instrumentation; per kernel: global sectors and
    efficiency, shared-memory bank conflicts, occupancy, main-loop instruction mix, spills and a
    predicted H200 time beside the roofline floor."""
    from aotc.package.dim_values import parse_dim_values
    from aotc.profile.engine_profile import format_profile, profile_engine, to_json
    with open(engine, "rb") as f:
        data = f.read()
    p = profile_engine(data, parse_dim_values(dims), list(archs) or None, seed, sample_blocks)
    click.echo(to_json(p) if as_json else format_profile(p))
