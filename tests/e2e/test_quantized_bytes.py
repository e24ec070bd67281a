"""Modelled bytes of int8 engines against fp16 ones: quantizing a model must shrink its traffic.

The models are onnxruntime's quantize_static Q/DQ versions of the bench's ResNet-class and
BERT-class models (tests/helpers/quantized.py); the bytes are the launch plan's modelled
totals (what `aotc inspect` prints), compiled without the host build.
"""
import numpy as np
import pytest

import aotc.compiler
from aotc.bench.models import small
from tests.helpers.quantized import ort_qdq

pytest.importorskip("onnxruntime")


def _compile(model, precision="fp32"):
    result = aotc.compiler.compile_model(model, arch="none", host=False, precision=precision)
    return result, sum(l.bytes for l in result.plan.launches)


def _quantized(builder, symmetric, **kw):
    model, inputs = getattr(small, builder)(**kw)
    return model, ort_qdq(model, inputs, np.random.default_rng(0), symmetric=symmetric)


def _splat_regions(result):
    """Regions that compute a tensor from constants alone (a broadcast zero point, say): traffic for nothing."""
    consts, outs = set(result.graph_optimized.constants), set(result.graph_optimized.outputs)
    return [r.describe() for r in result.regions
            if r.nodes and r.root not in outs and all(v in consts for v in r.inputs)]


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_int8_resnet_moves_fewer_bytes_than_fp16(symmetric):
    model, qdq = _quantized("resnet_bottleneck", symmetric)
    q_result, q_bytes = _compile(qdq)
    _, f16_bytes = _compile(model, "fp16")
    assert q_bytes < 0.75 * f16_bytes, (q_bytes, f16_bytes)       # 534,792 vs 905,820 (sym) when written
    assert not _splat_regions(q_result)


def test_int8_small_cnn_moves_fewer_bytes_than_fp16():
    model, qdq = _quantized("cnn", False, batch=1, size=16)
    q_result, q_bytes = _compile(qdq)
    _, f16_bytes = _compile(model, "fp16")
    assert q_bytes < f16_bytes, (q_bytes, f16_bytes)               # 16,312 vs 19,364 when written
    assert not _splat_regions(q_result)


def test_asymmetric_bert_moves_about_what_symmetric_bert_does():
    """Zero points add row sums and a subtract per element, not activation-sized splat tensors."""
    _, sym = _quantized("bert_encoder", True, seq=64, d=64)
    _, asym = _quantized("bert_encoder", False, seq=64, d=64)
    _, sym_bytes = _compile(sym)
    asym_result, asym_bytes = _compile(asym)
    assert asym_bytes < 1.05 * sym_bytes, (asym_bytes, sym_bytes)   # 690,688 vs 687,360 when written
    assert not _splat_regions(asym_result)


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_int8_bert_moves_fewer_bytes_than_fp16(symmetric):
    """Each attention is one int8 kernel (no S x S scores or probabilities in memory, zero-point sums
    taken in the kernel), as fp16's is one flash-attention kernel."""
    model, qdq = _quantized("bert_encoder", symmetric, seq=64, d=64)
    q_result, q_bytes = _compile(qdq)
    _, f16_bytes = _compile(model, "fp16")
    assert [r.kind for r in q_result.regions].count("attention") == 2
    # 687,360 (asym 690,688) vs 754,304: fp16 went from 850,048 to that when its post-LN norms moved into
    # the GEMMs (fusion/regions.py POST_LN_FOLD); int8's stay row kernels, their GEMMs read the quantized norm
    assert q_bytes < 0.93 * f16_bytes, (q_bytes, f16_bytes)
