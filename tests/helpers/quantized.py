"""Q/DQ models for the quantization tests: onnxruntime's quantize_static on a float model, and its reference.

`ort_qdq` quantizes a float ONNX model the way a user does (QDQ format,
per-channel weights, symmetric or asymmetric activations) from a small
random calibration set. `ort_run` runs a model at ORT_DISABLE_ALL, which is
plain fake quantization (higher levels fuse Q/DQ and may differ). `distance`
is max|got - ref| / max|ref| over all outputs.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def draw_feeds(inputs: dict, rng) -> dict:
    """Fresh inputs shaped like `inputs`: normal floats, integers in [0, 2) (ids, masks, token types)."""
    out = {}
    for k, v in inputs.items():
        if v.dtype.kind == "f":
            out[k] = rng.standard_normal(v.shape).astype(v.dtype)
        else:
            out[k] = rng.integers(0, 2, v.shape).astype(v.dtype)
    return out


def ort_qdq(model: onnx.ModelProto, inputs: dict, rng, *, symmetric: bool, samples: int = 4,
            exclude_last: bool = True) -> onnx.ModelProto:
    """`model` quantized by quantize_static; `exclude_last` keeps the node producing each output in float.

    A quantized output differs from the reference by whole quanta wherever one rounding tie breaks the
    other way (float sums in another order); a float last node keeps the comparison at the error's scale.
    """
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    feeds = [draw_feeds(inputs, rng) for _ in range(samples)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "float.onnx"), os.path.join(d, "qdq.onnx")
        onnx.save(model, src)
        outs = {o.name for o in model.graph.output}
        last = [n.name for n in model.graph.node if exclude_last and set(n.output) & outs]
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        nodes_to_exclude=last, extra_options={"ActivationSymmetric": symmetric})
        return onnx.load(dst)


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def distance(got: list, ref: list) -> float:
    """max |got - ref| / max |ref| over every output (the issue's accuracy measure)."""
    num = max(float(np.abs(np.asarray(g, np.float64) - np.asarray(r, np.float64)).max()) for g, r in zip(got, ref))
    den = max(float(np.abs(np.asarray(r, np.float64)).max()) for r in ref)
    return num / den


def attention_internal(model: onnx.ModelProto) -> set[str]:
    """The QuantizeLinear results inside attentions: from the Q·K MatMul to Softmax and on to P·V.

    One int8 attention kernel computes them without writing them; made graph outputs they
    would have to exist, and the attention would not be one kernel."""
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    inside = set()
    for sm in (n for n in model.graph.node if n.op_type == "Softmax"):
        todo, seen = list(sm.input), set()
        while todo:                                   # back to the Q·K MatMul (and the mask's Q/DQ)
            n = producer.get(todo.pop())
            if n is None or n.op_type == "MatMul" or id(n) in seen:
                continue
            seen.add(id(n))
            if n.op_type == "QuantizeLinear":
                inside.add(n.output[0])
            todo += list(n.input)
        inside.update(n.output[0] for n in consumers.get(sm.output[0], []) if n.op_type == "QuantizeLinear")
    return inside


def expose_quantized(model: onnx.ModelProto, keep_attention: bool = False) -> onnx.ModelProto:
    """A copy of `model` with every QuantizeLinear result also a graph output (int8/uint8 tensors to compare);
    `keep_attention` leaves out those inside attentions (attention_internal)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = {v.name: v for v in onnx.shape_inference.infer_shapes(out).graph.value_info}
    have = {o.name for o in out.graph.output} | (attention_internal(model) if keep_attention else set())
    for n in out.graph.node:
        if n.op_type == "QuantizeLinear" and n.output[0] not in have and n.output[0] in known:
            out.graph.output.append(known[n.output[0]])
    return out


def quantized_mismatch(got: list, ref: list) -> tuple[float, int]:
    """(fraction of elements that differ, largest difference in quanta) over the integer outputs."""
    pairs = [(np.asarray(g), np.asarray(r)) for g, r in zip(got, ref) if np.asarray(r).dtype.kind in "iu"]
    diffs = [np.abs(g.astype(np.int64) - r.astype(np.int64)) for g, r in pairs]
    total = sum(d.size for d in diffs)
    return sum(int(np.count_nonzero(d)) for d in diffs) / max(total, 1), max((int(d.max()) for d in diffs), default=0)


def first_departure(got: list, ref: list) -> tuple[int, float, int] | None:
    """(output index, fraction of elements that differ, largest difference in quanta) of the first integer
    output, in graph order, where `got` and `ref` differ; None where none does."""
    for i, (g, r) in enumerate(zip(got, ref)):
        g, r = np.asarray(g), np.asarray(r)
        if r.dtype.kind in "iu" and not np.array_equal(g, r):
            d = np.abs(g.astype(np.int64) - r.astype(np.int64))
            return i, float(np.count_nonzero(d)) / d.size, int(d.max())
    return None


def qdq_conv_model(zx: int, weight_zp: int = 0, modelopt: bool = False) -> onnx.ModelProto:
    """x -> Q/DQ (i8, zero point zx) -> Conv 3x3 pad 1 with per-channel weights (int8 initializer, or a float
    weight behind Q -> DQ as ModelOpt writes it) -> Relu."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    ws = (np.abs(w).reshape(6, -1).max(1) / 127).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "sx"),
             numpy_helper.from_array(np.array(zx, np.int8), "zx"),
             numpy_helper.from_array(ws, "ws"), numpy_helper.from_array(np.full(6, weight_zp, np.int8), "wz"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["qx"]),
             helper.make_node("DequantizeLinear", ["qx", "sx", "zx"], ["dx"])]
    if modelopt:
        inits.append(numpy_helper.from_array(w, "wf"))
        nodes.append(helper.make_node("QuantizeLinear", ["wf", "ws", "wz"], ["wq"], axis=0))
    else:
        inits.append(numpy_helper.from_array(np.clip(np.round(w / ws[:, None, None, None]), -127, 127)
                                             .astype(np.int8), "wq"))
    nodes += [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["dw"], axis=0),
              helper.make_node("Conv", ["dx", "dw", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c"], ["out"])]
    graph = helper.make_graph(nodes, "qconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 7, 5])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 6, 7, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
