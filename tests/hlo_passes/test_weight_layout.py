"""weight-kmajor: an f16/bf16 GEMM's constant (K, N) B whose N rows are not whole 16-byte chunks is stored (N, K)."""
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.hlo_passes import weight_layout
from aotc.hlo_passes.pipeline import run_pipeline
from aotc.hlo_passes.verify import verify
from aotc.ir.graph import GraphBuilder
from aotc.kernels import codegen
from tests.helpers.rng import fresh_rng, random_array

from ._graphs import assert_same_fresh, assert_unchanged, snapshot


def _head(m, k, n, dtype="f16", shared=False, weights=None):
    """x (m, k) @ W (k, n), W a constant: GPT-2's LM head as torch.onnx writes it (MatMul with W^T stored)."""
    rng, _ = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (1, m, k), dtype)
    npdt = np.float16 if dtype == "f16" else np.float32
    w = b.constant(weights if weights is not None else random_array(rng, (k, n)).astype(npdt), "w")
    y = b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(0,))
    outs = [y, b.add("abs", w)] if shared else [y]
    return b.build(outs)


def test_an_off_chunk_n_is_read_k_major():
    g = _head(5, 64, 1003)
    snap = snapshot(g)
    out = weight_layout.run(g)
    verify(out)
    assert_unchanged(g, snap)
    (dot,) = out.nodes
    w = dot.inputs[1]
    assert w.shape == (1003, 64) and dot.attrs["rhs_contract"] == (1,) and dot.outputs == g.nodes[0].outputs
    np.testing.assert_array_equal(out.constants[w], g.constants[g.nodes[0].inputs[1]].T)
    assert weight_layout.last_stats == {"gemms": 1}
    assert_same_fresh(g, out, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("why,kw", [("N whole chunks", dict(n=1000)), ("K not whole chunks", dict(k=60)),
                                    ("f32", dict(dtype="f32")), ("read twice", dict(shared=True))])
def test_leaves_alone(why, kw):
    args = dict(m=5, k=64, n=1003)
    args.update({key: kw.pop(key) for key in ("n", "k") if key in kw})
    g = _head(args["m"], args["k"], args["n"], **kw)
    out = weight_layout.run(g)
    assert out is g or [n.inputs for n in out.nodes] == [n.inputs for n in g.nodes], why
    assert weight_layout.last_stats == {"gemms": 0}, why


def test_gpt2s_exported_lm_head_takes_the_row_tile():
    """Through the fp16 pipeline (the f32 model, its W^T constant converted to f16, then stored K-major), the
    128 x 768 x 50257 head is one dot_mma kernel on split_k.ROW_TILE staging B by cp.async."""
    rng, _ = fresh_rng()
    g = _head(128, 768, 50257, "f32", weights=random_array(rng, (768, 50257)) * 0.05)
    opt, report = run_pipeline(g, layout="nchw", precision="fp16")
    assert "weight-kmajor" in [r.name for r in report.passes]
    (dot,) = [n for n in opt.nodes if n.op == "dot_general"]
    assert dot.inputs[1].shape == (50257, 768) and dot.inputs[1].dtype.name == "f16"
    (kernel,) = [k for k in (codegen.generate(opt, r) for r in partition(opt)) if k.name.startswith("aotc_dot_mma_")]
    assert "block tile 32x128" in kernel.source and "aotc_cp_async_16_at(aotc_smem, B_s" in kernel.source
