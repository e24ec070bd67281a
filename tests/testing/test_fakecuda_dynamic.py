"""A dynamic engine on the cuda path under the stand-in driver: register grids, launch
predicates and by-value dim arguments through cuLaunchKernel, checked against the cubin's
parameter layout (an `int` and a `long long` dim), and CUDA graphs keyed by the dim values.

Alternating shapes must replay their graphs (not capture again), every run must equal the cpu
device bit for bit, graphs on or off, with new input values each run; the cache keeps 8 keys
(LRU). Runs in a child process whose environment names the stand-in (AOTC_LIBCUDA).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aotc.kernels.host_compile import have_host_compiler
from aotc.package.engine_format import write_engine
from aotc.testing.fakecuda import environment
from tests.package.dynamic_plans import device_images, host_build, make_dynamic_plan

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")
ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import ctypes, gc, json, os, sys
import numpy as np
from aotc.package.runtime_binding import Engine
from tests.package.dynamic_plans import inputs

fake = ctypes.CDLL(os.environ["AOTC_LIBCUDA"])
fake.aotcFakeCudaCounter.restype = ctypes.c_ulonglong
fake.aotcFakeCudaCounter.argtypes = [ctypes.c_char_p]
engine = Engine(sys.argv[1])
cpu = engine.create_context("cpu")
rng = np.random.default_rng(int(sys.argv[2]))
A, B = (5, 8), (40, 64)
shapes = [A, B] * 3 + [(0, 8), (0, 8)] + [(b, 4 * (b % 16 + 1)) for b in range(11, 21)] + [A, A, B]
result = {}
for graphs in (False, True):
    ctx = engine.create_context("cuda", use_cuda_graph=graphs)
    start = fake.aotcFakeCudaCounter(b"graph_launches")
    same, replays = [], []
    for shape in shapes:
        feeds = inputs(rng, *shape)
        want, got = cpu.run(feeds), ctx.run(feeds)
        same.append(all(np.array_equal(want[k], got[k]) for k in want if shape[0] or k != "which"))
        replays.append(ctx.uses_cuda_graph)
    result["graphs" if graphs else "plain"] = {
        "same": same, "replays": replays,
        "graph_launches": fake.aotcFakeCudaCounter(b"graph_launches") - start}
    del ctx
del engine, cpu
gc.collect()
result["live_allocations"] = fake.aotcFakeCudaCounter(b"live_allocations")
print(json.dumps(result))
'''


@pytest.fixture(scope="module")
def dynamic_engine(tmp_path_factory) -> Path:
    cubin, ptx = device_images()
    path = tmp_path_factory.mktemp("dyn") / "dyn.engine"
    write_engine(make_dynamic_plan(host_build(), {"sm_90": cubin}, ptx), path)
    return path


def _run_child(engine: Path, tmp_path: Path, **env) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script), str(engine), "7"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, **environment(), "PYTHONPATH": str(ROOT), **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("order", ["immediate", "deferred"])
def test_alternating_shapes_replay_their_graphs_and_match_the_cpu(dynamic_engine, tmp_path, order):
    r = _run_child(dynamic_engine, tmp_path, AOTC_FAKECUDA_ORDER=order)
    plain, graphs = r["plain"], r["graphs"]
    assert all(plain["same"]) and all(graphs["same"]), r
    assert plain["graph_launches"] == 0 and not any(plain["replays"])
    # A B A B A B: each key is seen, then captured on its second run, then replayed: 4 graph
    # launches; batch 0 twice: 1 more (its graph has only the launches of nonzero grids); ten
    # new keys evict A and B from the 8-entry cache, so A is seen, captured and replayed again
    # (2), and B, evicted, starts over (0).
    assert graphs["replays"][:8] == [False, False, True, True, True, True, False, True], graphs["replays"]
    assert not any(graphs["replays"][8:18]) and graphs["replays"][18:] == [False, True, False]
    assert graphs["graph_launches"] == 4 + 1 + 1
    assert r["live_allocations"] == 0          # every graph of the cache was destroyed


def test_a_pointer_where_the_kernel_takes_an_int_is_refused(tmp_path):
    """The cubin says dyn_mul_w's 4th parameter is a 4-byte int: only a dim may go there."""
    from aotc.package.plan import BufferRef
    cubin, ptx = device_images()
    plan = make_dynamic_plan(host_build(), {"sm_90": cubin}, ptx)
    plan.launches[0].args[3] = BufferRef("weight")
    path = tmp_path / "bad.engine"
    write_engine(plan, path)
    code = ("import sys\nfrom aotc.package.runtime_binding import Engine\n"
            "try:\n    Engine(sys.argv[1]).create_context('cuda')\nexcept Exception as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **environment(), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == ("kernel 'dyn_mul_w' (launch 0): parameter 3 is 4 bytes in the cubin sm_90, the "
                                   "launch plan passes 8-byte pointers (or a 4- or 8-byte dim)")
