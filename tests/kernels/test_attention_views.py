"""Q, K and V copied by cp.async where they are plain views (attention_views.py), on the host emulation.

The match tests of test_attention_mma.py run both paths (Q and V are head transposes of inputs: views; K
arrives with its head dim strided: per element); here, which operands qualify, the BERT layout the fusion
rule makes (the QKV bias in the GEMM's epilogue, Q, K and V column slices of its output), and the per-element
copy of the loop that an unaligned pointer takes (the sanitizer checks every access).
"""
import numpy as np
import pytest

from aotc.fusion.regions import partition
from aotc.ir.interpreter import interpret
from aotc.kernels import codegen, codegen_attention_mma
from tests.helpers.rng import fresh_rng
from tests.kernels.test_attention_mma import NP, UNIT, _inputs, mma_attention_graph


def test_plain_views_are_copied_and_a_strided_one_is_staged_per_element():
    """Q and V are head transposes of (B, S, H, D) inputs: plain views; K arrives (B, H, D, S), its head dim
    strided: per element."""
    from aotc.kernels.attention_views import operand_views
    from aotc.kernels.builder import KernelBuilder
    graph = mma_attention_graph(2, 3, 17, 50, 64, 64, "f16", "add")
    (region,) = partition(graph)
    b = KernelBuilder(graph, region, graph.producers())
    q, k, v = operand_views(b)
    assert k is None and q is not None and v is not None
    assert (q.offset, q.batch_strides, q.row_stride) == (0, (17 * 3 * 64, 64), 3 * 64)
    assert (v.offset, v.batch_strides, v.row_stride) == (0, (50 * 3 * 64, 64), 3 * 64)
    (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
    assert kernel.source.count("aotc_cp_async_16_at(") == 2


@pytest.mark.parametrize("rows,splits", [(64, 1), (16, 1), (16, 4)])
def test_an_unaligned_view_is_staged_per_element(rows, splits, monkeypatch):
    """A caller's Q bound 2 bytes past a 16-byte boundary: the kernel tests the pointer and stages Q per
    element (the sanitizer checks every access), V still by cp.async."""
    from aotc.kernels.host_compile import compile_host
    from aotc.kernels.host_exec import HostLibrary
    monkeypatch.setattr(codegen_attention_mma, "block_form", lambda nbatch, sq: (rows, splits))
    b, h, sq, sk, dh, dv = 1, 2, 50, 33, 64, 64
    graph = mma_attention_graph(b, h, sq, sk, dh, dv, "bf16", "where")
    (kernel,) = [codegen.generate(graph, r) for r in partition(graph)]
    lib = HostLibrary(compile_host(codegen.module_source([kernel]), [kernel.name], sanitize=True))
    rng, seed = fresh_rng()
    ins = _inputs(rng, b, h, sq, sk, dh, dv, "bf16", "where")
    raw = np.zeros(ins[0].size + 8, ins[0].dtype)
    start = (-raw.ctypes.data % 16) // raw.itemsize + 1
    shifted = raw[start:start + ins[0].size].reshape(ins[0].shape)
    shifted[...] = ins[0]
    assert shifted.ctypes.data % 16 == 2
    bound = {graph.inputs[0]: shifted, **{v: a for v, a in zip(graph.inputs[1:], ins[1:])}}
    want = interpret(graph, ins)[0].astype(np.float32)
    out = np.full(want.shape, np.nan, NP["bf16"])
    lib.launch(kernel.name, kernel.grid, kernel.block, [bound[v] for v in kernel.params[:-1]] + [out])
    tol = 8 * UNIT["bf16"] * float(np.abs(ins[2].astype(np.float32)).max())
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=0, atol=tol, err_msg=f"seed {seed}")


@pytest.mark.parametrize("precision,copied", [("fp16", 3), ("fp32", 0)])
def test_bert_qkv_bias_stays_the_gemm_epilogue_for_the_tensor_core_kernel(precision, copied):
    """BERT's fused QKV projection: at fp16 the bias add is the GEMM's epilogue and Q, K and V (column
    slices of its output, read as views) are copied; at fp32 the SIMT kernel keeps the add in its prologue."""
    from aotc.bench.models.small import bert_encoder
    from aotc.compiler import load_graph
    from aotc.hlo_passes.pipeline import run_pipeline
    model, _ = bert_encoder(batch=1, seq=64, layers=1, d=128, heads=2, ffn=64)
    graph, _ = run_pipeline(load_graph(model), precision=precision)
    regions = partition(graph)
    (att,) = [r for r in regions if r.kind == "attention"]
    qkv = [r for r in regions if r.kind == "dot" and r.root.shape[-1] == 3 * 128]
    bias_in_attention = any(n.op == "add" and any(v.shape == (1, 64, 384) for v in n.outputs) for n in att.nodes)
    assert bias_in_attention == (precision == "fp32")
    assert len(qkv) == 1 and ("add" in [n.op for n in qkv[0].nodes]) == (precision == "fp16")
    kernel = codegen.generate(graph, att)
    assert kernel.source.count("aotc_cp_async_16_at(") == copied      # in the aligned copy of the loop only
