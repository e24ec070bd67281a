"""Results of the GPU check scripts (bench/gpu_*.py): one error rule, guarded models, one report.

Why a module: the checks run once on a borrowed GPU, so each must judge
accuracy the same way and survive any one model's failure. The error rule is
aotc.bench.measure.max_errors's: a relative error is NaN-proof (a non-finite
value on either side is an infinite error), so `err <= tol` is the only
comparison ever made. `Rows.guard` turns an exception inside one model into
an error row and lets the script go on. Each script writes its rows with
`--json` (after every row, so a check stopped by its time limit keeps them);
`python -m aotc.bench.gpu_report OUT.json PART.json...` merges the parts into
one file and prints one table (bench/gpu_all.sh).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import traceback

import numpy as np

from aotc.bench.measure import max_errors


def rel_error(got, want) -> float:
    """max |got - want| / max |want| over the arrays given (lists of outputs or single arrays)."""
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    return max_errors([np.asarray(g) for g in got], [np.asarray(w) for w in want])[1]


def within(err: float | None, tol: float) -> bool:
    """err <= tol for a real number; NaN, inf and a missing error all fail."""
    return err is not None and math.isfinite(err) and err <= tol


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    text = f"{type(e).__name__}: {text}"
    return text if len(text) <= 240 else text[:237] + "..."


class Rows:
    """The rows of one check: one per (model, precision) or per case."""

    def __init__(self, check: str, json_path: str | None = None):
        self.check, self.json_path = check, json_path
        self.rows: list[dict] = []
        self.meta: dict = {}

    def add(self, model: str, precision: str | None, ok: bool, **fields) -> dict:
        row = {"check": self.check, "model": model, "precision": precision, "status": "pass" if ok else "FAIL",
               **fields}
        self.rows.append(row)
        self.write()  # after every row: a check stopped by its time limit keeps what it measured
        return row

    @contextlib.contextmanager
    def guard(self, model: str, precision: str | None = None):
        """An exception inside the block becomes an error row; the script goes on."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - one model's failure must not stop the rest
            print(f"{model} {precision or ''}: ERROR {one_line(e)}", flush=True)
            traceback.print_exc(file=sys.stderr)
            self.rows.append({"check": self.check, "model": model, "precision": precision, "status": "error",
                              "detail": one_line(e)})
            self.write()

    @property
    def failed(self) -> bool:
        return any(r["status"] != "pass" for r in self.rows)

    def write(self, **meta) -> None:
        """Writes the rows (and `meta`, kept for later writes) to the JSON path, if there is one."""
        self.meta.update(meta)
        if self.json_path:
            tmp = self.json_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"check": self.check, **self.meta, "rows": self.rows}, f, indent=1, default=_plain)
            os.replace(tmp, self.json_path)


def _plain(v):
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, np.bool_):
        return bool(v)
    return str(v)


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if math.isfinite(v) else str(v)
    return "" if v is None else str(v)


def table(rows: list[dict]) -> str:
    """One fixed-width table: check, model, precision, status, then each row's other fields."""
    lines = [f"{'check':<18} {'model':<24} {'prec':<5} {'status':<6} details"]
    for r in rows:
        extra = "  ".join(f"{k}={_cell(v)}" for k, v in r.items()
                          if k not in ("check", "model", "precision", "status") and v not in (None, ""))
        lines.append(f"{r['check']:<18} {r['model']:<24} {r.get('precision') or '':<5} {r['status']:<6} {extra}")
    failed = sum(r["status"] != "pass" for r in rows)
    lines.append(f"{len(rows)} rows, {failed} not passing")
    return "\n".join(lines)


def merge(out_path: str, parts: list[str], meta: dict | None = None) -> dict:
    """Merges the parts' rows (a missing or unreadable part is an error row) into one JSON file."""
    rows, checks = [], []
    for p in parts:
        try:
            with open(p) as f:
                data = json.load(f)
            checks.append({k: v for k, v in data.items() if k != "rows"})
            rows.extend(data["rows"])
        except (OSError, ValueError, KeyError) as e:
            rows.append({"check": p.rsplit("/", 1)[-1].split(".")[0], "model": "(whole check)", "precision": None,
                         "status": "error", "detail": f"no results ({one_line(e)}): the check crashed or ran "
                                                      f"out of time; see its log"})
    result = {**(meta or {}), "checks": checks, "rows": rows,
              "passed": bool(rows) and all(r["status"] == "pass" for r in rows)}
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    return result


def note_incomplete(path: str, check: str, detail: str) -> None:
    """Adds an error row to a check's part file (made if missing): it stopped before its end."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {"check": check, "rows": []}
    data["rows"].append({"check": check, "model": "(rest of the check)", "precision": None, "status": "error",
                         "detail": detail})
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[1] == "--incomplete":  # --incomplete PART CHECK DETAIL
        note_incomplete(argv[2], argv[3], argv[4])
        return 0
    if len(argv) < 3:
        print("usage: python -m aotc.bench.gpu_report OUT.json PART.json... [--meta KEY=VALUE...]", file=sys.stderr)
        return 2
    parts = [a for a in argv[2:] if "=" not in a]
    meta = dict(a.split("=", 1) for a in argv[2:] if "=" in a)
    result = merge(argv[1], parts, meta)
    print(table(result["rows"]))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
