"""What `aotc inspect` shows: an engine's signature, kernels, memory and targets.

Reads the engine with the validating reader (a corrupt file is an
EngineFormatError, not a crash) and derives the modelled totals and the
roofline floor: the time the kernels would take if each ran at the memory
bandwidth or the arithmetic peak, whichever binds.

A dynamic engine shows its dims and their ranges, each tensor's shape by
dim name (as the compiler wrote it in the manifest) with its max shape, the
arena at the max, and each launch's size-bucket variant. Its totals and
roofline count the launches that run at the largest shape (one variant per
region), since variants of a region never run together.
"""
from __future__ import annotations

from aotc.package.engine_format import read_engine, read_manifest
from aotc.package.host_on_demand import host_library_status
from aotc.package.plan import Reg, evaluate_program

# H200 defaults (measured-class figures; override with `aotc inspect --bandwidth/--fp32-tflops/--tc-tflops`)
H200_BANDWIDTH = 4.3e12          # bytes/s
H200_FP32_FLOPS = 60e12          # FLOP/s, CUDA cores
H200_TC_FLOPS = 790e12           # FLOP/s, bf16/f16 tensor cores


def uses_tensor_cores(kernel_name: str) -> bool:
    return kernel_name.startswith(("aotc_dot_mma_", "aotc_dot_mma8_", "aotc_attention_int8_mma_",
                                    "aotc_attention_mma_"))


EIGHT_BIT_SPEEDUP = 2            # int8 / fp8 tensor-core peak over f16's (H100/H200: 1979 vs 989 TFLOP/s dense)


def roofline_floor_s(launches, bandwidth=H200_BANDWIDTH, flops_rate=H200_FP32_FLOPS,
                     tc_rate=H200_TC_FLOPS, math: dict | None = None) -> float:
    """Sum over launches of max(bytes / bandwidth, flops / peak of the unit the kernel uses);
    `math` (kernel -> math, the manifest's) puts int8/fp8 kernels at the 8-bit tensor-core peak."""
    def rate(kernel):
        if not uses_tensor_cores(kernel):
            return flops_rate
        return tc_rate * (EIGHT_BIT_SPEEDUP if (math or {}).get(kernel) in ("int8", "fp8") else 1)
    return sum(max(l.bytes / bandwidth, l.flops / rate(l.kernel)) for l in launches)


def kernel_math(manifest: dict, kernel: str) -> tuple[str | None, dict]:
    """(math, arch -> what that cubin runs where it differs) as the compiler recorded them (aotc/kernels/
    kernel_math.py); an engine from before the record: the kernel families whose name says it, else None."""
    recorded = manifest.get("kernel_math")
    if isinstance(recorded, dict):
        by_arch = manifest.get("kernel_math_by_arch")
        by_arch = by_arch.get(kernel) if isinstance(by_arch, dict) else None
        return recorded.get(kernel), by_arch if isinstance(by_arch, dict) else {}
    named = {"aotc_dot_tf32_": "tf32", "aotc_conv_int_": "int8"}
    return next((m for prefix, m in named.items() if kernel.startswith(prefix)), None), {}


def runnable_here(data: bytes, plan=None) -> dict:
    """For each device: can the C runtime run this engine on this machine, and why (not).

    An engine whose host library is left to its first cpu run (`plan` given) is runnable on
    cpu through aotc's Python binding, which builds it (aotc/package/host_on_demand.py)."""
    from aotc.errors import AotcError
    from aotc.package.runtime_binding import check_engine
    out = {}
    for device in ("cpu", "cuda"):
        try:
            ok, why = check_engine(data, device)
        except AotcError as e:      # the runtime library itself is unavailable
            ok, why = False, f"runtime unavailable: {e}"
        if device == "cpu" and not ok and plan is not None and host_library_status(plan) == "on first cpu run":
            ok, why = True, ("host build made on the first cpu run from the engine's kernel source "
                             "(aotc run, aotc.Engine); the C runtime alone needs `aotc compile --host`")
        out[device] = {"ok": ok, "why": why}
    return out


def kernel_resources(plan) -> dict[str, dict[str, dict]]:
    """arch -> kernel -> registers, static_smem, local_bytes, read from the engine's own cubins."""
    from aotc.errors import AotcError
    from aotc.kernels.resources import cubin_resources
    out = {}
    for arch, cubin in plan.cubins.items():
        try:
            out[arch] = {k: r.as_dict() for k, r in cubin_resources(cubin).items()}
        except AotcError:        # an unreadable cubin shows no usage; the runtime judges the engine
            pass
    return out


def _fmt_resources(k: dict) -> str:
    """`regs 32/40 smem 4096 B`: registers per arch in the header's order, static + dynamic smem."""
    res = [k["resources"][a] for a in sorted(k.get("resources", {}))]
    if not res:
        return ""
    regs = "/".join(str(r["registers"]) for r in res)
    smem = max(r["static_smem"] for r in res) + k["smem"]
    local = max(r["local_bytes"] for r in res)
    return f" regs {regs} smem {smem} B" + (f" local {local} B" if local else "")


def _tensor(spec, given: dict) -> dict:
    out = {"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape)}
    if not spec.is_static:   # dims by name, as the manifest spells them (None where it does not)
        shape = given.get("shape")
        out["shape"] = list(shape) if isinstance(shape, list) and len(shape) == len(spec.shape) else \
            [d if not isinstance(d, Reg) else None for d in spec.shape]
        out["max_shape"] = list(spec.static_shape)
    return out


def registers_at_max(plan) -> tuple[dict, list | None]:
    """Every dim at its largest value, and the shape program's registers there (None if it fails)."""
    at = {d.name: d.max // d.divisor * d.divisor for d in plan.dims}
    try:
        return at, evaluate_program(plan, at)
    except (ZeroDivisionError, IndexError):   # a program the runtime would refuse at max
        return at, None


def launches_at_max(plan) -> tuple[list, dict]:
    """The launches that run at every dim's max (all of them for a static engine), and those dims."""
    if not plan.dims:
        return list(plan.launches), {}
    at, regs = registers_at_max(plan)
    if regs is None:
        return list(plan.launches), at
    return [l for l in plan.launches if l.when is None or regs[l.when.index]], at


def _grid(grid) -> list:
    return [f"r{g.index}" if isinstance(g, Reg) else g for g in grid]


def describe_engine(data: bytes, bandwidth: float = H200_BANDWIDTH, fp32_flops: float = H200_FP32_FLOPS,
                    tc_flops: float = H200_TC_FLOPS) -> dict:
    plan = read_engine(data)
    manifest = read_manifest(data)
    usage = kernel_resources(plan)
    kernels = [{"name": l.kernel, "region": l.region, "grid": _grid(l.grid), "block": list(l.block),
                "smem": l.smem, "bytes": l.bytes, "flops": l.flops,
                "resources": {a: per[l.kernel] for a, per in usage.items() if l.kernel in per}}
               for l in plan.launches]
    regs = registers_at_max(plan)[1] if plan.dims else None
    for k in kernels:
        k["math"], by_arch = kernel_math(manifest.get("extra") or {}, k["name"])
        if by_arch:
            k["math_by_arch"] = by_arch
    for k, l in zip(kernels, plan.launches):
        if plan.dims:
            k["variant"] = l.variant
            k["when"] = None if l.when is None else f"r{l.when.index}"
            if regs is not None:
                k["grid_at_max"] = [regs[g.index] if isinstance(g, Reg) else g for g in l.grid]
    counted, at_max = launches_at_max(plan)
    total_bytes = sum(l.bytes for l in counted)
    total_flops = sum(l.flops for l in counted)
    given = {t.get("name"): t for t in manifest.get("inputs", []) + manifest.get("outputs", []) if isinstance(t, dict)}
    return {
        "aotc_version": manifest.get("aotc_version"),
        "format_version": manifest.get("format_version"),
        "dims": {d.name: [d.min, d.max] for d in plan.dims},
        "dim_divisors": {d.name: d.divisor for d in plan.dims if d.divisor != 1},
        "totals_at": at_max,
        "inputs": [_tensor(s, given.get(s.name, {})) for s in plan.inputs],
        "outputs": [_tensor(s, given.get(s.name, {})) for s in plan.outputs],
        "kernels": kernels,
        "distinct_kernels": len(plan.kernels),
        "arena_bytes": plan.arena_size,
        "arena_lower_bound": manifest.get("arena_lower_bound"),
        "weights_bytes": len(plan.weights),
        "archs": sorted(plan.cubins),
        "ptx": plan.ptx_arch or None,
        "host_build": bool(plan.host_lib),
        "host_library": host_library_status(plan),
        "engine_bytes": len(data),
        "total_bytes": total_bytes,
        "total_flops": total_flops,
        "roofline_floor_us_h200": roofline_floor_s(counted, bandwidth, fp32_flops, tc_flops,
                                                   {k["name"]: k["math"] for k in kernels}) * 1e6,
        "roofline_assumptions": {"bandwidth_bytes_per_s": bandwidth, "fp32_flops": fp32_flops,
                                 "tensor_core_flops": tc_flops},
        "runnable": runnable_here(data, plan),
    }


def _fmt_tensor(t) -> str:
    text = f"{t['name']}: {t['dtype']}[{','.join('?' if d is None else str(d) for d in t['shape'])}]"
    return text + (f" (max [{','.join(map(str, t['max_shape']))}])" if "max_shape" in t else "")


def _fmt_dims(info: dict) -> str:
    div = info.get("dim_divisors", {})
    return ", ".join(f"{name} {lo}..{hi}" + (f" (multiples of {div[name]})" if name in div else "")
                     for name, (lo, hi) in info["dims"].items())


def format_description(info: dict, path: str = "") -> str:
    lines = [f"engine {path} (aotc {info['aotc_version']}, {info['engine_bytes']} bytes)"]
    dynamic = bool(info.get("dims"))
    if dynamic:
        lines.append(f"dynamic dims: {_fmt_dims(info)}")
    lines.append("inputs:")
    lines += [f"  {_fmt_tensor(t)}" for t in info["inputs"]]
    lines.append("outputs:")
    lines += [f"  {_fmt_tensor(t)}" for t in info["outputs"]]
    lines.append(f"kernels: {len(info['kernels'])} launches, {info['distinct_kernels']} distinct"
                 + (f" (regs per thread on {'/'.join(info['archs'])})" if info["archs"] else ""))
    for i, k in enumerate(info["kernels"]):
        top = k.get("grid_at_max") or k["grid"]     # a register's value at the max shape: r4=512
        grid = "(" + ", ".join(f"{g}={t}" if isinstance(g, str) else str(g) for g, t in zip(k["grid"], top)) + ")"
        variant = f"  [{k['variant'] or 'all sizes'}]" if dynamic else ""
        lines.append(f"  {i:3d} {k['name']:<28} {k.get('math') or '?':<4} grid {grid} block {tuple(k['block'])}"
                     f"{_fmt_resources(k)} {k['bytes']:>10} B {k['flops']:>12} FLOP  {k['region']}{variant}")
    told = set()
    for k in info["kernels"]:               # an arch whose cubin runs other math than the others (fp8 on sm_80)
        if k.get("math_by_arch") and k["name"] not in told:
            told.add(k["name"])
            lines.append(f"  {k['name']} math {k['math']}, except on "
                         + "; ".join(f"{a}: {m}" for a, m in sorted(k["math_by_arch"].items())))
    lb = info.get("arena_lower_bound")
    lines.append(f"memory: arena {info['arena_bytes']} B" + (" at max" if dynamic else "")
                 + (f" (lower bound {lb} B)" if lb is not None else "") + f", weights {info['weights_bytes']} B")
    ra = info.get("roofline_assumptions", {})
    at = info.get("totals_at") or {}
    where = f" at {', '.join(f'{k}={v}' for k, v in at.items())}" if at else ""
    lines.append(f"modelled{where}: {info['total_bytes']} B moved, {info['total_flops']} FLOP; roofline floor "
                 f"{info['roofline_floor_us_h200']:.2f} us (H200 defaults: "
                 f"{ra.get('bandwidth_bytes_per_s', H200_BANDWIDTH) / 1e12:g} TB/s, "
                 f"{ra.get('fp32_flops', H200_FP32_FLOPS) / 1e12:g} TFLOP/s fp32, "
                 f"{ra.get('tensor_core_flops', H200_TC_FLOPS) / 1e12:g} TFLOP/s tensor cores)")
    targets = info["archs"] + ([f"PTX {info['ptx']}"] if info["ptx"] else [])
    host = {"embedded": "host", "on first cpu run": "host (built on first cpu run)"}.get(info.get("host_library", ""))
    lines.append(f"targets: {', '.join(targets + ([host] if host else [])) or 'none'}")
    for device, r in info.get("runnable", {}).items():
        lines.append(f"{device} here: {'yes' if r['ok'] else 'no'}: {r['why']}")
    return "\n".join(lines)
