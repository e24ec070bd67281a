"""The support table: `aotc ops`, `aotc ops --json` and docs/onnx_ops.md agree with the converter table."""
import json
from pathlib import Path

from click.testing import CliRunner

from aotc.importers.onnx.ops import CONVERTERS
from aotc.importers.onnx.support import FUNCTION_OPS, RESTRICTIONS, render_markdown, support_table
from aotc.cli.main import main

DOCS = Path(__file__).resolve().parents[3] / "docs" / "onnx_ops.md"


def test_docs_page_matches_the_table():
    assert DOCS.read_text() == render_markdown(), \
        "docs/onnx_ops.md is stale: python -m aotc.importers.onnx.support > docs/onnx_ops.md"


def test_table_is_the_converter_table():
    rows = support_table()
    assert [r["op_type"] for r in rows] == sorted(set(CONVERTERS) | set(FUNCTION_OPS))
    assert not set(FUNCTION_OPS) & set(CONVERTERS)      # expansion is only for ops without a converter
    assert len(rows) >= 150
    stray = sorted(set(RESTRICTIONS) - set(CONVERTERS))
    assert not stray, f"restrictions for ops without a converter: {stray}"


def test_ops_command_json_and_table():
    res = CliRunner().invoke(main, ["ops", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert {"TopK", "Einsum", "ScatterND", "Resize"} <= {r["op_type"] for r in rows}
    assert all(r["opset_min"] <= 13 <= r["opset_max"] for r in rows)
    text = CliRunner().invoke(main, ["ops"])
    assert text.exit_code == 0
    assert f"{len(rows)} op types" in text.output
    assert any(line.startswith("TopK ") and "K must be a constant" in line for line in text.output.splitlines())


def test_cli_prints_every_unsupported_node_as_a_list(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["h"], name="rnd"), helper.make_node("Unique", ["h"], ["y"], name="u")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    res = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "x.engine"), "-q"])
    assert res.exit_code == 1
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert lines[-3].startswith("aotc: error: 2 unsupported item(s)")
    assert lines[-2:] == ["  - RandomUniformLike 'rnd' (opset 17): no converter for this op",
                          "  - Unique 'u' (opset 17): no converter for this op"]
    assert "Traceback" not in res.output
