"""Whole path: ONNX model -> aotc compile -> engine file -> C runtime (cpu device) vs onnxruntime."""
import numpy as np
import pytest

import aotc.compiler
from aotc.package.runtime_binding import Engine
from aotc.bench.models.small import MODELS

ort = pytest.importorskip("onnxruntime")


def rel_error(got, want):
    """max |got - want| / max |want|: relative to the output's scale."""
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name, tmp_path):
    model, feeds = MODELS[name]()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    path = tmp_path / f"{name}.engine"
    result = aotc.compiler.compile(model, path)
    assert set(result.plan.cubins) == {"sm_80", "sm_90"} and result.plan.ptx and result.plan.host_lib
    engine = Engine(str(path))
    outs = engine.create_context(device="cpu").run(feeds)
    assert [o.name for o in engine.outputs] == [o.name for o in model.graph.output]
    for spec, w in zip(engine.outputs, want):
        got = outs[spec.name]
        assert got.shape == w.shape and np.isfinite(got).all()
        assert rel_error(got, w) <= 1e-4, f"{name}/{spec.name}: rel error {rel_error(got, w):.2e}"


def test_fusion_keeps_kernel_count_low():
    model, _ = MODELS["transformer_block"]()
    result = aotc.compiler.compile_model(model, arch="none", host=False)
    s = result.summary()
    # the Shape/Gather/Concat clutter folds away, and elementwise chains fuse
    assert s["nodes_optimized"] < s["nodes_imported"]
    assert s["kernels_launched"] <= 24, s
    assert not any(n.op == "gather" for n in result.graph_optimized.nodes)


EM_CUDA = 190


def test_engine_holds_real_cubins_for_sm80_and_sm90(tmp_path):
    from aotc.package.engine_format import read_engine
    model, _ = MODELS["mlp"]()
    path = tmp_path / "m.engine"
    aotc.compiler.compile(model, path)
    plan = read_engine(path.read_bytes())
    for arch, cubin in plan.cubins.items():
        assert cubin[:4] == b"\x7fELF" and cubin[4] == 2           # 64-bit ELF
        assert int.from_bytes(cubin[18:20], "little") == EM_CUDA   # e_machine
        e_flags = int.from_bytes(cubin[48:52], "little")
        assert (e_flags >> 8) & 0xFF == int(arch[3:]) or e_flags & 0xFF == int(arch[3:]), hex(e_flags)
    assert b".target sm_90" in plan.ptx
    assert all(f"{l.kernel}".encode() in plan.ptx for l in plan.launches)


def test_corrupted_real_engine_is_rejected_never_crashes(tmp_path):
    """Truncations and bit flips of a compiled engine: the C loader returns an error each time."""
    import subprocess
    import sys
    model, _ = MODELS["mlp"]()
    path = tmp_path / "m.engine"
    aotc.compiler.compile(model, path)
    data = path.read_bytes()
    cases = [data[:n] for n in (0, 7, 63, 64, 200, len(data) // 2, len(data) - 1)]
    rng = np.random.default_rng(len(data))
    for pos in list(rng.integers(0, len(data), 24)) + [8, 20, 40, 64, 100]:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << int(rng.integers(0, 8))
        cases.append(bytes(flipped))
    for i, case in enumerate(cases):
        (tmp_path / f"bad{i}.engine").write_bytes(case)
    script = (
        "import sys\n"
        "from aotc.errors import AotcError\n"
        "from aotc.package.runtime_binding import Engine\n"
        "rejected = 0\n"
        f"for i in range({len(cases)}):\n"
        "    try:\n"
        f"        Engine(r'{tmp_path}/bad%d.engine' % i)\n"
        "    except AotcError as e:\n"
        "        rejected += 1\n"
        "print(rejected)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr        # no crash
    # every truncation is rejected; a bit flip in section padding may be harmless, but
    # flips inside checksummed bytes must be caught
    assert int(proc.stdout) >= len(cases) - 3, proc.stdout
