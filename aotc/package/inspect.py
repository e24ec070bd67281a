"""What `aotc inspect` shows: an engine's signature, kernels, memory and targets.

Reads the engine with the validating reader (a corrupt file is an
EngineFormatError, not a crash) and derives the modelled totals and the
roofline floor: the time the kernels would take if each ran at the memory
bandwidth or the arithmetic peak, whichever binds.
"""
from __future__ import annotations

from aotc.package.engine_format import read_engine, read_manifest

# H200 defaults (datasheet-class figures; override with arguments)
H200_BANDWIDTH = 4.3e12          # bytes/s
H200_FP32_FLOPS = 60e12          # FLOP/s


def roofline_floor_s(launches, bandwidth=H200_BANDWIDTH, flops_rate=H200_FP32_FLOPS) -> float:
    return sum(max(l.bytes / bandwidth, l.flops / flops_rate) for l in launches)


def describe_engine(data: bytes) -> dict:
    plan = read_engine(data)
    manifest = read_manifest(data)
    kernels = [{"name": l.kernel, "region": l.region, "grid": list(l.grid), "block": list(l.block),
                "smem": l.smem, "bytes": l.bytes, "flops": l.flops} for l in plan.launches]
    total_bytes = sum(l.bytes for l in plan.launches)
    total_flops = sum(l.flops for l in plan.launches)
    return {
        "aotc_version": manifest.get("aotc_version"),
        "format_version": manifest.get("format_version"),
        "inputs": [{"name": s.name, "dtype": s.dtype, "shape": list(s.shape)} for s in plan.inputs],
        "outputs": [{"name": s.name, "dtype": s.dtype, "shape": list(s.shape)} for s in plan.outputs],
        "kernels": kernels,
        "distinct_kernels": len(plan.kernels),
        "arena_bytes": plan.arena_size,
        "arena_lower_bound": manifest.get("arena_lower_bound"),
        "weights_bytes": len(plan.weights),
        "archs": sorted(plan.cubins),
        "ptx": plan.ptx_arch or None,
        "host_build": bool(plan.host_lib),
        "engine_bytes": len(data),
        "total_bytes": total_bytes,
        "total_flops": total_flops,
        "roofline_floor_us_h200": roofline_floor_s(plan.launches) * 1e6,
    }


def _fmt_tensor(t) -> str:
    return f"{t['name']}: {t['dtype']}[{','.join(map(str, t['shape']))}]"


def format_description(info: dict, path: str = "") -> str:
    lines = [f"engine {path} (aotc {info['aotc_version']}, {info['engine_bytes']} bytes)"]
    lines.append("inputs:")
    lines += [f"  {_fmt_tensor(t)}" for t in info["inputs"]]
    lines.append("outputs:")
    lines += [f"  {_fmt_tensor(t)}" for t in info["outputs"]]
    lines.append(f"kernels: {len(info['kernels'])} launches, {info['distinct_kernels']} distinct")
    for i, k in enumerate(info["kernels"]):
        lines.append(f"  {i:3d} {k['name']:<28} grid {tuple(k['grid'])} block {tuple(k['block'])} "
                     f"{k['bytes']:>10} B {k['flops']:>12} FLOP  {k['region']}")
    lb = info.get("arena_lower_bound")
    lines.append(f"memory: arena {info['arena_bytes']} B" + (f" (lower bound {lb} B)" if lb is not None else "")
                 + f", weights {info['weights_bytes']} B")
    lines.append(f"modelled: {info['total_bytes']} B moved, {info['total_flops']} FLOP; roofline floor on H200 "
                 f"{info['roofline_floor_us_h200']:.2f} us")
    targets = info["archs"] + ([f"PTX {info['ptx']}"] if info["ptx"] else []) + (["host"] if info["host_build"] else [])
    lines.append(f"targets: {', '.join(targets) or 'none'}")
    return "\n".join(lines)
