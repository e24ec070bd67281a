"""`aotc run ENGINE --sanitize`: the engine's own kernel source, rebuilt as a sanitizing
host build, runs through the C runtime's cpu device; violations exit 1 with one line per kind."""
from __future__ import annotations

import base64
import zlib

import pytest
from click.testing import CliRunner

import aotc
from aotc.errors import AotcError
from aotc.kernels.host_compile import compile_host, have_host_compiler
from aotc.package import plan as P
from aotc.package.engine_format import engine_bytes, read_engine
from aotc.package.sanitize import kernel_extents, sanitized_engine, summary_lines
from aotc.cli.main import main

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")

# Reads one element past x, and reads a neighbour's shared slot without a barrier.
BUGGY = r"""
#include "aotc_prelude.cuh"
extern "C" __global__ void __launch_bounds__(64) buggy(const float *__restrict__ x, float *__restrict__ y) {
  __shared__ float s[64];
  s[threadIdx.x] = x[threadIdx.x + 1];
  y[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
"""


def _engine(source: str, tmp_path) -> str:
    """A one-launch engine: y = buggy(x) for f32[64] x and y."""
    spec = [P.TensorSpec("x", "f32", (64,))], [P.TensorSpec("y", "f32", (64,))]
    launch = P.Launch("buggy", (1, 1, 1), (64, 1, 1), 0, [P.BufferRef("input", 0), P.BufferRef("output", 0)])
    plan = P.EnginePlan(inputs=spec[0], outputs=spec[1], arena_size=256, weights=b"\0" * 256, launches=[launch],
                        host_lib=compile_host(source, ["buggy"], sanitize=False),
                        manifest={"kernel_source": base64.b64encode(zlib.compress(source.encode())).decode(),
                                  "kernel_extents": {"buggy": [256, 256]}})
    path = tmp_path / "buggy.engine"
    path.write_bytes(engine_bytes(plan))
    return str(path)


@pytest.fixture(scope="module")
def mlp_engine(tmp_path_factory):
    from aotc.bench.models.small import mlp
    model, _ = mlp()
    path = tmp_path_factory.mktemp("mlp") / "mlp.engine"
    result = aotc.compile(model, str(path), arch="none")
    return str(path), result


def test_extents_cover_every_launch_argument(mlp_engine):
    path, result = mlp_engine
    ext = kernel_extents(result.kernels)
    plan = read_engine(open(path, "rb").read())
    for ln in plan.launches:
        assert len(ext[ln.kernel]) == len(ln.args)
    k = result.kernels[0]
    assert ext[k.name][-1] == k.params[-1].type.nbytes
    assert plan.manifest["kernel_extents"] == ext


def test_clean_engine_runs_clean(mlp_engine):
    path, _ = mlp_engine
    for order in ("forward", "reverse"):
        r = CliRunner().invoke(main, ["run", path, "--sanitize", "--sanitize-order", order])
        assert r.exit_code == 0, r.output
        assert f"sanitizer: no violations ({order} order)" in r.output


def test_violations_exit_one_with_a_line_per_kind(tmp_path):
    r = CliRunner().invoke(main, ["run", _engine(BUGGY, tmp_path), "--sanitize"])
    assert r.exit_code == 1
    lines = {ln.split()[2] if "in all" not in ln else "violations": ln for ln in r.output.splitlines() if ln.startswith("sanitizer:")}
    assert sorted(lines) == ["out-of-bounds", "shared-race", "uninitialized-shared-read", "violations"], r.output
    assert lines["out-of-bounds"].startswith("sanitizer: 1 out-of-bounds violation; first: kernel buggy, "
                                             "block (0, 0, 0), thread (63, 0, 0)")
    assert lines["out-of-bounds"].endswith("4-byte access at offset 256 of param 0 (256 bytes): past its end")
    assert lines["shared-race"].startswith("sanitizer: 64 shared-race violations; first: kernel buggy, "
                                           "block (0, 0, 0), thread (1, 0, 0)")
    assert lines["uninitialized-shared-read"].startswith("sanitizer: 63 uninitialized-shared-read violations")
    assert lines["violations"] == "sanitizer: 128 violations in all"


def test_sanitize_needs_the_cpu_device_and_the_source(tmp_path, mlp_engine):
    r = CliRunner().invoke(main, ["run", mlp_engine[0], "--sanitize", "--device", "cuda"])
    assert r.exit_code == 1 and "cpu device only" in r.output
    plan = read_engine(open(mlp_engine[0], "rb").read())
    del plan.manifest["kernel_source"]
    with pytest.raises(AotcError, match="carries no kernel source"):
        sanitized_engine(engine_bytes(plan))


def test_summary_counts_unlisted_violations():
    first = {"kind": "misaligned", "kernel": "k", "block": [1, 0, 0], "thread": [2, 0, 0], "address": "0x10",
             "size": 16, "detail": "16-byte load not aligned to 16 bytes"}
    lines = summary_lines([first, {"kind": "misaligned", "unlisted": 9}])
    assert lines == ["sanitizer: 10 misaligned violations; first: kernel k, block (1, 0, 0), thread (2, 0, 0), "
                     "address 0x10: 16-byte load not aligned to 16 bytes", "sanitizer: 10 violations in all"]
    assert summary_lines([]) == []
