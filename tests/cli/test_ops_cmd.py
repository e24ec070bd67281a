"""`aotc ops --stablehlo`: the StableHLO spec's ops, supported or not, as a table and as JSON."""
import json

import pytest
from click.testing import CliRunner

from aotc.cli.main import main

pytest.importorskip("jaxlib")


def test_ops_stablehlo_json_and_table():
    res = CliRunner().invoke(main, ["ops", "--stablehlo", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    by_op = {r["op"]: r for r in rows}
    assert by_op["dot_general"]["supported"] and by_op["scatter"]["supported"]
    assert not by_op["all_reduce"]["supported"] and "single-device" in by_op["all_reduce"]["notes"]
    text = CliRunner().invoke(main, ["ops", "--stablehlo"])
    assert text.exit_code == 0, text.output
    ok = sum(r["supported"] for r in rows)
    assert f"{ok} of {len(rows)} StableHLO spec ops supported" in text.output
    assert any(line.startswith("convolution ") and " yes " in line for line in text.output.splitlines())
