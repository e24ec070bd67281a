"""The ONNX node test cases (generated in memory by onnx 1.23), the expected-failure list, op attribution.

`expected_failures.txt` lists, one per line, a regex that must match a whole
case name, then a tag and a one-line reason: `test_cast_DOUBLE_.*  f64: ...`.
Tags in EXCLUDED_TAGS are legitimate exclusions (types or features aotc does
not model: f64, float8, strings, sequences, optional, training, ...; or
`reference`: the case's expected output is itself outside the case's tolerance,
so no correct backend passes, onnxruntime included); an op
type still counts as supported when its only failing cases carry those tags.
Any other tag (`unsupported`, `bug`) marks a real gap, and the op type does
not count.
"""
from __future__ import annotations

import functools
import os
import re
import tempfile
from pathlib import Path

XFAIL_FILE = Path(__file__).parent / "expected_failures.txt"
EXCLUDED_TAGS = {"f64", "dtype", "float8", "string", "sequence", "optional", "training", "random",
                 "non-default-domain", "reference"}     # reference: the case's expected data is off
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@functools.lru_cache(maxsize=None)
def node_cases() -> dict:
    """name -> onnx.backend.test.loader TestCase (~6-18 s, once per process)."""
    os.environ.setdefault("ONNX_HOME", tempfile.mkdtemp(prefix="onnx-home-"))
    import warnings
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return {c.name: c for c in cases}


@functools.lru_cache(maxsize=None)
def expected_failures() -> list[tuple[re.Pattern, str, str]]:
    out = []
    for line in XFAIL_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pattern, rest = line.split(None, 1)
        tag, reason = (s.strip() for s in rest.split(":", 1))
        out.append((re.compile(pattern), tag, reason))
    return out


def expected_failure(name: str) -> tuple[str, str] | None:
    for pat, tag, reason in expected_failures():
        if pat.fullmatch(name):
            return tag, reason
    return None


def base_name(name: str) -> str:
    return _EXPANDED.sub("", name)


def case_op_types(name: str) -> list[str]:
    """Default-domain op types a case tests: its own nodes', or its base case's for *_expanded."""
    cases = node_cases()
    case = cases.get(base_name(name), cases[name])
    return sorted({n.op_type for n in case.model.graph.node if n.domain in ("", "ai.onnx")})


def summarize(records: list[tuple[str, str, list[str]]]) -> dict:
    """Coverage from (case name, status, op types, error line) records.

    status is passed | failed | unsupported | xfail:<tag>. An op type is
    supported when at least one of its cases passed and every other one is an
    expected failure with a tag in EXCLUDED_TAGS.
    """
    counts: dict[str, int] = {}
    per_op: dict[str, list[str]] = {}
    for _, status, ops, *_ in records:
        counts[status] = counts.get(status, 0) + 1
        for op in ops:
            per_op.setdefault(op, []).append(status)

    def ok(st):
        return st == "passed" or (st.startswith("xfail:") and st[6:] in EXCLUDED_TAGS)

    supported = sorted(op for op, sts in per_op.items() if "passed" in sts and all(ok(s) for s in sts))
    return {"cases": len(records), "counts": dict(sorted(counts.items())),
            "op_types_seen": len(per_op), "op_types_supported": supported,
            "op_types_partial": sorted(op for op, sts in per_op.items() if op not in supported and "passed" in sts)}
