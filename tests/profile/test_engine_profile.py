"""profile_engine: a hand-made engine whose counters are known, and a compiled model."""
from __future__ import annotations

import base64
import zlib

import pytest

import aotc
from aotc.kernels.host_compile import compile_host, have_host_compiler
from aotc.kernels.nvrtc_compile import compile_device
from aotc.package import plan as P
from aotc.package.engine_format import engine_bytes
from aotc.profile.engine_profile import kernel_kind, profile_engine

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")

# copy: coalesced; gather: lane i reads element 32 * i (the 32 x 32 input's first column).
SOURCE = r"""
extern "C" __global__ void __launch_bounds__(128) copy(const float *__restrict__ x, float *__restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = x[i];
}
extern "C" __global__ void __launch_bounds__(32) gather(const float *__restrict__ x, float *__restrict__ y) {
  y[threadIdx.x] = x[threadIdx.x * 32];
}
"""


def build_hand_engine() -> bytes:
    """Two launches, copy then gather, with sm_80 and sm_90 cubins and their source for the profiling build."""
    x = P.TensorSpec("x", "f32", (32, 32))
    y, z = P.TensorSpec("y", "f32", (32, 32)), P.TensorSpec("z", "f32", (32,))
    launches = [P.Launch("copy", (8, 1, 1), (128, 1, 1), 0, [P.BufferRef("input", 0), P.BufferRef("output", 0)],
                         bytes=8192),
                P.Launch("gather", (1, 1, 1), (32, 1, 1), 0, [P.BufferRef("input", 0), P.BufferRef("output", 1)],
                         bytes=256)]
    plan = P.EnginePlan(inputs=[x], outputs=[y, z], arena_size=256, weights=b"\0" * 256, launches=launches,
                        cubins={"sm_90": compile_device(SOURCE, "sm_90"), "sm_80": compile_device(SOURCE, "sm_80")},
                        host_lib=compile_host(SOURCE, ["copy", "gather"], sanitize=False),
                        manifest={"kernel_source": base64.b64encode(zlib.compress(SOURCE.encode())).decode(),
                                  "kernel_extents": {"copy": [4096, 4096], "gather": [4096, 128]}})
    return engine_bytes(plan)


@pytest.fixture(scope="module")
def hand_engine() -> bytes:
    return build_hand_engine()


def test_hand_engine_counters(hand_engine):
    p = profile_engine(hand_engine)
    copy, gather = p["kernels"]
    assert copy["name"] == "copy" and copy["global"]["load_efficiency"] == 1.0
    assert copy["global"]["sectors_per_request"] == 4.0
    assert copy["global"]["unique_bytes"] == 8192 == copy["global"]["modelled_bytes"]
    assert gather["global"]["load_efficiency"] == 0.125
    assert gather["global"]["sectors_per_request"] == (32 + 4) / 2
    assert copy["shared"] == {"accesses": 0, "bank_conflicts": 0}
    # 128 threads, few registers: 16 blocks of 4 warps fill the 64 warps; 8 blocks over 132 SMs.
    occ = copy["occupancy"]["sm_90"]
    assert (occ["warps_per_sm"], occ["limiter"]) == (64, "threads")
    assert occ["waves"] == pytest.approx(8 / (16 * 132), abs=1e-3)
    assert gather["occupancy"]["sm_80"]["limiter"] == "blocks"
    assert copy["spill_bytes"] == {"sm_80": 0, "sm_90": 0}
    # bytes used / sectors x 32 = (128 + 128) / (36 x 32): the modelled bytes take 4.5x as long
    assert gather["predicted_us"]["sm_90"] == pytest.approx((256 * 4.5 / 4.3e12 + 1e-6) * 1e6, abs=1e-3)
    assert p["predicted_us"]["sm_90"] >= p["roofline_floor_us"]["sm_90"]


def test_a_compiled_model_profiles(tmp_path):
    from aotc.bench.models.small import mlp
    model, _ = mlp()
    path = tmp_path / "mlp.engine"
    aotc.compile(model, str(path), arch="sm_90")
    p = profile_engine(path.read_bytes())
    assert p["kernels"] and all(k["global"]["requests"] > 0 for k in p["kernels"])
    assert sum(k["global"]["modelled_bytes"] for k in p["kernels"]) > 0
    assert p["predicted_us"]["sm_90"] > p["roofline_floor_us"]["sm_90"] > 0


def test_kernel_kind():
    assert kernel_kind("aotc_dot_mma_357302131bdc") == "dot_mma"
    assert kernel_kind("aotc_ew_12") == "ew"


def test_sampled_hand_engine_matches_the_full_run(hand_engine):
    full, samp = profile_engine(hand_engine), profile_engine(hand_engine, sample_blocks=3)
    copy, gather = samp["kernels"]
    assert copy["sampled_blocks"] == [3, 8] and gather["sampled_blocks"] == [1, 1]
    assert samp["sample_blocks"] == 3 and "sample_blocks" not in full and "sampled_blocks" not in full["kernels"][0]
    # every block of the copy does the same: the scaled counts are exact
    assert copy["global"] == dict(full["kernels"][0]["global"], unique_bytes=None)
    assert gather == full["kernels"][1] | {"sampled_blocks": [1, 1]}
    assert samp["predicted_us"] == full["predicted_us"]


# Stated tolerance of a sampled profile against the full one (a few blocks of each launch):
# efficiencies and the bank-conflict share within 0.02, sectors per request, the scaled request
# and shared-access counts within 10%, the model's predicted time within 2%.
def test_a_sampled_model_agrees_with_the_full_profile(tmp_path):
    from aotc.bench.models.small import cnn
    model, _ = cnn()
    path = tmp_path / "cnn.engine"
    aotc.compile(model, str(path), arch="sm_90")
    data = path.read_bytes()
    # 6 blocks a launch: the GEMM's 32 blocks of small tiles differ at the edges (3 blocks: 15% off in
    # sectors/request, 6: 6.4%)
    full, samp = profile_engine(data), profile_engine(data, sample_blocks=6)
    assert any(k["sampled_blocks"][0] < k["sampled_blocks"][1] for k in samp["kernels"])
    for a, b in zip(full["kernels"], samp["kernels"]):
        ga, gb = a["global"], b["global"]
        for key in ("load_efficiency", "store_efficiency"):
            assert (ga[key] is None) == (gb[key] is None)
            if ga[key] is not None:
                assert gb[key] == pytest.approx(ga[key], abs=0.02), (a["name"], key)
        assert gb["sectors_per_request"] == pytest.approx(ga["sectors_per_request"], rel=0.1), a["name"]
        assert gb["requests"] == pytest.approx(ga["requests"], rel=0.1), a["name"]
        sa, sb = a["shared"], b["shared"]
        assert sb["accesses"] == pytest.approx(sa["accesses"], rel=0.1), a["name"]
        assert sb["bank_conflicts"] / max(sb["accesses"], 1) == pytest.approx(
            sa["bank_conflicts"] / max(sa["accesses"], 1), abs=0.02)
    assert samp["predicted_us"]["sm_90"] == pytest.approx(full["predicted_us"]["sm_90"], rel=0.02)
    assert samp["roofline_floor_us"] == full["roofline_floor_us"]
