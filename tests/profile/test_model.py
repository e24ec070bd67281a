"""The predicted-time model, term by term."""
from __future__ import annotations

import pytest

from aotc.profile import model


def counts(load_bytes, load_sectors, store_bytes=0, store_sectors=0) -> dict:
    return {"load_bytes": load_bytes, "load_sectors": load_sectors, "store_bytes": store_bytes,
            "store_sectors": store_sectors}


def test_a_coalesced_memory_bound_launch_runs_at_bandwidth_plus_overhead():
    t = model.predicted_s("aotc_ew_1", 4.3e9, 0, counts(128, 4, 128, 4), None)
    assert t == pytest.approx(1e-3 + model.LAUNCH_OVERHEAD_S)


def test_stride_32_costs_eight_times_the_bytes():
    eff = model.global_efficiency(counts(128, 32))
    assert eff == 0.125
    t = model.predicted_s("aotc_ew_1", 4.3e9, 0, counts(128, 32), None)
    assert t == pytest.approx(8e-3 + model.LAUNCH_OVERHEAD_S)


def test_compute_bound_mma_scales_with_the_tensor_share():
    mix = {"loop_instructions": 100, "tensor_share": 0.125, "ffma_share": 0.0}
    assert model.issue_efficiency("aotc_dot_mma_3", mix) == 0.5
    t = model.predicted_s("aotc_dot_mma_3", 1000, 790e9, None, mix)
    assert t == pytest.approx(2e-3 + model.LAUNCH_OVERHEAD_S)
    assert model.issue_efficiency("aotc_dot_mma_3", None) == 1.0


def test_straight_line_mma_is_charged_its_share_not_a_free_issue():
    """A K loop unrolled away (an attention whose keys fit one tile) still issues its other instructions."""
    straight = {"loop_instructions": 0, "straight_line_instructions": 400, "tensor_share": 0.05, "ffma_share": 0.0}
    assert model.issue_efficiency("aotc_attention_mma_1", straight) == pytest.approx(0.2)
    assert model.issue_efficiency("aotc_attention_mma_1", dict(straight, straight_line_instructions=0)) == 1.0


def test_one_flop_instructions_count_half_an_ffma():
    """A max-pool's loop has FMNMX and no FFMA: it runs at the issue rate of its one-flop instructions."""
    pool = {"loop_instructions": 100, "tensor_share": 0.0, "ffma_share": 0.0, "fp_other_share": 0.4}
    assert model.issue_efficiency("aotc_window_1", pool) == pytest.approx(0.2)
    mixed = {"loop_instructions": 100, "tensor_share": 0.0, "ffma_share": 0.5, "fp_other_share": 0.2}
    assert model.issue_efficiency("aotc_dot_1", mixed) == pytest.approx(0.6)
    old = {"loop_instructions": 100, "tensor_share": 0.0, "ffma_share": 0.3}      # a mix without the field
    assert model.issue_efficiency("aotc_dot_1", old) == pytest.approx(0.3)


@pytest.mark.parametrize("grid,fill", [((24, 1, 1), 24 / 132), ((132, 1, 1), 1.0), ((200, 1, 1), 200 / 264),
                                       ((6, 4, 11), 1.0), ((1, 1, 1), 1 / 132), (None, 1.0)])
def test_sm_fill_is_the_share_of_sm_time_the_grid_keeps_busy(grid, fill):
    assert model.sm_fill(grid) == pytest.approx(fill)
    assert model.sm_fill(grid, (128, 1, 1)) == pytest.approx(fill)          # 4 warps: a whole SM's partitions


def test_sm_fill_counts_partitions_not_blocks():
    """A one-warp block runs on one of an SM's 4 partitions: 96 of them use the tensor cores 24 four-warp
    blocks use; 8 warps fill no more than 4."""
    assert model.sm_fill((96, 1, 1), (32, 1, 1)) == pytest.approx(model.sm_fill((24, 1, 1), (128, 1, 1)))
    assert model.sm_fill((96, 1, 1), (32, 1, 1)) == pytest.approx(96 / 528)
    assert model.sm_fill((264, 1, 1), (64, 1, 1)) == pytest.approx(1.0)    # 2 two-warp blocks an SM
    assert model.sm_fill((24, 1, 1), (256, 1, 1)) == pytest.approx(24 / 132)


def test_a_grid_short_of_the_sms_pays_in_compute_not_in_memory():
    """24 blocks of a compute-bound GEMM use 24 of 132 SMs' tensor cores; a memory-bound launch is unchanged."""
    mix = {"loop_instructions": 100, "tensor_share": 0.25, "ffma_share": 0.0}
    full = dict(counts(128, 4), grid=[132, 1, 1])
    short = dict(counts(128, 4), grid=[24, 1, 1])
    t_full = model.predicted_s("aotc_dot_mma_3", 1000, 790e9, full, mix) - model.LAUNCH_OVERHEAD_S
    t_short = model.predicted_s("aotc_dot_mma_3", 1000, 790e9, short, mix) - model.LAUNCH_OVERHEAD_S
    assert t_full == pytest.approx(1e-3) and t_short == pytest.approx(1e-3 * 132 / 24)
    assert model.predicted_s("aotc_ew_1", 4.3e9, 0, short, None) == pytest.approx(1e-3 + model.LAUNCH_OVERHEAD_S)


def test_bound_is_the_roofline_classification():
    # 1 MB at 4.3 TB/s is 233 ns: 100 MFLOP on CUDA cores (60 TFLOP/s) take 1.7 us, on tensor cores 127 ns
    assert model.bound("aotc_dot_x", 10**6, 10**8) == "compute"
    assert model.bound("aotc_dot_mma_x", 10**6, 10**8) == "memory"
    assert model.bound("aotc_loop_x", 10**6, 10**6) == "memory"
