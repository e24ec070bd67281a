"""docs/stablehlo_ops.md matches the converter table, and the spec op list matches jaxlib's stablehlo dialect."""
from pathlib import Path

import pytest

pytest.importorskip("jaxlib")

from aotc.importers.stablehlo import importer  # noqa: E402
from aotc.importers.stablehlo.support import (CHLO_NOTES, MISSING, NOT_IN_SPEC, RESTRICTIONS, SPEC_OPS,  # noqa: E402
                                              STRUCTURAL, chlo_table, registry_ops, render_markdown,
                                              support_table)

DOCS = Path(__file__).resolve().parents[3] / "docs" / "stablehlo_ops.md"


def test_docs_page_matches_the_table():
    assert DOCS.read_text() == render_markdown(), \
        "docs/stablehlo_ops.md is stale: python -m aotc.importers.stablehlo.support > docs/stablehlo_ops.md"


def test_spec_ops_are_the_dialect_ops():
    """Every spec op exists in jaxlib's dialect; every other dialect op has its note."""
    reg = set(registry_ops())
    assert len(SPEC_OPS) == len(set(SPEC_OPS)) >= 100 and list(SPEC_OPS) == sorted(SPEC_OPS)
    assert set(SPEC_OPS) <= reg, sorted(set(SPEC_OPS) - reg)
    assert reg - set(SPEC_OPS) == set(NOT_IN_SPEC)


def test_every_op_is_supported_or_has_a_reason():
    importer.load_converters()
    conv = {n.split(".", 1)[1] for n in importer.CONVERTERS if n.startswith("stablehlo.")}
    supported = {r["op"] for r in support_table() if r["supported"]}
    assert supported == (conv | set(STRUCTURAL)) & set(SPEC_OPS)
    assert set(MISSING) == set(SPEC_OPS) - supported          # a reason for each missing op, none stale
    assert all(MISSING.values())
    assert set(RESTRICTIONS) <= supported, sorted(set(RESTRICTIONS) - supported)
    for op in ("broadcast", "dot"):
        assert op in conv and NOT_IN_SPEC[op].startswith("supported")
    assert {"scatter", "select_and_scatter", "sort", "while"} <= supported


def test_chlo_table_covers_the_dialect():
    rows = chlo_table()
    ok = {r["op"] for r in rows if r["supported"]}
    assert len(rows) >= 50 and {"square", "lgamma", "broadcast_add", "top_k"} <= ok
    assert set(CHLO_NOTES) <= ok, sorted(set(CHLO_NOTES) - ok)     # no notes for refused or unknown ops
    refused = [r for r in rows if not r["supported"]]
    assert all(r["notes"] != "no converter" for r in refused), refused   # each refusal has its reason
    assert "chlo" in DOCS.read_text() and "| square | yes |" in DOCS.read_text()
