"""Theoretical occupancy of one launch per arch, from the cubin's usage and the launch geometry.

How many blocks of a kernel an SM holds at once decides how much latency it
can hide; this is the figure Nsight Compute prints as "theoretical occupancy"
and its limiter. It follows from per-SM limits alone, so it is computed here
from what resources.cubin_resources reads out of the cubin (registers per
thread, static shared memory) and the launch's threads and dynamic shared
memory, with no GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from aotc.errors import AotcError
from aotc.kernels.resources import KernelResources


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one compute capability (and the SM count of its reference part)."""
    arch: str
    sms: int
    max_warps: int
    max_blocks: int
    smem_per_sm: int
    regs_per_sm: int = 64 * 1024
    reg_alloc_unit: int = 256        # registers per warp are allocated in units of 256
    sub_partitions: int = 4          # each SM schedules warps on 4 partitions with 1/4 of the registers
    smem_alloc_unit: int = 128       # shared memory per block is rounded up to 128 bytes
    smem_reserved_per_block: int = 1024


# Sources. CUDA C++ Programming Guide, "Compute Capabilities", technical
# specifications table: 64K 32-bit registers per SM, at most 64 resident warps
# and 32 resident blocks per SM on 8.0 and 9.0, shared memory per SM of 164 KB
# (8.0) and 228 KB (9.0), 1 KB of it reserved by CUDA per block. Allocation
# granularities (256 registers per warp, 4 warp-scheduler sub-partitions each
# with a quarter of the register file, 128-byte shared memory units) follow
# cuda_occupancy.h from the CUDA toolkit (cudaOccMaxBlocksPerSMRegsLimit and
# cudaOccSMemPerBlock). SM counts: A100 whitepaper (108 SMs), H100/H200 SXM
# datasheets (132 SMs).
SM_LIMITS = {
    "sm_80": SmLimits("sm_80", sms=108, max_warps=64, max_blocks=32, smem_per_sm=164 * 1024),
    "sm_90": SmLimits("sm_90", sms=132, max_warps=64, max_blocks=32, smem_per_sm=228 * 1024),
}


def sm_limits(arch: str) -> SmLimits:
    if arch not in SM_LIMITS:
        raise AotcError(f"no occupancy limits for arch {arch!r}; known: {', '.join(sorted(SM_LIMITS))}")
    return SM_LIMITS[arch]


@dataclass(frozen=True)
class Occupancy:
    arch: str
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float            # resident warps / the SM's maximum
    limiter: str                # "threads", "blocks", "registers" or "shared memory"
    waves: float                # the grid's blocks over (blocks per SM x SMs)

    def as_dict(self) -> dict:
        return {"blocks_per_sm": self.blocks_per_sm, "warps_per_sm": self.warps_per_sm,
                "occupancy": round(self.occupancy, 4), "limiter": self.limiter, "waves": round(self.waves, 3)}


def occupancy(usage: KernelResources, grid, block, dyn_smem: int, arch: str) -> Occupancy:
    """Blocks and warps per SM for this launch on `arch`, the resource that limits them, and the waves."""
    lim = sm_limits(arch)
    warps = -(-math.prod(block) // 32)
    if warps > lim.max_warps:
        raise AotcError(f"block {tuple(block)} has {warps} warps, more than an {arch} SM holds ({lim.max_warps})")
    by: dict[str, int] = {"threads": lim.max_warps // warps, "blocks": lim.max_blocks}
    # Registers go to warps in each partition; an SM holds (warps a partition's quarter of the file
    # fits) x 4 warps, in whole blocks (cudaOccMaxBlocksPerSMRegsLimit). Rounding a block's warps up to
    # the partitions is only the hardware's per-block check (resources.check_launch), not the SM's:
    # 64-thread blocks at 128 registers are 8 an SM, not 4.
    per_warp = -(-max(usage.registers, 1) * 32 // lim.reg_alloc_unit) * lim.reg_alloc_unit
    warps_per_partition = lim.regs_per_sm // lim.sub_partitions // per_warp
    by["registers"] = warps_per_partition * lim.sub_partitions // warps
    smem = -(-(usage.static_smem + dyn_smem) // lim.smem_alloc_unit) * lim.smem_alloc_unit
    by["shared memory"] = lim.smem_per_sm // (smem + lim.smem_reserved_per_block)
    limiter = min(by, key=lambda k: by[k])     # first of a tie, in the order above
    blocks = by[limiter]
    if blocks == 0:
        raise AotcError(f"one block does not fit an {arch} SM: {limiter} exhausted")
    return Occupancy(arch, blocks, blocks * warps, blocks * warps / lim.max_warps, limiter,
                     math.prod(grid) / (blocks * lim.sms))
