"""Theoretical occupancy against hand-worked examples (each limiter in turn) and a real cubin."""
from __future__ import annotations

import pytest

from aotc.errors import AotcError
from aotc.kernels.resources import KernelResources
from aotc.profile.occupancy import occupancy


def usage(regs: int, static_smem: int = 0) -> KernelResources:
    return KernelResources(registers=regs, static_smem=static_smem, local_bytes=0)


def test_limited_by_registers():
    # 128 regs x 32 lanes = 4096 per warp; a partition's 16384 hold 4 warps; 8 warps put 2 on each.
    o = occupancy(usage(128), (1000,), (256,), 0, "sm_90")
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (2, 16, "registers")
    assert o.occupancy == 0.25
    assert o.waves == pytest.approx(1000 / (2 * 132))


def test_blocks_of_fewer_warps_than_partitions_share_them():
    # 128 regs: 4 warps a partition, 16 an SM. 2-warp blocks: 8 of them (the hardware's per-block
    # check rounds a block to 4 warps, but the SM allocates warps, not rounded blocks).
    o = occupancy(usage(128), (1000,), (64,), 0, "sm_90")
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (8, 16, "registers")
    # 1-warp blocks at 168 regs (5376 a warp): 3 warps a partition, 12 blocks; 3-warp blocks: 4.
    assert occupancy(usage(168), (1000,), (32,), 0, "sm_80").blocks_per_sm == 12
    assert occupancy(usage(168), (1000,), (96,), 0, "sm_80").blocks_per_sm == 4


def test_register_allocation_rounds_up_per_warp():
    # 33 regs -> 1056 per warp, rounded to 1280: 12 warps per partition, 3 blocks of 16 warps.
    o = occupancy(usage(33), (1,), (512,), 0, "sm_80")
    assert (o.blocks_per_sm, o.limiter) == (3, "registers")


def test_limited_by_shared_memory():
    # 100 KiB + 1 KiB reserve per block: 2 blocks in 228 KiB on sm_90, 1 in 164 KiB on sm_80.
    o90 = occupancy(usage(32, static_smem=4096), (264,), (128,), 96 * 1024, "sm_90")
    assert (o90.blocks_per_sm, o90.warps_per_sm, o90.limiter) == (2, 8, "shared memory")
    assert o90.waves == 1.0
    o80 = occupancy(usage(32, static_smem=4096), (264,), (128,), 96 * 1024, "sm_80")
    assert (o80.blocks_per_sm, o80.limiter) == (1, "shared memory")
    assert o80.waves == pytest.approx(264 / 108)


def test_limited_by_threads():
    o = occupancy(usage(16), (8,), (1024,), 0, "sm_90")
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter, o.occupancy) == (2, 64, "threads", 1.0)


def test_limited_by_blocks():
    o = occupancy(usage(16), (64,), (32,), 0, "sm_90")
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (32, 32, "blocks")


def test_a_block_that_does_not_fit_is_an_error():
    with pytest.raises(AotcError, match="shared memory exhausted"):
        occupancy(usage(32), (1,), (128,), 200 * 1024, "sm_80")
    with pytest.raises(AotcError, match="no occupancy limits for arch 'sm_70'"):
        occupancy(usage(32), (1,), (128,), 0, "sm_70")
