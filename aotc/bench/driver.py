"""`aotc bench` end to end: build each system, check it against the reference, time it.

The order is fixed so every system is treated alike: distinct input sets
are drawn once; the reference (onnxruntime CPU fp32, else aotc's
interpreter) runs on each; then per system: availability, build (timed),
outputs on every input set (max abs/rel error against the reference),
then warm-up and timed runs rotating through the same sets. A competitor
that cannot run is a row with its reason; one that fails while building or
running is a row "failed: ..."; only aotc's own failure stops the bench.
"""
from __future__ import annotations

import time

from aotc.bench.competitors import JaxSystem, TensorRTSystem, TorchSystem
from aotc.bench.measure import make_input_sets, max_errors, time_runs
from aotc.bench.systems import AotcSystem, OrtSystem, reference_outputs
from aotc.errors import AotcError

COMPETITORS = ("onnxruntime", "tensorrt", "torch", "jax")


def _systems_for(name: str):
    if name == "onnxruntime":
        return [OrtSystem]
    if name == "tensorrt":
        return [TensorRTSystem]
    if name == "torch":
        return [TorchSystem, lambda *a, **k: TorchSystem(*a, compiled=True, **k)]
    if name == "jax":
        return [JaxSystem]
    raise AotcError(f"unknown competitor '{name}': choose from {', '.join(COMPETITORS)}")


def parse_against(text: str) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    for n in names:
        _systems_for(n)
    return list(dict.fromkeys(names))


def _one_line(e: Exception) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def run_bench(source, device: str = "cpu", against=COMPETITORS, precision: str = "fp32",
              iterations: int = 100, warmup: int = 10, input_count: int = 4, max_seconds: float | None = 30.0,
              seed: int = 0, base_inputs: dict | None = None, arch=None, progress=None) -> dict:
    """Benchmark `source` (aotc.bench.source.Source); returns the result as a JSON-ready dict."""
    say = progress or (lambda msg: None)
    specs = source.input_specs()
    input_sets = make_input_sets(specs, input_count, seed, base_inputs)
    output_names = source.output_names()
    say("running the reference")
    ref_name, reference = reference_outputs(source, output_names, input_sets)
    lead = specs[0].shape if specs else ()
    batch = int(lead[0]) if len(lead) else 1
    result = {"model": source.label, "kind": source.kind, "device": device, "precision": precision,
              "batch": batch, "inputs": {s.name: [s.dtype, list(s.shape)] for s in specs},
              "input_sets": len(input_sets), "iterations": iterations, "warmup": warmup,
              "reference": ref_name, "roofline_floor_ms": None, "rows": []}

    systems = [AotcSystem(source, device, output_names, precision=precision, arch=arch)]
    for name in against:
        systems += [cls(source, device, output_names, precision=precision) for cls in _systems_for(name)]
    for system in systems:
        system.example = input_sets[0]
        row = {"system": system.name, "precision": system.precision, "status": "ok"}
        result["rows"].append(row)
        why = system.unavailable()
        if why:
            row["status"] = why
            continue
        try:
            say(f"building {system.name}")
            t0 = time.perf_counter()
            system.build()
            row["build_s"] = None if getattr(system, "prebuilt", False) else time.perf_counter() - t0
            if reference is not None:
                errs = [max_errors(system.run(f), ref) for f, ref in zip(input_sets, reference)]
                row["max_abs_err"] = max(e[0] for e in errs)
                row["max_rel_err"] = max(e[1] for e in errs)
            say(f"timing {system.name}")
            prepared = [system.prepare(f) for f in input_sets]
            timing = time_runs(system.launch, prepared, iterations, warmup, system.sync, max_seconds,
                               stage=system.stage)
            row.update(p50_ms=timing.p50 * 1e3, p99_ms=timing.p99 * 1e3, runs=timing.runs,
                       throughput=batch / timing.p50)
            if isinstance(system, AotcSystem) and device == "cuda":
                row["cuda_graph"] = system.uses_cuda_graph  # were the timed runs graph replays?
        except Exception as e:  # noqa: BLE001 - a competitor's failure is a row, not a crash
            if isinstance(system, AotcSystem):
                raise
            row["status"] = f"failed: {_one_line(e)}"
        finally:
            system.close()
        if isinstance(system, AotcSystem):
            from aotc.package.inspect import describe_engine
            info = describe_engine(system.engine_bytes)
            result["roofline_floor_ms"] = info["roofline_floor_us_h200"] / 1e3
            result["modelled_bytes"], result["modelled_flops"] = info["total_bytes"], info["total_flops"]
    floor = result["roofline_floor_ms"]
    for row in result["rows"]:
        if device == "cuda" and floor and row.get("p50_ms"):
            row["pct_of_roofline"] = 100.0 * floor / row["p50_ms"]
    return result
