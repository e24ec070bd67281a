"""What the ONNX importer supports, as data: the source of `aotc ops` and docs/onnx_ops.md.

One row per default-domain op type with a converter: the opset range aotc
accepts and the restrictions a user must know (constant shape inputs, modes
not implemented, float-only ops). The converter table itself
(ops.CONVERTERS) decides what exists; this module only adds the notes,
so the list can never claim an op without a converter. Regenerate the docs
page with `python -m aotc.importers.onnx.support > docs/onnx_ops.md`.
"""
from __future__ import annotations

from aotc.importers.onnx.checks import OPSET_MIN  # the range the importer accepts, one number
DTYPES = ("float32, float16, bfloat16, float64, float8 (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz), float8e8m0, "
          "float4e2m1, int64, int32, int16, int8, int4, int2, uint64, uint32, uint16, uint8, uint4, uint2, bool")
_SHAPE_IN = "shape-carrying inputs must be constants (aotc shapes are static)"
_N2 = "decomposed into compare/select/reduce: O(n^2) per row of the axis"
_RNN = "all ONNX activations; alpha/beta defaults and length-0 sequence_lens entries follow onnxruntime"

RESTRICTIONS: dict[str, str] = {
    "ArgMax": "", "ArgMin": "",
    "AveragePool": "float only",
    "BatchNormalization": "inference only (training_mode=0), output Y only",
    "BitShift": "integer types of the IR except int4/uint4; out-of-range shifts saturate",
    "BitCast": "equal widths among the IR's types (float32<->int32/uint32, float64<->int64/uint64, integers "
               "of one width, int8/uint8<->bool; not float16<->bfloat16, float8 or int4); a byte other than "
               "0/1 bitcast to bool reads as true",
    "Cast": f"to and from {DTYPES}; round_mode (float8e8m0 outputs) up, down or nearest", "CastLike": f"{DTYPES}",
    "CenterCropPad": f"{_SHAPE_IN}",
    "Col2Im": "image_shape and block_shape must be constants",
    "Compress": "condition must be a constant (the output shape depends on it)",
    "Constant": "no sparse or string values",
    "ConstantOfShape": _SHAPE_IN,
    "Conv": "float only", "ConvTranspose": "float only",
    "ConvInteger": "int8 conv, exact int32 sums, where the weight zero point is 0 (else f32, exact below 2**24)",
    "CumSum": f"axis must be a constant; {_N2}",
    "CumProd": f"axis must be a constant; {_N2}",
    "DeformConv": "2-D only; float only, computed in f32",
    "Det": "n <= 64 (unrolled Gaussian elimination with partial pivoting; f16/bf16 computed in f32)",
    "DequantizeLinear": "uint8/int8/uint16/int16/int32/int4/uint4/int2/uint2, float8 and float4e2m1 inputs; "
                        "float scales (not float8e8m0); per-tensor, per-axis and blocked; "
                        "into Conv/MatMul/Gemm: int8/fp8 kernels (compile --explain says which)",
    "Dropout": "inference only (identity)",
    "DynamicQuantizeLinear": "",
    "Einsum": "float only",
    "Expand": _SHAPE_IN,
    "EyeLike": "",
    "GatherND": "", "GatherElements": "",
    "Gelu": "approximate='none' or 'tanh'",
    "GridSample": "float only; cubic with border padding follows onnxruntime/PyTorch (padding per tap)",
    "GroupNormalization": "",
    "HannWindow": "size must be a constant", "HammingWindow": "size must be a constant",
    "BlackmanWindow": "size must be a constant",
    "DFT": "float only; dft_length and axis must be constants; a dense O(n^2) matrix product (no FFT), "
           "DFT matrix up to 2**24 elements",
    "STFT": "float only; frame_step and frame_length must be constants; frames gathered, then as DFT",
    "MelWeightMatrix": "all inputs must be constants (becomes a constant)",
    "TfIdfVectorizer": "int32/int64 token ids only (no pool_strings); every n-gram window unrolled at import "
                       "(match mask [rows, windows, grams] up to 2**26 elements)",
    "LpNormalization": "p=1 or p=2",
    "MatMul": "float only", "Gemm": "float only",
    "MatMulInteger": "int8 GEMM; results exact while partial sums stay below 2**24 (read back through f32)",
    "MaxPool": "",
    "MaxUnpool": f"output_shape must be a constant; {_N2.replace('per row of the axis', '(output x input)')}",
    "NonZero": "input must be a constant (the output shape depends on its values)",
    "OneHot": "depth must be a constant",
    "Pad": f"all modes; {_SHAPE_IN}",
    "QLinearConv": "int8 conv with the requantize in its epilogue (weight zero point 0; else float math)",
    "QLinearMatMul": "int8 GEMM with the requantize in its epilogue",
    "QuantizeLinear": "uint8/int8/uint16/int16/int32/int4/uint4/int2/uint2 (saturating), float8 and float4e2m1 outputs; "
                      "float scales (not float8e8m0); per-tensor, per-axis, blocked",
    "Range": "start/limit/delta must be constants",
    "Reshape": _SHAPE_IN,
    "Resize": "nearest/linear/cubic, all coordinate modes, antialias; sizes/scales/roi constant",
    "ReverseSequence": "sequence_lens must be a constant",
    "RoiAlign": "sampling_ratio=0 (adaptive) needs constant rois; max mode takes the largest weighted tap "
                "(as the ONNX reference and onnxruntime)",
    "RNN": f"float only; unrolled over the sequence at import time; {_RNN}",
    "GRU": f"float only; unrolled over the sequence at import time; {_RNN}",
    "LSTM": f"float only; unrolled over the sequence at import time; {_RNN}",
    "ScatterElements": f"reduction none/add/mul/max/min; {_N2.replace('per row of the axis', '(data x updates)')}",
    "Scatter": "as ScatterElements",
    "ScatterND": f"reduction none/add/mul/max/min; {_N2.replace('per row of the axis', '(data x updates)')}",
    "Slice": _SHAPE_IN, "Split": _SHAPE_IN, "Squeeze": _SHAPE_IN, "Unsqueeze": _SHAPE_IN, "Tile": _SHAPE_IN,
    "TensorScatter": "",
    "TopK": f"K must be a constant; {_N2}",
    "Upsample": "nearest/linear",
    "If": "the condition must be computable at import time; the taken branch is inlined",
    "Loop": "unrolled at import time (at most 1024 iterations): the trip count and the condition after "
            "every iteration must be computable at import time; no sequence/optional loop values",
    "Scan": "unrolled over the static sequence length at import time (at most 1024 steps); opset-8 "
            "sequence_lens must be absent or all full length",
    "ReduceSum": "axes must be constants", "ReduceMean": "axes must be constants",
}


# Ops without a converter that import by expanding their ONNX function body
# (aotc/importers/onnx/functions.py); listed only where the node suite passes.
_FN = "imported by expanding its ONNX function body"
FUNCTION_OPS: dict[str, str] = {
    "NegativeLogLikelihoodLoss": _FN,
    "SoftmaxCrossEntropyLoss": _FN,
    "RotaryEmbedding": _FN,
    "SwiGLU": _FN,
    "AffineGrid": f"{_FN}; size must be a constant",
    "Attention": f"{_FN}; softmax_precision=DOUBLE computes the softmax in float64",
    "CausalConvWithState": f"{_FN}",
    "LinearAttention": f"{_FN} (a Scan, unrolled over the sequence)",
}


def support_table() -> list[dict]:
    """One dict per supported op type: op_type, opset_min, opset_max, restrictions."""
    import onnx
    from aotc.importers.onnx.ops import CONVERTERS
    import aotc.importers.onnx  # noqa: F401  (registers every converter module)
    newest = onnx.defs.onnx_opset_version()
    notes = {**{op: RESTRICTIONS.get(op, "") for op in CONVERTERS}, **FUNCTION_OPS}
    return [{"op_type": op, "domain": "ai.onnx", "opset_min": OPSET_MIN, "opset_max": newest,
             "restrictions": notes[op]} for op in sorted(notes)]


def render_markdown(rows: list[dict] | None = None) -> str:
    rows = support_table() if rows is None else rows
    lines = ["# ONNX ops supported by aotc", "",
             "Generated from `aotc/importers/onnx/support.py` (the same data as `aotc ops`); "
             "a test checks that this page matches it.", "",
             f"{len(rows)} op types of the default domain. Data types: {DTYPES} "
             "(strings are not supported; float8, float8e8m0, float4 and int4/int2 are "
             "storage types: cast them to compute). "
             "Conformance: `python -m pytest tests/onnx_backend --run-slow` runs the ONNX node test suite.", "",
             "| op type | opsets | restrictions |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op_type']} | {r['opset_min']}-{r['opset_max']} | {r['restrictions'] or '-'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
