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
        _stablehlo_ops(as_json)
        return
    from aotc.importers.onnx.support import DTYPES, support_table
    rows = support_table()
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = max(len(r["op_type"]) for r in rows)
    for r in rows:
        note = f"  {r['restrictions']}" if r["restrictions"] else ""
        click.echo(f"{r['op_type']:<{width}}  opset {r['opset_min']}-{r['opset_max']}{note}")
    click.echo(f"{len(rows)} op types; dtypes: {DTYPES}")


def _stablehlo_ops(as_json: bool) -> None:
    from aotc.importers.stablehlo.support import support_table
    rows = support_table()
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = max(len(r["op"]) for r in rows)
    for r in rows:
        mark = "yes" if r["supported"] else "NO "
        click.echo(f"{r['op']:<{width}}  {mark}  {r['notes']}".rstrip())
    ok = sum(r["supported"] for r in rows)
    click.echo(f"{ok} of {len(rows)} StableHLO spec ops supported")
