"""Profile an engine: run it once on the cpu device with a profiling host build and report per kernel.

The engine carries its kernels' CUDA source (sanitize.manifest_fields), so a
profiling host build (host_compile.compile_host(profile=True)) is rebuilt from
it, run through the C runtime on random inputs, and each launch's counters
(one JSON line per launch, in launch order) are joined with what the cubins
say per arch: occupancy (occupancy.py), the main loop's instruction mix and
local memory (sass.py), and a predicted H200 time (model.py), set beside the
roofline floor `aotc inspect` prints.
"""
from __future__ import annotations

import json
import os
import re
import tempfile

from aotc.errors import AotcError
from aotc.package.dim_values import choose_dims, concrete_spec
from aotc.package.engine_format import read_engine
from aotc.package.inspect import H200_BANDWIDTH, H200_FP32_FLOPS, H200_TC_FLOPS, uses_tensor_cores
from aotc.package.sample_inputs import random_inputs
from aotc.profile import model, sampling, sass
from aotc.profile.occupancy import SM_LIMITS, occupancy

PREDICTED_ARCH = "sm_90"     # the model's figures are an H200's


def kernel_kind(name: str) -> str:
    """`aotc_dot_mma_3f2a9c01b2d4` -> `dot_mma`: the template family, without the region's hash."""
    return re.sub(r"(_[0-9a-f]{6,}|_v?\d+)+$", "", re.sub(r"^aotc_", "", name)) or name


def run_counters(data: bytes, dims: dict[str, int], seed: int = 0,
                 sample_blocks: int | None = None) -> tuple[list[dict], dict[str, int]]:
    """Each launch's counters from one profiled cpu run of engine `data`, and the dims it ran at."""
    counters, values, _ = profiled_run(data, dims, seed, sample_blocks)
    return counters, values


def profiled_run(data: bytes, dims: dict[str, int], seed: int = 0,
                 sample_blocks: int | None = None) -> tuple[list[dict], dict[str, int], dict]:
    """One profiled cpu run of engine `data`: each launch's counters (block sums scaled to the grid when
    `sample_blocks` samples them, sampling.py), the dims it ran at, and the outputs."""
    from aotc.package.runtime_binding import Engine
    from aotc.package.sanitize import kernel_source, read_report, sanitized_engine
    eng = Engine(sanitized_engine(data, profile=True))
    values = choose_dims(eng.dims, dims)
    inputs = random_inputs([concrete_spec(s, eng.dims, values) for s in eng.inputs], seed)
    env = {}
    if sample_blocks is not None:
        env = sampling.sampling_env(sample_blocks, seed, sampling.kernel_policies(kernel_source(data)))
    with tempfile.TemporaryDirectory(prefix="aotc-profile-") as tmp:
        env["AOTC_PROFILE_REPORT"] = os.path.join(tmp, "profile.jsonl")
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            outputs = eng.create_context(device="cpu").run(inputs)
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        counters = read_report(env["AOTC_PROFILE_REPORT"])
    return [sampling.scale_counters(c) for c in counters], values, outputs


def _match(launches, counters: list[dict]) -> list[tuple[object, dict]]:
    """Pair each counter line with the plan launch it came from (launches a predicate skipped have none)."""
    out, i = [], 0
    for c in counters:
        while i < len(launches) and launches[i].kernel != c["kernel"]:
            i += 1
        if i == len(launches):
            raise AotcError(f"profile: launch of {c['kernel']} matches no launch of the engine's plan")
        out.append((launches[i], c))
        i += 1
    return out


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def _kernel_entry(launch, c: dict, usage: dict, mixes: dict, sampled: bool = False) -> dict:
    g = {"requests": c["load_requests"] + c["store_requests"],
         "load_efficiency": _ratio(c["load_bytes"], 32 * c["load_sectors"]),
         "store_efficiency": _ratio(c["store_bytes"], 32 * c["store_sectors"]),
         "sectors_per_request": _ratio(c["load_sectors"] + c["store_sectors"],
                                       c["load_requests"] + c["store_requests"]),
         "unique_bytes": 32 * (c["unique_load_sectors"] + c["unique_store_sectors"]),
         "modelled_bytes": launch.bytes,
         "atomic_requests": c.get("atomic_requests", 0)}    # apart from the stores, as Nsight Compute
    run, total = c["sampled_blocks"]
    if run < total:
        g["unique_bytes"] = None        # the sampled blocks' unique sectors do not scale (sampling.py)
    sh = {"accesses": c["shared_requests"], "bank_conflicts": c["shared_wavefronts"] - c["shared_phases"]}
    entry = {"name": launch.kernel, "kind": kernel_kind(launch.kernel), "grid": c["grid"], "block": c["block"],
             "global": g, "shared": sh, "occupancy": {}, "spill_bytes": {}, "sass": {}, "predicted_us": {}}
    if sampled:
        entry["sampled_blocks"] = [run, total]
    for arch, per in usage.items():
        res = per.get(launch.kernel)
        if res is None:
            continue
        if arch in SM_LIMITS:
            entry["occupancy"][arch] = occupancy(res, c["grid"], c["block"], launch.smem, arch).as_dict()
        entry["spill_bytes"][arch] = res.local_bytes
        mix = (mixes.get(arch) or {}).get(launch.kernel)
        entry["sass"][arch] = mix
    mix90 = (mixes.get(PREDICTED_ARCH) or {}).get(launch.kernel)
    entry["bound"] = model.bound(launch.kernel, launch.bytes, launch.flops)
    entry["predicted_us"][PREDICTED_ARCH] = round(
        model.predicted_s(launch.kernel, launch.bytes, launch.flops, c, mix90) * 1e6, 3)
    return entry


def profile_engine(data: bytes, dims: dict[str, int] | None = None, archs: list[str] | None = None,
                   seed: int = 0, sample_blocks: int | None = None) -> dict:
    """The profile of engine image `data` (the `aotc profile --json` document).

    `sample_blocks` N runs at most N blocks of each launch (sampling.py): every kernel entry then has
    "sampled_blocks": [run, total], its requests and shared accesses are scaled to the grid, its
    unique_bytes is None, and the document has "sample_blocks": N.
    """
    from aotc.kernels.resources import cubin_resources
    plan = read_engine(data)
    want = archs or sorted(plan.cubins)
    missing = [a for a in want if a not in plan.cubins]
    if missing:
        have = ", ".join(sorted(plan.cubins)) or "none (compiled with --arch none)"
        raise AotcError(f"the engine has no cubin for {', '.join(missing)}; it has: {have}")
    usage = {a: cubin_resources(plan.cubins[a]) for a in want}
    mixes = {a: sass.cubin_mix(plan.cubins[a]) for a in want}
    counters, values = run_counters(data, dims or {}, seed, sample_blocks)
    sampled = sample_blocks is not None
    kernels = [_kernel_entry(l, c, usage, mixes, sampled) for l, c in _match(plan.launches, counters)]
    counted = [l for l, _ in _match(plan.launches, counters)]
    floor = sum(max(l.bytes / H200_BANDWIDTH,
                    l.flops / (H200_TC_FLOPS if uses_tensor_cores(l.kernel) else H200_FP32_FLOPS)) for l in counted)
    doc = {"dims": values, "archs": want,
            "sass_tool": sass.nvdisasm_path(),
            "kernels": kernels,
            "predicted_us": {PREDICTED_ARCH: round(sum(k["predicted_us"][PREDICTED_ARCH] for k in kernels), 3)},
            "roofline_floor_us": {PREDICTED_ARCH: round(floor * 1e6, 3)},
            "model": {"bandwidth_bytes_per_s": H200_BANDWIDTH, "fp32_flops": H200_FP32_FLOPS,
                      "tensor_core_flops": H200_TC_FLOPS, "launch_overhead_s": model.LAUNCH_OVERHEAD_S}}
    if sampled:
        doc["sample_blocks"] = sample_blocks
    return doc


def format_profile(p: dict) -> str:
    """The human-readable table: one line per launch, then the totals."""
    archs = p["archs"]
    lines = []
    if p["dims"]:
        lines.append("at " + ", ".join(f"{k}={v}" for k, v in p["dims"].items()))
    if "sample_blocks" in p:
        n = sum(1 for k in p["kernels"] if k["sampled_blocks"][0] < k["sampled_blocks"][1])
        lines.append(f"sampled: at most {p['sample_blocks']} blocks per launch; {n} of {len(p['kernels'])} "
                     "launches ran a sample, their counts scaled by blocks in the grid / blocks run")
    if p["sass_tool"] is None:
        lines.append("instruction mix: nvdisasm not found (pip install nvidia-cuda-nvdisasm); no SASS section")
    head = f"{'kernel':<28} {'ld eff':>7} {'st eff':>7} {'sec/req':>7} {'smem acc':>8} {'conflicts':>9}"
    for a in archs:
        head += f" {'occ ' + a:>22} {'spill':>5} {'mma/ffma':>9}"
    lines.append(head + f" {'bound':>7} {'pred us':>9}")

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"
    for k in p["kernels"]:
        g, sh = k["global"], k["shared"]
        row = (f"{k['name'][:28]:<28} {pct(g['load_efficiency']):>7} {pct(g['store_efficiency']):>7} "
               f"{'-' if g['sectors_per_request'] is None else format(g['sectors_per_request'], '.2f'):>7} "
               f"{sh['accesses']:>8} {sh['bank_conflicts']:>9}")
        for a in archs:
            o = k["occupancy"].get(a)
            occ = f"{o['warps_per_sm']}w {o['limiter'][:8]} {o['waves']:.3g}wv" if o else "-"
            mix = k["sass"].get(a)
            # a straight-line tensor-core kernel's shares (no main loop) are marked s
            share = "-" if not mix or not (mix["loop_instructions"] or mix.get("straight_line_instructions")) \
                else f"{100 * mix['tensor_share']:.0f}/{100 * mix['ffma_share']:.0f}%" + \
                ("" if mix["loop_instructions"] else "s")
            row += f" {occ:>22} {k['spill_bytes'].get(a, '-'):>5} {share:>9}"
        lines.append(row + f" {k['bound']:>7} {k['predicted_us'][PREDICTED_ARCH]:>9.2f}")
    a = PREDICTED_ARCH
    lines.append(f"predicted H200 time {p['predicted_us'][a]:.2f} us over {len(p['kernels'])} launches; "
                 f"roofline floor {p['roofline_floor_us'][a]:.2f} us "
                 f"({p['predicted_us'][a] / max(p['roofline_floor_us'][a], 1e-9):.2f}x)")
    return "\n".join(lines)


def to_json(p: dict) -> str:
    return json.dumps(p, indent=2)
