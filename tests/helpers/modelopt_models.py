"""Write NVIDIA ModelOpt-quantized models for tests/e2e/test_modelopt_models.py (run by .ci/modelopt).

Runs in ModelOpt's own venv (.cache/modelopt: it pins onnxruntime-gpu and onnx
versions of its own), never the project's: `python tests/helpers/modelopt_models.py OUT_DIR`.
For each float model of aotc.bench.models.small it writes NAME.onnx, and
NAME_int8.onnx / NAME_fp8.onnx from `modelopt.onnx.quantization.quantize`
(max calibration on random inputs, fp32 high precision, as a user would run it
to keep float I/O). Needs only numpy, onnx and modelopt besides this checkout.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from aotc.bench.models import small  # noqa: E402

MODELS = {"cnn": dict(batch=1, size=16), "bert_encoder": {}}


def calibration(inputs: dict, rng, n: int = 8) -> dict:
    out = {}
    for k, v in inputs.items():
        shape = (n * v.shape[0],) + v.shape[1:]
        out[k] = rng.standard_normal(shape).astype(v.dtype) if v.dtype.kind == "f" else \
            rng.integers(0, 2, shape).astype(v.dtype)
    return out


def main(out_dir: str) -> None:
    from modelopt.onnx.quantization import quantize
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, kw in MODELS.items():
        model, inputs = getattr(small, name)(**kw)
        src = os.path.join(out_dir, f"{name}.onnx")
        onnx.save(model, src)
        for mode in ("int8", "fp8"):
            quantize(src, quantize_mode=mode, calibration_data=calibration(inputs, rng), calibration_method="max",
                     high_precision_dtype="fp32", output_path=os.path.join(out_dir, f"{name}_{mode}.onnx"))


if __name__ == "__main__":
    main(sys.argv[1])
