"""Predicted H200 time of a launch: a stated roofline model fed by the profile's measurements.

    memory time  = modelled bytes / (4.3 TB/s x measured global efficiency)
    compute time = modelled FLOPs / (peak x issue efficiency x SM fill)
    predicted    = max(memory time, compute time) + launch overhead

Global efficiency is the profile's bytes used / (sectors x 32) over the
launch's loads and stores (1 when it made no global request). The peak is
inspect's: tensor cores for the mma kernels, CUDA cores otherwise. Issue
efficiency is the main loop's share of math instructions (HMMA/IMMA for the
tensor-core kernels, FFMA/HFMA2 otherwise) over the share that keeps that
unit busy (MATH_SHARE_FOR_PEAK), at most 1; 1 when the SASS is unknown or the
kernel has no loop, except a tensor-core kernel whose mma is straight-line
code (its K loop unrolled away), measured over that code (sass.mix). A
CUDA-core kernel's one-flop instructions (FADD, FMUL, FMNMX and their half2/f64
forms: a pooling window's max, a reduction's sum) count half an FFMA each,
since the peak counts an FFMA as two flops; without them a max-pool, which has
no FFMA at all, was charged at the 1% floor (ResNet-50's at batch 32: 183 us
where its bytes take 15). The launch overhead is what one kernel node of a
CUDA graph costs on Hopper-class parts.

SM fill: the math units are per SM partition (4 an SM, each with its own
tensor core and FMA pipes), a warp runs on one partition and a block on one
SM, so a grid of B blocks of W warps keeps U = B x min(W, 4) of the 4 x S
partitions busy, U / (4S x ceil(U / 4S)) of the time (24 blocks of 4 warps
use 96 of 528: 18%, as do 96 blocks of one warp; 200 four-warp blocks run as
a full round and a 68-block tail: 76%). Counting blocks alone, a one-warp
block looked like a whole SM's math. Memory has no such term: how few SMs saturate HBM depends on the bytes
each keeps in flight, which only a GPU can calibrate. Occupancy (blocks per
SM) has none either: the model is the floor the kernel's own access
pattern, code and grid allow.
"""
from __future__ import annotations

from aotc.fusion.rules.target import PARTITIONS, sm_fill  # noqa: F401  (the model's fill term)
from aotc.package.inspect import H200_BANDWIDTH, H200_FP32_FLOPS, H200_TC_FLOPS, uses_tensor_cores

LAUNCH_OVERHEAD_S = 1.0e-6
# An HMMA.16816 keeps the tensor pipe busy for several issue slots, so one in
# four instructions being an mma saturates it; FFMA issues one per slot.
MATH_SHARE_FOR_PEAK = {"tensor": 0.25, "ffma": 1.0}


def global_efficiency(counts: dict | None) -> float:
    if not counts:
        return 1.0
    sectors = counts["load_sectors"] + counts["store_sectors"]
    return (counts["load_bytes"] + counts["store_bytes"]) / (32 * sectors) if sectors else 1.0


def issue_efficiency(kernel: str, sass_mix: dict | None) -> float:
    if not sass_mix or not (sass_mix.get("loop_instructions") or sass_mix.get("straight_line_instructions")):
        return 1.0
    unit = "tensor" if uses_tensor_cores(kernel) else "ffma"
    share = sass_mix[f"{unit}_share"]
    if unit == "ffma":
        share += 0.5 * sass_mix.get("fp_other_share", 0.0)
    return max(min(1.0, share / MATH_SHARE_FOR_PEAK[unit]), 0.01)




def bound(kernel: str, nbytes: int, flops: int) -> str:
    """"memory" where the kernel's modelled bytes take at least as long at full bandwidth as its FLOPs at
    peak (its arithmetic intensity is at or below the ridge point), else "compute": the roofline's own
    classification, from the kernel alone. The issue-20 target of >= 90% global efficiency is for the
    memory-bound ones; a compute-bound kernel's sectors are hidden under its math."""
    peak = H200_TC_FLOPS if uses_tensor_cores(kernel) else H200_FP32_FLOPS
    return "memory" if nbytes / H200_BANDWIDTH >= flops / peak else "compute"


def predicted_s(kernel: str, nbytes: int, flops: int, counts: dict | None, sass_mix: dict | None) -> float:
    """Seconds one launch of `kernel` takes on an H200 under the model above (the grid from `counts`)."""
    peak = H200_TC_FLOPS if uses_tensor_cores(kernel) else H200_FP32_FLOPS
    memory = nbytes / (H200_BANDWIDTH * max(global_efficiency(counts), 1e-3))
    fill = sm_fill((counts or {}).get("grid"), (counts or {}).get("block"))
    compute = flops / (peak * issue_efficiency(kernel, sass_mix) * fill)
    return max(memory, compute) + LAUNCH_OVERHEAD_S
