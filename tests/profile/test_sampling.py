"""sampling: which kernels run in full, what a sampled launch fills, the scaling, and a sampled engine run."""
from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest

from aotc.errors import AotcError
from aotc.kernels.host_compile import compile_host, have_host_compiler
from aotc.kernels.nvrtc_compile import compile_device
from aotc.package import plan as P
from aotc.package.engine_format import engine_bytes
from aotc.profile.sampling import kernel_policies, sampling_env, scale_counters

SPLIT_SIGNATURE = r"""
extern "C" __global__ void __launch_bounds__(256) aotc_dot_ab12cd34ef56(const float *__restrict__ in0,
    const __half *in1, __half *out, float *__restrict__ aotc_ws, unsigned int *__restrict__ aotc_sem) {
  const long long k0 = (long long)(blockIdx.z % 4) * 96;
"""

# scale: 8 blocks of 32, y = 2x; iota: 4 blocks of 32 writing int indices; ksum: split-K over 3
# splits (blockIdx.z) of 4 tiles (blockIdx.x), y[tile] = the sum of x's 3 rows there, the tile's
# last block adding the partials and resetting its counter.
SOURCE = r"""
extern "C" __global__ void __launch_bounds__(32) scale(const float *__restrict__ x, float *__restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 2.0f * x[i];
}
extern "C" __global__ void __launch_bounds__(32) iota(int *__restrict__ idx) {
  idx[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x * blockDim.x + threadIdx.x;
}
extern "C" __global__ void __launch_bounds__(32) ksum(const float *__restrict__ x, float *__restrict__ y,
    float *__restrict__ aotc_ws, unsigned int *__restrict__ aotc_sem) {
  __shared__ unsigned int last;
  const int tile = blockIdx.x, q = blockIdx.z % 3, e = tile * 32 + threadIdx.x;
  aotc_ws[q * 128 + e] = x[q * 128 + e];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(aotc_sem + tile, 1u) == 2;
    if (last) atomicExch(aotc_sem + tile, 0u);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  y[e] = aotc_ws[e] + aotc_ws[128 + e] + aotc_ws[256 + e];
}
"""


def test_policies_from_signatures():
    pol = kernel_policies(SOURCE + SPLIT_SIGNATURE + "extern \"C\" __global__ void __launch_bounds__(64) "
                          "aotc_ew_1(const float *__restrict__ a, long long n, __nv_bfloat16 *out, "
                          "__half *__restrict__ out1) {")
    assert pol["scale"] == {"full": None, "split": None, "fill": [1]}
    assert pol["iota"] == {"full": "writes int (idx)", "split": None, "fill": []}
    assert pol["aotc_dot_ab12cd34ef56"] == {"full": None, "split": ("z", 4), "fill": [2]}
    assert pol["ksum"] == {"full": None, "split": ("z", 3), "fill": [1]}
    odd = kernel_policies(SPLIT_SIGNATURE.replace("blockIdx.z % 4", "blockIdx.x"))
    assert odd["aotc_dot_ab12cd34ef56"]["full"].startswith("split-K tile counters")
    # the value argument is not a pointer: skipped, yet counted in the indices
    assert pol["aotc_ew_1"] == {"full": None, "split": None, "fill": [2, 3]}


def test_sampling_env_lists_full_and_filled_kernels():
    env = sampling_env(6, 3, kernel_policies(SOURCE))
    assert env == {"AOTC_PROFILE_SAMPLE": "6 3", "AOTC_PROFILE_SAMPLE_KERNELS": "scale:1 iota:full ksum:z3:1"}
    with pytest.raises(AotcError, match="at least 1"):
        sampling_env(0, 0, {})


def test_scale_counters():
    c = {"grid": [4, 2, 1], "blocks_run": 2, "load_requests": 10, "load_sectors": 40, "load_bytes": 1280,
         "store_requests": 3, "store_sectors": 12, "store_bytes": 300, "atomic_requests": 1, "atomic_sectors": 1,
         "unique_load_sectors": 7, "unique_store_sectors": 5, "shared_requests": 6, "shared_wavefronts": 9,
         "shared_phases": 6}
    s = scale_counters(c)
    assert s["sampled_blocks"] == [2, 8]
    assert (s["load_requests"], s["store_bytes"], s["shared_wavefronts"], s["atomic_requests"]) == (40, 1200, 36, 4)
    assert s["unique_load_sectors"] == 7      # not a sum over blocks: left as measured
    full = scale_counters(dict(c, blocks_run=8))
    assert full["sampled_blocks"] == [8, 8] and full["load_requests"] == 10


def build_engine() -> bytes:
    """scale, iota, then ksum twice (sharing its tile counters, zeroed once per context)."""
    x, y, xs = P.TensorSpec("x", "f32", (256,)), P.TensorSpec("y", "f32", (256,)), P.TensorSpec("xs", "f32", (3, 128))
    idx = P.TensorSpec("idx", "i32", (128,))
    s1, s2 = P.TensorSpec("s1", "f32", (128,)), P.TensorSpec("s2", "f32", (128,))
    ws, sem = P.BufferRef("arena", offset=0), P.BufferRef("arena", offset=1792)
    launches = [P.Launch("scale", (8, 1, 1), (32, 1, 1), 0, [P.BufferRef("input", 0), P.BufferRef("output", 0)],
                         bytes=2048),
                P.Launch("iota", (4, 1, 1), (32, 1, 1), 0, [P.BufferRef("output", 1)], bytes=512),
                P.Launch("ksum", (4, 1, 3), (32, 1, 1), 0, [P.BufferRef("input", 1), P.BufferRef("output", 2), ws, sem],
                         bytes=2048),
                P.Launch("ksum", (4, 1, 3), (32, 1, 1), 0, [P.BufferRef("input", 1), P.BufferRef("output", 3), ws, sem],
                         bytes=2048)]
    names = ["scale", "iota", "ksum"]
    plan = P.EnginePlan(inputs=[x, xs], outputs=[y, idx, s1, s2], arena_size=2048, arena_zeroed=256,
                        weights=b"\0" * 256, launches=launches, cubins={"sm_90": compile_device(SOURCE, "sm_90")},
                        host_lib=compile_host(SOURCE, names, sanitize=False),
                        manifest={"kernel_source": base64.b64encode(zlib.compress(SOURCE.encode())).decode(),
                                  "kernel_extents": {"scale": [1024, 1024], "iota": [512],
                                                     "ksum": [1536, 512, 1536, 16]}})
    return engine_bytes(plan)


def filled(v: np.ndarray) -> bool:
    """The sampling fill: finite, every byte in 0x30..0x3f."""
    return bool(np.isfinite(v).all() and ((v.view(np.uint8) & 0xf0) == 0x30).all())


@pytest.fixture(scope="module")
def engine() -> bytes:
    return build_engine()


@pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")
def test_a_sampled_run_skips_blocks_fills_their_outputs_and_runs_index_kernels_in_full(engine):
    from aotc.package.sample_inputs import random_inputs
    from aotc.profile.engine_profile import profiled_run
    counters, _, out = profiled_run(engine, {}, seed=5, sample_blocks=3)
    scale, iota = counters[:2]
    assert scale["sampled_blocks"] == [3, 8] and iota["sampled_blocks"] == [4, 4]
    ran = scale["sampled"]
    assert len(ran) == 3 and ran[0] == 0 and ran[-1] == 7
    assert counters == profiled_run(engine, {}, seed=5, sample_blocks=3)[0]     # deterministic by seed
    assert {tuple(c["sampled"]) for s in range(6) for c in profiled_run(engine, {}, s, 3)[0][:1]} != {tuple(ran)}
    # one load and one store request per block, scaled to 8 blocks
    assert (scale["load_requests"], scale["store_requests"], scale["load_bytes"]) == (8, 8, 1024)
    assert np.array_equal(out["idx"], np.arange(128, dtype=np.int32))
    x = random_inputs([P.TensorSpec("x", "f32", (256,)), P.TensorSpec("xs", "f32", (3, 128))], 5)["x"]
    y = out["y"].reshape(8, 32)
    for b in range(8):
        if b in ran:
            np.testing.assert_array_equal(y[b], 2 * x.reshape(8, 32)[b])
        else:
            assert filled(y[b])


@pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")
def test_split_k_samples_whole_tiles_and_leaves_the_counters_zero(engine):
    from aotc.package.sample_inputs import random_inputs
    from aotc.profile.engine_profile import profiled_run
    counters, _, out = profiled_run(engine, {}, seed=1, sample_blocks=2)
    first, second = counters[2:]
    # tiles 0 and 3 (the first and the last), each with its 3 splits (blockIdx.z)
    assert first["sampled_blocks"] == second["sampled_blocks"] == [6, 12]
    assert first["sampled"] == [0, 3, 4, 7, 8, 11]
    xs = random_inputs([P.TensorSpec("x", "f32", (256,)), P.TensorSpec("xs", "f32", (3, 128))], 1)["xs"]
    want = (xs[0] + xs[1] + xs[2]).reshape(4, 32)
    for name in ("s1", "s2"):      # the second launch finds the counters at 0 again: its tiles sum too
        s = out[name].reshape(4, 32)
        np.testing.assert_array_equal(s[[0, 3]], want[[0, 3]])
        assert filled(s[1]) and filled(s[2])


def split_k_model():
    """A 2 x 4096 by 4096 x 256 MatMul: K > 40 M, so split-K (split_k.py)."""
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4096])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")
def test_a_compiled_split_k_gemm_samples_tiles(tmp_path):
    import aotc
    from aotc.package.sanitize import kernel_source
    from aotc.profile.engine_profile import profiled_run
    path = tmp_path / "mm.engine"
    aotc.compile(split_k_model(), str(path), arch="sm_90", precision="fp16")
    data = path.read_bytes()
    pol = kernel_policies(kernel_source(data))
    (name, p), = pol.items()
    assert p["full"] is None and p["split"][0] == "z" and p["split"][1] > 1, p
    splits = p["split"][1]
    (full,), _, want = profiled_run(data, {}, seed=2)
    (samp,), _, got = profiled_run(data, {}, seed=2, sample_blocks=2)
    tiles = full["grid"][0] * full["grid"][1] * full["grid"][2] // splits
    assert samp["sampled_blocks"] == [2 * splits, tiles * splits]
    # the first and last tiles (of the tile width the policy chose) ran every split and summed them as the
    # full run did
    w = 256 // full["grid"][0]
    np.testing.assert_array_equal(got["y"][:, :w], want["y"][:, :w])
    np.testing.assert_array_equal(got["y"][:, -w:], want["y"][:, -w:])
    assert filled(got["y"][:, w:-w])
