"""NVIDIA ModelOpt Q/DQ models end to end: float weights behind Q -> DQ, symmetric, opset 19, int8 and fp8.

The models come from `.ci/modelopt` (ModelOpt in its own venv under
.cache/modelopt; AOTC_MODELOPT_MODELS names another directory); without them
these tests skip. Reference: onnxruntime at ORT_DISABLE_ALL on the same model
(its fp8 fusions at higher levels are wrong, microsoft/onnxruntime#22269).
"""
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

import aotc.compiler
from aotc.hlo_passes.quantize import decisions
from aotc.importers.onnx import ONNX_DTYPES, import_onnx
from aotc.ir.interpreter import interpret
from aotc.package.runtime_binding import Engine
from tests.helpers.quantized import distance, ort_run
from tests.helpers.rng import fresh_rng

pytest.importorskip("onnxruntime")

MODELS = Path(os.environ.get("AOTC_MODELOPT_MODELS", Path(__file__).parents[2] / ".cache" / "modelopt" / "models"))
INT8_KERNELS = ("aotc_dot_mma8_", "aotc_conv_int_")


def _load(name: str) -> onnx.ModelProto:
    path = MODELS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is absent: .ci/modelopt writes it (installs nvidia-modelopt[onnx] into .cache/modelopt)")
    model = onnx.load(path)
    if name.endswith("fp8") and onnx.TensorProto.FLOAT8E4M3FN not in ONNX_DTYPES:
        pytest.skip("FLOAT8E4M3FN is not an importer dtype in this tree (the dtypes branch maps it)")
    return model


def _feeds(model: onnx.ModelProto, rng) -> dict:
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
        else:                               # ids, masks, token types
            out[i.name] = rng.integers(0, 2, shape).astype(np.int64)
    return out


@pytest.mark.parametrize("mode", ["int8", "fp8"])
@pytest.mark.parametrize("builder", ["cnn", "bert_encoder"])
def test_modelopt_model_compiles_to_8_bit_kernels_and_matches_onnxruntime(builder, mode, tmp_path):
    rng, seed = fresh_rng()
    model = _load(f"{builder}_{mode}")
    decided = decisions(import_onnx(model))
    if not decided:
        pytest.skip(f"ModelOpt {mode} quantized no Conv/MatMul/Gemm of this {builder}")
    assert set(decided.values()) == {mode}, decided            # fp32 weights behind Q->DQ fold to 8 bits
    feeds = _feeds(model, rng)
    result = aotc.compiler.compile(model, tmp_path / "m.engine", arch="none")
    outs = Engine(str(tmp_path / "m.engine")).create_context(device="cpu").run(feeds)
    got = [outs[o.name] for o in model.graph.output]
    anchors = [n for n in result.graph_optimized.nodes if n.attrs.get("out_dtype")]
    assert len(anchors) == len(decided)
    assert sum(k.name.startswith(INT8_KERNELS) for k in result.kernels) >= len(anchors)
    ref = ort_run(model, feeds)
    assert distance(interpret(result.graph_optimized, feeds), ref) <= 1e-3, seed
    assert distance(got, ref) <= 1e-2, seed
