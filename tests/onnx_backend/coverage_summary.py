"""Prints the node-suite coverage summary after a run (works under xdist: reads report properties).

The hook is imported by tests/conftest.py, because under xdist the controller
process never loads a sub-folder conftest (it does not collect).

Set AOTC_ONNX_COVERAGE_JSON=path to also write the summary and per-case statuses as JSON.
"""
import json
import os


def pytest_terminal_summary(terminalreporter):
    records = []
    for reports in terminalreporter.stats.values():
        for rep in reports:
            props = dict(getattr(rep, "user_properties", []) or [])
            if getattr(rep, "when", None) != "call" or "status" not in props:
                continue
            name = rep.nodeid.split("[", 1)[-1].rstrip("]")
            ops = [o for o in props.get("op_types", "").split(",") if o]
            records.append((name, props["status"], ops, props.get("error", "")))
    if not records:
        return
    from tests.onnx_backend.cases import summarize
    s = summarize(records)
    tr = terminalreporter
    tr.section("aotc ONNX node-suite coverage")
    tr.write_line(f"cases run: {s['cases']}  " + "  ".join(f"{k}={v}" for k, v in s["counts"].items()))
    tr.write_line(f"op types fully supported: {len(s['op_types_supported'])} of {s['op_types_seen']} seen")
    tr.write_line("  " + " ".join(s["op_types_supported"]))
    if s["op_types_partial"]:
        tr.write_line(f"op types with some failing/unlisted cases: {' '.join(s['op_types_partial'])}")
    path = os.environ.get("AOTC_ONNX_COVERAGE_JSON")
    if path:
        with open(path, "w") as f:
            json.dump(dict(s, records=sorted(records)), f, indent=1)
