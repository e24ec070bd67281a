"""Architectures beyond the classic five, built the way exporters write them.

Small widths and depths (the `cpu` device runs each in seconds), random weights
from fixed seeds. Node patterns follow the PyTorch / tf2onnx / optimum exports:
Shape/Gather/Unsqueeze/Concat shape arithmetic, Where- and Trilu-based masks,
Expand for grouped-query heads, decomposed RMSNorm and SiLU, Resize with scales.

Each builder returns (onnx.ModelProto, feeds) where feeds(rng) draws fresh
inputs: weights stay fixed so a failure reproduces from the input seed alone.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aotc.bench.models.builders import ModelBuilder, batch_norm

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def _info(name, shape, dtype=F32):
    return helper.make_tensor_value_info(name, dtype, shape)


def _f(m, name, value):
    return m.c(name, value, np.float32)


def _normal(name, shape):
    return lambda rng: {name: rng.standard_normal(shape).astype(np.float32)}


def _reduce_mean(m, x, opset, axis=-1):
    """ReduceMean over one axis, keepdims: axes is an input from opset 18 on."""
    if opset >= 18:
        return m.op("ReduceMean", [x, m.c(f"rm_ax_{m._n}", [axis])], keepdims=1)
    return m.op("ReduceMean", [x], axes=[axis], keepdims=1)


def _dim(m, x, i):
    """x.shape[i] as a 1-element tensor, as torch.onnx writes it: Shape -> Gather -> Unsqueeze."""
    shape = m.op("Shape", [x])
    return m.op("Unsqueeze", [m.op("Gather", [shape, m.c(f"gi_{m._n}", i)], axis=0), m.c(f"ua_{m._n}", [0])])


def _linear(m, h, din, dout, tag, bias=True):
    y = m.op("MatMul", [h, m.w(f"{tag}_w", din, dout)])
    return m.op("Add", [y, m.w(f"{tag}_b", dout, scale=0.1)]) if bias else y


def _silu(m, x):
    return m.op("Mul", [x, m.op("Sigmoid", [x])])


def _erf_gelu(m, x):
    half = m.op("Mul", [x, _f(m, f"half_{m._n}", 0.5)])
    erf = m.op("Erf", [m.op("Div", [x, _f(m, f"sqrt2_{m._n}", np.sqrt(2.0))])])
    return m.op("Mul", [half, m.op("Add", [erf, _f(m, f"one_{m._n}", 1.0)])])


def _split_heads(m, h, heads, dh):
    """(B, S, heads*dh) -> (B, heads, S, dh) with the batch and sequence read from Shape."""
    new = m.op("Concat", [_dim(m, h, 0), _dim(m, h, 1), m.c(f"hd_{m._n}", [heads, dh])], axis=0)
    return m.op("Transpose", [m.op("Reshape", [h, new])], perm=[0, 2, 1, 3])


def _merge_heads(m, h, d):
    h = m.op("Transpose", [h], perm=[0, 2, 1, 3])
    new = m.op("Concat", [_dim(m, h, 0), _dim(m, h, 1), m.c(f"md_{m._n}", [d])], axis=0)
    return m.op("Reshape", [h, new])


def _rms_norm(m, x, d, tag, opset, eps=1e-6, reciprocal=False):
    """x / sqrt(mean(x^2) + eps) * g, decomposed (LLaMA: Div; T5: Reciprocal then Mul)."""
    var = _reduce_mean(m, m.op("Pow", [x, _f(m, f"two_{m._n}", 2.0)]), opset)
    root = m.op("Sqrt", [m.op("Add", [var, _f(m, f"eps_{m._n}", eps)])])
    y = m.op("Mul", [x, m.op("Reciprocal", [root])]) if reciprocal else m.op("Div", [x, root])
    return m.op("Mul", [y, m.w(f"{tag}_g", d, positive=True)])


# --- 1. EfficientNet-style ---------------------------------------------------------------

def _act(m, x, kind):
    if kind == "silu":
        return _silu(m, x)
    return m.op(kind, [x])                       # "HardSwish" or "Swish" (opset 24)


def _mbconv(m, x, cin, cout, expand, k, stride, act, tag):
    c = cin * expand
    h = _act(m, batch_norm(m, m.op("Conv", [x, m.w(f"{tag}_exp", c, cin, 1, 1)]), c, f"{tag}_bn0"), act)
    h = m.op("Conv", [h, m.w(f"{tag}_dw", c, 1, k, k)], group=c, kernel_shape=[k, k],
             strides=[stride, stride], pads=[k // 2] * 4)
    h = _act(m, batch_norm(m, h, c, f"{tag}_bn1"), act)
    # squeeze-excite: GAP -> 1x1 reduce -> SiLU -> 1x1 expand -> Sigmoid -> broadcast Mul
    s = m.op("GlobalAveragePool", [h])
    s = _silu(m, m.op("Conv", [s, m.w(f"{tag}_se1", c // 4, c, 1, 1), m.w(f"{tag}_se1b", c // 4, scale=0.1)]))
    s = m.op("Sigmoid", [m.op("Conv", [s, m.w(f"{tag}_se2", c, c // 4, 1, 1), m.w(f"{tag}_se2b", c, scale=0.1)])])
    h = m.op("Mul", [h, s])
    h = batch_norm(m, m.op("Conv", [h, m.w(f"{tag}_proj", cout, c, 1, 1)]), cout, f"{tag}_bn2")
    return m.op("Add", [h, x]) if stride == 1 and cin == cout else h


def efficientnet(seed=0, batch=2, size=32, opset=17, act="HardSwish"):
    m = ModelBuilder(seed)
    h = m.op("Conv", ["image", m.w("stem", 8, 3, 3, 3)], strides=[2, 2], pads=[1, 1, 1, 1])
    h = _silu(m, batch_norm(m, h, 8, "stem_bn"))                                  # (B, 8, 16, 16)
    h = _mbconv(m, h, 8, 16, 4, 5, 2, act, "b1")                            # depthwise 5x5 stride 2
    h = _mbconv(m, h, 16, 16, 4, 3, 1, "silu", "b2")                        # residual
    h = _mbconv(m, h, 16, 24, 2, 5, 2, act, "b3")
    h = _silu(m, batch_norm(m, m.op("Conv", [h, m.w("head", 32, 24, 1, 1)]), 32, "head_bn"))
    h = m.op("Flatten", [m.op("GlobalAveragePool", [h])])
    out = m.op("Gemm", [h, m.w("fc", 10, 32), m.w("fcb", 10)], transB=1)
    model = m.build("efficientnet", [_info("image", [batch, 3, size, size])], [_info(out, [batch, 10])], opset)
    return model, _normal("image", (batch, 3, size, size))


# --- 2. UNet-style ---------------------------------------------------------------------------

def _conv_bn_relu(m, x, cin, cout, tag):
    h = m.op("Conv", [x, m.w(f"{tag}_w", cout, cin, 3, 3)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return m.op("Relu", [batch_norm(m, h, cout, f"{tag}_bn")])


def unet(seed=0, batch=1, size=32, opset=18):
    m = ModelBuilder(seed)
    e1 = _conv_bn_relu(m, _conv_bn_relu(m, "image", 3, 8, "e1a"), 8, 8, "e1b")             # (B, 8, 32, 32)
    e2 = _conv_bn_relu(m, m.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 8, 16, "e2")
    mid = _conv_bn_relu(m, m.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 16, 32, "mid")
    up2 = m.op("ConvTranspose", [mid, m.w("up2_w", 32, 16, 2, 2), m.w("up2_b", 16, scale=0.1)],
               kernel_shape=[2, 2], strides=[2, 2])                                       # (B, 16, 16, 16)
    d2 = _conv_bn_relu(m, m.op("Concat", [up2, e2], axis=1), 32, 16, "d2")
    up1 = m.op("Resize", [d2, "", _f(m, "up1_scales", [1.0, 1.0, 2.0, 2.0])], mode="nearest")
    up1 = m.op("Conv", [up1, m.w("up1_w", 8, 16, 1, 1), m.w("up1_b", 8, scale=0.1)])
    d1 = _conv_bn_relu(m, m.op("Concat", [e1, up1], axis=1), 16, 8, "d1")
    # a second, strided transposed conv (output_padding) as decoders with odd strides write them
    t = m.op("ConvTranspose", [d1, m.w("t_w", 8, 4, 3, 3)], kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1], output_padding=[1, 1])                                    # (B, 4, 64, 64)
    t = m.op("MaxPool", [m.op("Relu", [t])], kernel_shape=[2, 2], strides=[2, 2])
    h = m.op("Concat", [d1, t], axis=1)
    out = m.op("Conv", [h, m.w("out_w", 2, 12, 1, 1), m.w("out_b", 2, scale=0.1)])
    model = m.build("unet", [_info("image", [batch, 3, size, size])], [_info(out, [batch, 2, size, size])], opset)
    return model, _normal("image", (batch, 3, size, size))


# --- 3. YOLO-style head ----------------------------------------------------------------------

def _grid(h, w, na):
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    return np.broadcast_to(np.stack([xs, ys], -1), (1, na, h, w, 2)).astype(np.float32)


def _detect(m, x, cin, na, nc, h, w, stride, anchors, tag):
    """YOLOv5 Detect for one scale: conv -> (B, na, H, W, 5+nc) -> sigmoid -> decode boxes."""
    no = 5 + nc
    p = m.op("Conv", [x, m.w(f"{tag}_w", na * no, cin, 1, 1), m.w(f"{tag}_b", na * no, scale=0.1)])
    shape = m.op("Concat", [_dim(m, p, 0), m.c(f"{tag}_s", [na, no, h, w])], axis=0)
    p = m.op("Sigmoid", [m.op("Transpose", [m.op("Reshape", [p, shape])], perm=[0, 1, 3, 4, 2])])
    xy, wh, conf = m.op("Split", [p, m.c(f"{tag}_split", [2, 2, no - 4])], n_out=3, axis=4)
    xy = m.op("Add", [m.op("Sub", [m.op("Mul", [xy, _f(m, f"{tag}_two", 2.0)]), _f(m, f"{tag}_h", 0.5)]),
                      _f(m, f"{tag}_grid", _grid(h, w, na))])
    xy = m.op("Mul", [xy, _f(m, f"{tag}_stride", float(stride))])
    wh = m.op("Pow", [m.op("Mul", [wh, _f(m, f"{tag}_two2", 2.0)]), _f(m, f"{tag}_sq", 2.0)])
    anchor_grid = np.broadcast_to(np.asarray(anchors, np.float32).reshape(1, na, 1, 1, 2), (1, na, h, w, 2))
    wh = m.op("Mul", [wh, _f(m, f"{tag}_anchors", anchor_grid)])
    y = m.op("Concat", [xy, wh, conf], axis=4)
    flat = m.op("Concat", [_dim(m, y, 0), m.c(f"{tag}_flat", [-1, no])], axis=0)
    return m.op("Reshape", [y, flat])


def yolo(seed=0, batch=2, size=32, opset=17, na=3, nc=4):
    m = ModelBuilder(seed)

    def conv(x, cin, cout, tag, stride=1):
        k = 3 if stride == 2 else 1
        h = m.op("Conv", [x, m.w(tag, cout, cin, k, k)], strides=[stride] * 2, pads=[k // 2] * 4)
        return _silu(m, batch_norm(m, h, cout, f"{tag}_bn"))

    p3 = conv(conv("image", 3, 8, "c1", 2), 8, 16, "c2", 2)                      # (B, 16, 8, 8)
    p4 = conv(p3, 16, 32, "c3", 2)                                                # (B, 32, 4, 4)
    lat = conv(p4, 32, 16, "lat")
    up = m.op("Resize", [lat, "", _f(m, "up_scales", [1.0, 1.0, 2.0, 2.0])], mode="nearest",
              coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    f3 = conv(m.op("Concat", [up, p3], axis=1), 32, 16, "fuse")
    d3 = _detect(m, f3, 16, na, nc, 8, 8, 8, [[10, 13], [16, 30], [33, 23]], "d3")
    d4 = _detect(m, p4, 32, na, nc, 4, 4, 16, [[30, 61], [62, 45], [59, 119]], "d4")
    out = m.op("Concat", [d3, d4], axis=1)
    n = na * (8 * 8 + 4 * 4)
    model = m.build("yolo", [_info("image", [batch, 3, size, size])], [_info(out, [batch, n, 5 + nc])], opset)
    return model, _normal("image", (batch, 3, size, size))


# --- 4. LLaMA-style decoder ------------------------------------------------------------------

def _rope_tables(max_pos, dh, base=10000.0):
    inv = 1.0 / base ** (np.arange(0, dh, 2) / dh)
    ang = np.outer(np.arange(max_pos), inv)                      # (max_pos, dh/2)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def _rotate_half(m, x, dh):
    big = np.iinfo(np.int64).max
    x1 = m.op("Slice", [x, m.c(f"s0_{m._n}", [0]), m.c(f"e0_{m._n}", [dh // 2]), m.c(f"a0_{m._n}", [-1])])
    x2 = m.op("Slice", [x, m.c(f"s1_{m._n}", [dh // 2]), m.c(f"e1_{m._n}", [big]), m.c(f"a1_{m._n}", [-1])])
    return m.op("Concat", [m.op("Neg", [x2]), x1], axis=-1)


def _causal_scores(m, scores, mask_kind):
    """Masks scores (B, H, S, S) above the diagonal, with Trilu or with a Range comparison + Where."""
    s = _dim(m, scores, 2)
    if mask_kind == "trilu":
        ones = m.op("ConstantOfShape", [m.op("Concat", [s, s], axis=0)],
                    value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))
        keep = m.op("Cast", [m.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
    else:
        n = m.op("Squeeze", [s, m.c(f"sq_{m._n}", [0])])
        r = m.op("Range", [m.c(f"r0_{m._n}", 0), n, m.c(f"r1_{m._n}", 1)])
        col = m.op("Unsqueeze", [r, m.c(f"u0_{m._n}", [0])])
        row = m.op("Unsqueeze", [r, m.c(f"u1_{m._n}", [1])])
        keep = m.op("LessOrEqual", [col, row])
    return m.op("Where", [keep, scores, _f(m, f"neg_{m._n}", np.finfo(np.float32).min)])


def _repeat_kv(m, t, kv_heads, heads, dh):
    """(B, kv, S, dh) -> (B, kv, rep, S, dh) -> (B, heads, S, dh), with B and S read from Shape (GQA)."""
    t = m.op("Unsqueeze", [t, m.c(f"rk_{m._n}", [2])])
    big = m.op("Concat", [_dim(m, t, 0), m.c(f"kv_{m._n}", [kv_heads, heads // kv_heads]), _dim(m, t, 3),
                          m.c(f"dh_{m._n}", [dh])], axis=0)
    t = m.op("Expand", [t, big])
    new = m.op("Concat", [_dim(m, t, 0), m.c(f"h_{m._n}", [heads]), _dim(m, t, 3), m.c(f"d_{m._n}", [dh])], axis=0)
    return m.op("Reshape", [t, new])


def _llama_attention(m, x, pos, d, heads, kv_heads, dh, cos, sin, tag, mask_kind, fused_ops):
    q = _split_heads(m, _linear(m, x, d, heads * dh, f"{tag}_q", bias=False), heads, dh)
    k = _split_heads(m, _linear(m, x, d, kv_heads * dh, f"{tag}_k", bias=False), kv_heads, dh)
    v = _split_heads(m, _linear(m, x, d, kv_heads * dh, f"{tag}_v", bias=False), kv_heads, dh)
    if fused_ops:
        q = m.op("RotaryEmbedding", [q, cos, sin, pos])
        k = m.op("RotaryEmbedding", [k, cos, sin, pos])
    else:
        # HF computes the angles at run time: inv_freq @ position_ids, cat(freqs, freqs), cos / sin
        p = m.op("Cast", [m.op("Unsqueeze", [pos, m.c(f"{tag}_pu", [1])])], to=F32)              # (B, 1, S)
        inv = _f(m, f"{tag}_inv_freq", (1.0 / 10000.0 ** (np.arange(0, dh, 2) / dh)).reshape(1, dh // 2, 1))
        freqs = m.op("Transpose", [m.op("MatMul", [inv, p])], perm=[0, 2, 1])                   # (B, S, dh/2)
        emb = m.op("Concat", [freqs, freqs], axis=-1)
        c = m.op("Unsqueeze", [m.op("Cos", [emb]), m.c(f"{tag}_cu", [1])])                      # (B, 1, S, dh)
        s = m.op("Unsqueeze", [m.op("Sin", [emb]), m.c(f"{tag}_su", [1])])
        q = m.op("Add", [m.op("Mul", [q, c]), m.op("Mul", [_rotate_half(m, q, dh), s])])
        k = m.op("Add", [m.op("Mul", [k, c]), m.op("Mul", [_rotate_half(m, k, dh), s])])
    k, v = _repeat_kv(m, k, kv_heads, heads, dh), _repeat_kv(m, v, kv_heads, heads, dh)
    scores = m.op("MatMul", [q, m.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = m.op("Mul", [scores, _f(m, f"{tag}_scale", 1.0 / np.sqrt(dh))])
    attn = m.op("Softmax", [_causal_scores(m, scores, mask_kind)], axis=-1)
    ctx = _merge_heads(m, m.op("MatMul", [attn, v]), heads * dh)
    return _linear(m, ctx, heads * dh, d, f"{tag}_o", bias=False)


def _rms_norm_function(opset, eps=1e-6):
    """LlamaRMSNorm as a model-local function, the way torch's dynamo exporter (2.1-2.4) writes modules."""
    def const(name, **value):
        return helper.make_node("Constant", [], [name], name=f"const_{name}", **value)

    mean = (helper.make_node("ReduceMean", ["sq", "axes"], ["var"], name="mean", keepdims=1) if opset >= 18
            else helper.make_node("ReduceMean", ["sq"], ["var"], name="mean", axes=[-1], keepdims=1))
    body = [const("two", value_float=2.0), const("eps", value_float=eps), const("axes", value_ints=[-1]),
            helper.make_node("Pow", ["x", "two"], ["sq"], name="pow"), mean,
            helper.make_node("Add", ["var", "eps"], ["var_eps"], name="add_eps"),
            helper.make_node("Sqrt", ["var_eps"], ["root"], name="sqrt"),
            helper.make_node("Div", ["x", "root"], ["normed"], name="div"),
            helper.make_node("Mul", ["normed", "weight"], ["y"], name="scale")]
    return helper.make_function(_TORCH_DOMAIN, "LlamaRMSNorm", ["x", "weight"], ["y"], body,
                                [helper.make_opsetid("", opset)])


class _ModelWithFunctions(ModelBuilder):
    """ModelBuilder whose build also writes model-local functions and their domains' opset imports."""
    functions: list = []
    domains: list = []

    def build(self, name, inputs, outputs, opset):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, functions=self.functions,
                                  opset_imports=[helper.make_opsetid("", opset)] + self.domains)
        model.ir_version = 9
        onnx.checker.check_model(model)
        return model


_TORCH_DOMAIN = "pkg.torch.nn"


def llama(seed=0, batch=2, seq=8, vocab=64, d=32, heads=4, kv_heads=2, ffn=48, layers=2, opset=18,
          mask_kind="trilu", fused_ops=False, local_functions=False):
    """LLaMA decoder (no KV cache).

    fused_ops uses opset 23's RMSNormalization and RotaryEmbedding; local_functions
    writes each RMSNorm as a call to a model-local function (dynamo exporter style).
    """
    m = _ModelWithFunctions(seed)
    dh = d // heads
    max_pos = max(32, 2 * seq)
    cos = sin = None
    if fused_ops:
        cos_t, sin_t = _rope_tables(max_pos, dh)
        cos, sin = _f(m, "rope_cos", cos_t), _f(m, "rope_sin", sin_t)

    def norm(x, tag):
        if fused_ops:
            return m.op("RMSNormalization", [x, m.w(f"{tag}_g", d, positive=True)], axis=-1, epsilon=1e-6)
        if local_functions:
            return m.op("LlamaRMSNorm", [x, m.w(f"{tag}_g", d, positive=True)], domain=_TORCH_DOMAIN)
        return _rms_norm(m, x, d, tag, opset)

    h = m.op("Gather", [m.w("embed", vocab, d, scale=1.0), "input_ids"], axis=0)
    for i in range(layers):
        a = _llama_attention(m, norm(h, f"l{i}_in"), "position_ids", d, heads, kv_heads, dh, cos, sin,
                             f"l{i}", mask_kind, fused_ops)
        h = m.op("Add", [h, a])
        x = norm(h, f"l{i}_post")
        gate = _silu(m, _linear(m, x, d, ffn, f"l{i}_gate", bias=False))
        up = _linear(m, x, d, ffn, f"l{i}_up", bias=False)
        h = m.op("Add", [h, _linear(m, m.op("Mul", [gate, up]), ffn, d, f"l{i}_down", bias=False)])
    logits = _linear(m, norm(h, "final"), d, vocab, "lm_head", bias=False)
    inputs = [_info("input_ids", [batch, seq], I64), _info("position_ids", [batch, seq], I64)]
    if local_functions:
        m.functions, m.domains = [_rms_norm_function(opset)], [helper.make_opsetid(_TORCH_DOMAIN, 1)]
    model = m.build("llama", inputs, [_info(logits, [batch, seq, vocab])], opset)

    def feeds(rng):
        start = rng.integers(0, max_pos - seq, (batch, 1))
        return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64),
                "position_ids": (start + np.arange(seq)).astype(np.int64)}
    return model, feeds


def _past_causal_scores(m, scores):
    """Masks scores (B, H, S, P+S) where key j comes after query i's absolute position P + i."""
    total = m.op("Squeeze", [_dim(m, scores, 3), m.c(f"sqt_{m._n}", [0])])
    q_len = m.op("Squeeze", [_dim(m, scores, 2), m.c(f"sqq_{m._n}", [0])])
    past = m.op("Sub", [total, q_len])
    cols = m.op("Range", [m.c(f"c0_{m._n}", 0), total, m.c(f"c1_{m._n}", 1)])
    rows = m.op("Range", [past, total, m.c(f"r1_{m._n}", 1)])
    keep = m.op("LessOrEqual", [m.op("Unsqueeze", [cols, m.c(f"u0_{m._n}", [0])]),
                                m.op("Unsqueeze", [rows, m.c(f"u1_{m._n}", [1])])])
    return m.op("Where", [keep, scores, _f(m, f"neg_{m._n}", np.finfo(np.float32).min)])


def llama_kv(seed=0, vocab=64, d=32, heads=4, kv_heads=2, ffn=48, layers=2, opset=17):
    """LLaMA decoder with an explicit KV cache, as ONNX Runtime GenAI and Optimum export it.

    Inputs: input_ids and position_ids (batch, sequence), per layer past_key_values.{i}.key/value
    (batch, kv_heads, past_sequence, dh); outputs: logits (batch, sequence, vocab) and present.{i}.key/
    value (batch, kv_heads, total_sequence, dh) = concat(past, new). A prefill runs with past_sequence 0
    (empty past tensors), each decode step with sequence 1, feeding the presents back as the pasts.
    Every dim but the model's own is symbolic.
    """
    m = _ModelWithFunctions(seed)
    dh = d // heads
    h = m.op("Gather", [m.w("embed", vocab, d, scale=1.0), "input_ids"], axis=0)
    presents = []
    for i in range(layers):
        tag = f"l{i}"
        x = _rms_norm(m, h, d, f"{tag}_in", opset)
        q = _split_heads(m, _linear(m, x, d, heads * dh, f"{tag}_q", bias=False), heads, dh)
        k = _split_heads(m, _linear(m, x, d, kv_heads * dh, f"{tag}_k", bias=False), kv_heads, dh)
        v = _split_heads(m, _linear(m, x, d, kv_heads * dh, f"{tag}_v", bias=False), kv_heads, dh)
        p = m.op("Cast", [m.op("Unsqueeze", ["position_ids", m.c(f"{tag}_pu", [1])])], to=F32)  # (B, 1, S)
        inv = _f(m, f"{tag}_inv_freq", (1.0 / 10000.0 ** (np.arange(0, dh, 2) / dh)).reshape(1, dh // 2, 1))
        freqs = m.op("Transpose", [m.op("MatMul", [inv, p])], perm=[0, 2, 1])
        emb = m.op("Concat", [freqs, freqs], axis=-1)
        c = m.op("Unsqueeze", [m.op("Cos", [emb]), m.c(f"{tag}_cu", [1])])
        sn = m.op("Unsqueeze", [m.op("Sin", [emb]), m.c(f"{tag}_su", [1])])
        q = m.op("Add", [m.op("Mul", [q, c]), m.op("Mul", [_rotate_half(m, q, dh), sn])])
        k = m.op("Add", [m.op("Mul", [k, c]), m.op("Mul", [_rotate_half(m, k, dh), sn])])
        k = m.op("Concat", [f"past_key_values.{i}.key", k], axis=2)
        v = m.op("Concat", [f"past_key_values.{i}.value", v], axis=2)
        presents += [(k, f"present.{i}.key"), (v, f"present.{i}.value")]

        scores = m.op("MatMul", [q, m.op("Transpose", [_repeat_kv(m, k, kv_heads, heads, dh)], perm=[0, 1, 3, 2])])
        scores = m.op("Mul", [scores, _f(m, f"{tag}_scale", 1.0 / np.sqrt(dh))])
        attn = m.op("Softmax", [_past_causal_scores(m, scores)], axis=-1)
        ctx = _merge_heads(m, m.op("MatMul", [attn, _repeat_kv(m, v, kv_heads, heads, dh)]), heads * dh)
        a = _linear(m, ctx, heads * dh, d, f"{tag}_o", bias=False)
        h = m.op("Add", [h, a])
        x = _rms_norm(m, h, d, f"{tag}_post", opset)
        gate = _silu(m, _linear(m, x, d, ffn, f"{tag}_gate", bias=False))
        up = _linear(m, x, d, ffn, f"{tag}_up", bias=False)
        h = m.op("Add", [h, _linear(m, m.op("Mul", [gate, up]), ffn, d, f"{tag}_down", bias=False)])
    logits = _linear(m, _rms_norm(m, h, d, "final", opset), d, vocab, "lm_head", bias=False)
    for value, name in presents:       # outputs under the names the runtime's users look for
        m.nodes.append(helper.make_node("Identity", [value], [name], name=f"out_{name}"))
    past = ["batch", kv_heads, "past_sequence", dh]
    inputs = [_info("input_ids", ["batch", "sequence"], I64), _info("position_ids", ["batch", "sequence"], I64)]
    inputs += [_info(f"past_key_values.{i}.{kind}", past) for i in range(layers) for kind in ("key", "value")]
    outputs = [_info(logits, ["batch", "sequence", vocab])]
    outputs += [_info(name, ["batch", kv_heads, "total_sequence", dh]) for _, name in presents]
    return m.build("llama_kv", inputs, outputs, opset)


# --- 5. Whisper-encoder-style ----------------------------------------------------------------

def whisper_encoder(seed=0, batch=2, mels=8, frames=32, d=32, heads=4, ffn=64, opset=17):
    m = ModelBuilder(seed)
    dh = d // heads
    h = m.op("Conv", ["mel", m.w("conv1", d, mels, 3), m.w("conv1_b", d, scale=0.1)], kernel_shape=[3], pads=[1, 1])
    h = _erf_gelu(m, h)
    h = m.op("Conv", [h, m.w("conv2", d, d, 3), m.w("conv2_b", d, scale=0.1)], kernel_shape=[3], strides=[2],
             pads=[1, 1])
    h = m.op("Gelu", [h]) if opset >= 20 else _erf_gelu(m, h)
    t = frames // 2
    h = m.op("Add", [m.op("Transpose", [h], perm=[0, 2, 1]), m.w("pos_emb", t, d, scale=0.5)])   # (B, T, d)

    def ln(x, tag):
        return m.op("LayerNormalization", [x, m.w(f"{tag}_g", d, positive=True), m.w(f"{tag}_b", d, scale=0.1)],
                    axis=-1, epsilon=1e-5)

    x = ln(h, "ln1")
    scale = _f(m, "qk_scale", dh ** -0.25)                      # Whisper scales q and k by dh^-1/4 each
    q = _split_heads(m, m.op("Mul", [_linear(m, x, d, d, "q"), scale]), heads, dh)
    k = _split_heads(m, m.op("Mul", [_linear(m, x, d, d, "k", bias=False), scale]), heads, dh)
    v = _split_heads(m, _linear(m, x, d, d, "v"), heads, dh)
    attn = m.op("Softmax", [m.op("MatMul", [q, m.op("Transpose", [k], perm=[0, 1, 3, 2])])], axis=-1)
    h = m.op("Add", [h, _linear(m, _merge_heads(m, m.op("MatMul", [attn, v]), d), d, d, "o")])
    f = _linear(m, _erf_gelu(m, _linear(m, ln(h, "ln2"), d, ffn, "fc1")), ffn, d, "fc2")
    out = ln(m.op("Add", [h, f]), "ln_post")
    model = m.build("whisper_encoder", [_info("mel", [batch, mels, frames])], [_info(out, [batch, t, d])], opset)
    return model, _normal("mel", (batch, mels, frames))


class _ModelConstantNodes(ModelBuilder):
    """ModelBuilder writing its small constants as Constant nodes, as the TorchScript exporter does."""

    def c(self, name, value, dtype=np.int64):
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"Constant_{name}",
                                           value=numpy_helper.from_array(np.asarray(value, dtype), name)))
        return name


# --- 6. T5-style encoder layer ---------------------------------------------------------------

def _t5_buckets(seq, num_buckets=8, max_distance=16):
    """Bidirectional relative-position buckets (T5's scheme), computed once: a constant index."""
    rel = np.arange(seq)[None, :] - np.arange(seq)[:, None]
    half = num_buckets // 2
    out = (rel > 0).astype(np.int64) * half
    n = np.abs(rel)
    exact = half // 2
    large = exact + (np.log(np.maximum(n, 1) / exact) / np.log(max_distance / exact) * (half - exact)).astype(np.int64)
    return out + np.where(n < exact, n, np.minimum(large, half - 1))


def t5_layer(seed=0, batch=2, seq=12, vocab=64, d=32, heads=4, ffn=64, opset=17, constant_nodes=False):
    m = (_ModelConstantNodes if constant_nodes else ModelBuilder)(seed)
    dh = d // heads
    h = m.op("Gather", [m.w("embed", vocab, d, scale=1.0), "input_ids"], axis=0)
    # extended attention mask: (1 - mask) * finfo.min, (B, 1, 1, S)
    mask = m.op("Cast", [m.op("Unsqueeze", ["attention_mask", m.c("mask_ax", [1, 2])])], to=F32)
    mask = m.op("Mul", [m.op("Sub", [_f(m, "mask_one", 1.0), mask]), _f(m, "mask_min", np.finfo(np.float32).min)])
    bias = m.op("Gather", [m.w("rel_bias", 8, heads, scale=1.0), m.c("buckets", _t5_buckets(seq))], axis=0)
    bias = m.op("Unsqueeze", [m.op("Transpose", [bias], perm=[2, 0, 1]), m.c("bias_ax", [0])])   # (1, H, S, S)
    bias = m.op("Add", [bias, mask])
    x = _rms_norm(m, h, d, "ln1", opset, reciprocal=True)
    q = _split_heads(m, _linear(m, x, d, d, "q", bias=False), heads, dh)
    k = _split_heads(m, _linear(m, x, d, d, "k", bias=False), heads, dh)
    v = _split_heads(m, _linear(m, x, d, d, "v", bias=False), heads, dh)
    scores = m.op("Add", [m.op("MatMul", [q, m.op("Transpose", [k], perm=[0, 1, 3, 2])]), bias])   # no scaling
    attn = m.op("Softmax", [scores], axis=-1)
    h = m.op("Add", [h, _linear(m, _merge_heads(m, m.op("MatMul", [attn, v]), d), d, d, "o", bias=False)])
    x = _rms_norm(m, h, d, "ln2", opset, reciprocal=True)
    f = _linear(m, m.op("Relu", [_linear(m, x, d, ffn, "wi", bias=False)]), ffn, d, "wo", bias=False)
    out = _rms_norm(m, m.op("Add", [h, f]), d, "ln_final", opset, reciprocal=True)
    inputs = [_info("input_ids", [batch, seq], I64), _info("attention_mask", [batch, seq], I64)]
    model = m.build("t5_layer", inputs, [_info(out, [batch, seq, d])], opset)

    def feeds(rng):
        lengths = rng.integers(seq // 2, seq + 1, batch)
        return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64),
                "attention_mask": (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)}
    return model, feeds


# --- 7. BiLSTM sequence tagger ---------------------------------------------------------------

def lstm_tagger(seed=0, batch=2, seq=10, vocab=50, emb=16, hidden=16, tags=7, opset=14):
    m = ModelBuilder(seed)
    e = m.op("Gather", [m.w("embed", vocab, emb, scale=1.0), "tokens"], axis=0)                # (B, S, E)
    e = m.op("Transpose", [e], perm=[1, 0, 2])                                                  # (S, B, E)
    y, _, _ = m.op("LSTM", [e, m.w("lstm_w", 2, 4 * hidden, emb), m.w("lstm_r", 2, 4 * hidden, hidden),
                            m.w("lstm_b", 2, 8 * hidden, scale=0.1)], n_out=3, direction="bidirectional",
                   hidden_size=hidden)                                                          # (S, 2, B, H)
    y = m.op("Transpose", [y], perm=[0, 2, 1, 3])
    y = m.op("Reshape", [y, m.c("merge", [0, 0, -1])])                                          # (S, B, 2H)
    y = m.op("Transpose", [y], perm=[1, 0, 2])
    logits = _linear(m, y, 2 * hidden, tags, "proj")
    out = m.op("LogSoftmax", [logits], axis=-1)
    model = m.build("lstm_tagger", [_info("tokens", [batch, seq], I64)], [_info(out, [batch, seq, tags])], opset)
    return model, lambda rng: {"tokens": rng.integers(0, vocab, (batch, seq)).astype(np.int64)}


def with_dynamic_axes(built, axes=("batch_size", "sequence_length")):
    """The model with its inputs' and outputs' leading dims symbolic, as exports with dynamic_axes write them.

    Only dims equal to the first input's own leading dims are renamed (a feature dim of the
    same size would be too, which real exports never do; the builders keep them distinct).
    """
    model, feeds = built
    first = model.graph.input[0].type.tensor_type.shape.dim
    sizes = {first[i].dim_value: name for i, name in enumerate(axes) if i < len(first)}
    for v in list(model.graph.input) + list(model.graph.output):
        for i, d in enumerate(v.type.tensor_type.shape.dim[:len(axes)]):
            if sizes.get(d.dim_value) == axes[i]:
                d.dim_param = axes[i]
    return model, feeds


ZOO_MODELS = {
    "efficientnet": efficientnet,
    "efficientnet_swish_op": lambda: efficientnet(opset=24, act="Swish"),
    "unet": unet,
    "yolo": yolo,
    "llama": llama,
    "llama_where_mask": lambda: llama(mask_kind="where", opset=17),
    "llama_opset23": lambda: llama(opset=23, fused_ops=True),
    "llama_local_functions": lambda: llama(local_functions=True),
    "llama_dynamic_axes": lambda: with_dynamic_axes(llama(batch=3, seq=7)),
    "whisper_encoder": whisper_encoder,
    "whisper_encoder_gelu_op": lambda: whisper_encoder(opset=20),
    "t5_layer": t5_layer,
    "t5_layer_constant_nodes": lambda: t5_layer(constant_nodes=True),
    "lstm_tagger": lstm_tagger,
}
