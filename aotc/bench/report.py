"""How a bench result is shown: one table, JSON, CSV, and a latency chart.

The table has one row per system, including the ones that could not run
(their reason in place of numbers), so a reader sees what was compared and
what was not. matplotlib is imported only for `--plot`.
"""
from __future__ import annotations

import csv
import json

COLUMNS = [("system", "system"), ("precision", "prec"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"),
           ("runs", "runs"), ("throughput", "inf/s"), ("max_abs_err", "max abs err"),
           ("max_rel_err", "max rel err"), ("build_s", "build s")]


def _cell(key: str, value) -> str:
    if value is None:
        return "-"
    if key in ("p50_ms", "p99_ms"):
        return f"{value:.3f}" if value < 100 else f"{value:.1f}"
    if key == "throughput":
        return f"{value:.3g}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    if key in ("max_abs_err", "max_rel_err"):
        return f"{value:.2e}"
    if key == "build_s":
        return f"{value:.2f}"
    if key == "pct_of_roofline":
        return f"{value:.1f}%"
    return str(value)


def format_table(result: dict) -> str:
    cols = list(COLUMNS) + ([("pct_of_roofline", "% roofline")] if result["device"] == "cuda" else [])
    lines = [f"aotc bench {result['model']} on {result['device']}: batch {result['batch']}, "
             f"{result['precision']}, {result['input_sets']} input sets, warm-up {result['warmup']}, "
             f"reference {result['reference']}"]
    rows = []
    for r in result["rows"]:
        if r["status"] == "ok":
            rows.append([_cell(k, r.get(k)) for k, _ in cols])
        else:
            rows.append([r["system"], r.get("precision", "-"), r["status"]])
    widths = [max([len(h)] + [len(row[i]) for row in rows if len(row) == len(cols)]) for i, (_, h) in enumerate(cols)]
    lines.append("  ".join(h.rjust(w) if i > 1 else h.ljust(w) for i, ((_, h), w) in enumerate(zip(cols, widths))))
    for row in rows:
        if len(row) == len(cols):
            lines.append("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        else:
            lines.append(f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}")
    floor = result.get("roofline_floor_ms")
    if floor is not None:
        lines.append(f"roofline floor of the aotc engine (H200 model: modelled bytes and FLOPs at peak): "
                     f"{floor * 1e3:.3g} us")
    return "\n".join(lines)


def write_json(result: dict, path) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=2, default=float)
        f.write("\n")


CSV_FIELDS = ["model", "device", "batch", "system", "precision", "status", "p50_ms", "p99_ms", "runs",
              "throughput", "max_abs_err", "max_rel_err", "build_s", "pct_of_roofline", "roofline_floor_ms"]


def csv_rows(result: dict) -> list[dict]:
    meta = {k: result.get(k) for k in ("model", "device", "batch", "roofline_floor_ms")}
    return [{**meta, **{k: r.get(k) for k in CSV_FIELDS if k in r}} for r in result["rows"]]


def write_csv(results: list[dict] | dict, path) -> None:
    results = [results] if isinstance(results, dict) else results
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for result in results:
            for row in csv_rows(result):
                w.writerow({k: ("" if v is None else v) for k, v in row.items()})


def write_plot(result: dict, path) -> None:
    """A PNG: p50 latency per system (p99 as the error bar), the roofline floor as a line."""
    try:
        import matplotlib
    except ImportError:
        from aotc.errors import AotcError
        raise AotcError("--plot needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in result["rows"] if r.get("p50_ms") is not None]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(rows) + 2), 4))
    names = [f"{r['system']}\n{r['precision']}" for r in rows]
    p50 = [r["p50_ms"] for r in rows]
    extra = [max(0.0, r["p99_ms"] - r["p50_ms"]) for r in rows]
    ax.bar(names, p50, yerr=[[0.0] * len(rows), extra], capsize=4, color="#4c72b0", label="p50 (bar: p99)")
    floor = result.get("roofline_floor_ms")
    if floor:
        ax.axhline(floor, color="#c44e52", linestyle="--", label=f"H200 roofline floor {floor * 1e3:.3g} us")
    ax.set_ylabel("latency, ms")
    if floor and p50 and max(p50) / floor > 100:
        ax.set_yscale("log")
    ax.set_title(f"{result['model']} on {result['device']}, batch {result['batch']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def format_suite(results: list[dict]) -> str:
    """One table over many bench results: a row per (model, batch, system); unavailable systems omitted."""
    cuda = any(r["device"] == "cuda" for r in results)
    head = ["model", "batch", "system", "prec", "p50 ms", "p99 ms", "runs", "inf/s", "max abs err",
            "max rel err", "build s"] + (["% roofline"] if cuda else [])
    keys = ["p50_ms", "p99_ms", "runs", "throughput", "max_abs_err", "max_rel_err", "build_s"] + \
        (["pct_of_roofline"] if cuda else [])
    rows = []
    for res in results:
        for r in res["rows"]:
            if r["status"] == "ok":
                rows.append([res["model"], str(res["batch"]), r["system"], r["precision"]]
                            + [_cell(k, r.get(k)) for k in keys])
            elif r["status"].startswith("failed"):
                rows.append([res["model"], str(res["batch"]), r["system"], r["precision"], r["status"]])
    full = [r for r in rows if len(r) == len(head)]
    widths = [max([len(h)] + [len(r[i]) for r in full]) for i, h in enumerate(head)]

    def line(cells):
        if len(cells) != len(head):
            return "  ".join(c.ljust(w) for c, w in zip(cells[:4], widths)) + "  " + cells[4]
        return "  ".join(c.ljust(w) if i in (0, 2, 3) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(head)] + [line(r) for r in rows]
    floors = {(res["model"], res["batch"], res["precision"]): res.get("roofline_floor_ms") for res in results}
    notes = [f"{m} b{b} {p}: {f * 1e3:.3g} us" for (m, b, p), f in floors.items() if f is not None]
    if notes:
        out.append("H200 roofline floor of each engine: " + "; ".join(notes))
    return "\n".join(out)
