"""`aotc ops [--json]`: the ONNX op types aotc supports, their opsets and restrictions."""
from __future__ import annotations

import json

import click


@click.command("ops")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {op_type, opset_min, ...}.")
def ops(as_json):
    """List the supported ONNX op types (default domain) with opsets and restrictions."""
    from aotc.importers.onnx_support import DTYPES, support_table
    rows = support_table()
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    width = max(len(r["op_type"]) for r in rows)
    for r in rows:
        note = f"  {r['restrictions']}" if r["restrictions"] else ""
        click.echo(f"{r['op_type']:<{width}}  opset {r['opset_min']}-{r['opset_max']}{note}")
    click.echo(f"{len(rows)} op types; dtypes: {DTYPES}")
