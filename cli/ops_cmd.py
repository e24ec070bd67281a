"""`aotc ops [--stablehlo] [--json]`: the ONNX op types (or StableHLO ops) aotc supports, with restrictions."""
from __future__ import annotations

import json

import click


@click.command("ops")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {op_type, opset_min, ...}.")
@click.option("--stablehlo", is_flag=True,
              help="List the StableHLO specification's ops instead: supported or not, with restrictions/reasons.")
def ops(as_json, stablehlo):
    """List the supported ONNX op types (default domain) with opsets and restrictions."""
    if stablehlo:
        from aotc.importers.stablehlo.support import support_table
        rows = support_table()
        key = "op"
        line = lambda r: f"{'yes' if r['supported'] else 'NO '}  {r['notes']}"  # noqa: E731
        total = f"{sum(r['supported'] for r in rows)} of {len(rows)} StableHLO spec ops supported"
    else:
        from aotc.importers.onnx.support import DTYPES, support_table
        rows = support_table()
        key = "op_type"
        line = lambda r: f"opset {r['opset_min']}-{r['opset_max']}" + (  # noqa: E731
            f"  {r['restrictions']}" if r["restrictions"] else "")
        total = f"{len(rows)} op types; dtypes: {DTYPES}"
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = max(len(r[key]) for r in rows)
    for r in rows:
        click.echo(f"{r[key]:<{width}}  {line(r)}".rstrip())
    click.echo(total)
