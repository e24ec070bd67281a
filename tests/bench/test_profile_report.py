"""bench/profile_report.py's per-model line: byte-weighted efficiency, the flagged launches, the ratio."""
from __future__ import annotations

from bench.profile_report import summary


def kernel(kind, load_eff, nbytes, conflicts=0, spill=0, occ=0.5, bound="memory"):
    return {"kind": kind, "bound": bound, "global": {"load_efficiency": load_eff, "store_efficiency": 1.0, "modelled_bytes": nbytes},
            "shared": {"accesses": 10, "bank_conflicts": conflicts}, "spill_bytes": {"sm_90": spill},
            "occupancy": {"sm_90": {"occupancy": occ}}}


def test_summary_weights_by_bytes_and_counts_the_flagged_launches():
    p = {"kernels": [kernel("dot_mma", 1.0, 3000, conflicts=4, occ=0.125), kernel("ew", 0.5, 1000, spill=16),
                     kernel("reduce", None, 0), kernel("conv", 0.5, 0, bound="compute")],
         "predicted_us": {"sm_90": 12.0}, "roofline_floor_us": {"sm_90": 4.0}}
    line = summary("m:fp16", p)
    assert "4 launches" in line and "load eff  87.5%" in line and "mem-bound <90%:   1" in line
    assert "conflicts 4 of 20 smem requests" in line and "local memory in 1" in line and "occ<25% 1" in line
    assert "(3.00x)" in line


def test_build_model_knows_gpt2_small_reduced_and_full():
    """GPT-2 (pre-LN: its LayerNorms are GEMM prologues) is profiled at the reduced and the full size."""
    import pytest
    from bench.profile_report import build_model
    reduced, feeds = build_model("gpt2_small", 2, False)
    assert feeds["input_ids"].shape == (2, 32)
    _, feeds = build_model("gpt2_small", 1, True)
    assert feeds["input_ids"].shape == (1, 128)
    with pytest.raises(SystemExit, match="gpt2_small"):
        build_model("gpt3", 1, False)


def test_build_model_knows_vit_b16_reduced_and_full():
    """ViT-B/16 (pre-LN, like GPT-2) at 64x64 with 2 layers, and at its full 224x224 with 12."""
    from bench.profile_report import build_model
    reduced, feeds = build_model("vit_b16", 2, False)
    assert feeds["image"].shape == (2, 3, 64, 64)
    assert sum(n.op_type == "MatMul" for n in reduced.graph.node) < 20
    full, feeds = build_model("vit_b16", 1, True)
    assert feeds["image"].shape == (1, 3, 224, 224)
    assert sum(n.op_type == "LayerNormalization" for n in full.graph.node) == 2 * 12 + 1
