"""Full-size architectures built with onnx.helper (random weights, no downloads).

ResNet-50, MobileNetV2, BERT-base, GPT-2 small and ViT-B/16 with their real
layer counts and widths, written the way exporters write them: conv + batch
norm + relu, Gemm classifiers, Shape/Gather/Concat chains before reshapes,
erf or tanh GELU, LayerNormalization, additive attention masks. Each builder
returns (onnx.ModelProto, {input name: array}).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from aotc.bench.models.builders import ModelBuilder


def _conv_bn(m, x, cin, cout, k, stride=1, groups=1, act="relu", tag=""):
    pad = k // 2
    h = m.op("Conv", [x, m.w(f"{tag}w", cout, cin // groups, k, k)], pads=[pad] * 4, strides=[stride] * 2,
             group=groups)
    h = m.op("BatchNormalization", [h, m.w(f"{tag}s", cout, positive=True), m.w(f"{tag}b", cout, scale=0.1),
                                    m.w(f"{tag}m", cout, scale=0.1), m.w(f"{tag}v", cout, positive=True)],
             epsilon=1e-5)
    if act == "relu":
        h = m.op("Relu", [h])
    elif act == "relu6":
        h = m.op("Clip", [h, m.c(f"{tag}lo", 0.0, np.float32), m.c(f"{tag}hi", 6.0, np.float32)])
    return h


def resnet50(seed=0, batch=1, size=224, classes=1000):
    m = ModelBuilder(seed)
    h = _conv_bn(m, "image", 3, 64, 7, stride=2, tag="stem")
    h = m.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for i in range(blocks):
            stride = 2 if (i == 0 and stage > 0) else 1
            t = f"s{stage}b{i}"
            r = _conv_bn(m, h, cin, width, 1, tag=t + "a")
            r = _conv_bn(m, r, width, width, 3, stride=stride, tag=t + "b")
            r = _conv_bn(m, r, width, width * 4, 1, act=None, tag=t + "c")
            short = h if (i > 0) else _conv_bn(m, h, cin, width * 4, 1, stride=stride, act=None, tag=t + "d")
            h = m.op("Relu", [m.op("Add", [r, short])])
            cin = width * 4
    h = m.op("Flatten", [m.op("GlobalAveragePool", [h])])
    out = m.op("Gemm", [h, m.w("fc", classes, cin), m.w("fcb", classes, scale=0.1)], transB=1)
    model = m.build("resnet50", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                    [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, classes])], opset=17)
    return model, {"image": m.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def mobilenetv2(seed=0, batch=1, size=224, classes=1000):
    m = ModelBuilder(seed)
    h = _conv_bn(m, "image", 3, 32, 3, stride=2, act="relu6", tag="stem")
    cin = 32
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    n = 0
    for t, c, reps, s in settings:
        for i in range(reps):
            n += 1
            stride = s if i == 0 else 1
            hidden = cin * t
            r = h if t == 1 else _conv_bn(m, h, cin, hidden, 1, act="relu6", tag=f"ir{n}e")
            r = _conv_bn(m, r, hidden, hidden, 3, stride=stride, groups=hidden, act="relu6", tag=f"ir{n}d")
            r = _conv_bn(m, r, hidden, c, 1, act=None, tag=f"ir{n}p")
            h = m.op("Add", [h, r]) if (stride == 1 and cin == c) else r
            cin = c
    h = _conv_bn(m, h, cin, 1280, 1, act="relu6", tag="last")
    h = m.op("Flatten", [m.op("GlobalAveragePool", [h])])
    out = m.op("Gemm", [h, m.w("fc", classes, 1280), m.w("fcb", classes, scale=0.1)], transB=1)
    model = m.build("mobilenetv2",
                    [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                    [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, classes])], opset=17)
    return model, {"image": m.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def _linear(m, h, din, dout, tag):
    return m.op("Add", [m.op("MatMul", [h, m.w(f"{tag}_w", din, dout)]), m.w(f"{tag}_b", dout, scale=0.02)])


def _heads(m, h, heads, dh, perm):
    """(B, S, D) -> (B, H, S, Dh) (or perm), via the Shape/Gather/Concat chain exporters emit."""
    shape = m.op("Shape", [h])
    b = m.op("Unsqueeze", [m.op("Gather", [shape, m.c(f"g0_{m._n}", 0)], axis=0), m.c(f"u0_{m._n}", [0])])
    s = m.op("Unsqueeze", [m.op("Gather", [shape, m.c(f"g1_{m._n}", 1)], axis=0), m.c(f"u1_{m._n}", [0])])
    new = m.op("Concat", [b, s, m.c(f"hd_{m._n}", [heads, dh])], axis=0)
    return m.op("Transpose", [m.op("Reshape", [h, new])], perm=perm)


def _gelu(m, x, approx):
    if approx:       # GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = m.op("Mul", [m.op("Pow", [x, m.c(f"three_{m._n}", 3.0, np.float32)]),
                          m.c(f"k_{m._n}", 0.044715, np.float32)])
        t = m.op("Tanh", [m.op("Mul", [m.op("Add", [x, x3]), m.c(f"s_{m._n}", np.sqrt(2 / np.pi), np.float32)])])
        return m.op("Mul", [m.op("Mul", [x, m.c(f"h_{m._n}", 0.5, np.float32)]),
                            m.op("Add", [t, m.c(f"o_{m._n}", 1.0, np.float32)])])
    e = m.op("Erf", [m.op("Div", [x, m.c(f"r2_{m._n}", np.sqrt(2), np.float32)])])
    return m.op("Mul", [m.op("Mul", [x, m.op("Add", [e, m.c(f"o_{m._n}", 1.0, np.float32)])]),
                        m.c(f"h_{m._n}", 0.5, np.float32)])


def _ln(m, x, d, tag):
    return m.op("LayerNormalization", [x, m.w(f"{tag}_g", d, positive=True), m.w(f"{tag}_b", d, scale=0.02)],
                axis=-1, epsilon=1e-5)


def _attention(m, x, d, heads, mask, tag):
    dh = d // heads
    q = _heads(m, _linear(m, x, d, d, f"{tag}q"), heads, dh, [0, 2, 1, 3])
    k = _heads(m, _linear(m, x, d, d, f"{tag}k"), heads, dh, [0, 2, 3, 1])
    v = _heads(m, _linear(m, x, d, d, f"{tag}v"), heads, dh, [0, 2, 1, 3])
    scores = m.op("Div", [m.op("MatMul", [q, k]), m.c(f"{tag}sc", np.sqrt(dh), np.float32)])
    probs = m.op("Softmax", [m.op("Add", [scores, mask])], axis=-1)
    ctx = m.op("Transpose", [m.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    shape = m.op("Shape", [x])
    merged = m.op("Reshape", [ctx, m.op("Concat", [m.op("Slice", [shape, m.c(f"{tag}s0", [0]), m.c(f"{tag}s1", [2])]),
                                                   m.c(f"{tag}dd", [d])], axis=0)])
    return _linear(m, merged, d, d, f"{tag}o")


def _block(m, x, d, heads, ffn, mask, pre_ln, approx_gelu, tag):
    if pre_ln:
        h = m.op("Add", [x, _attention(m, _ln(m, x, d, f"{tag}ln1"), d, heads, mask, tag)])
        f = _gelu(m, _linear(m, _ln(m, h, d, f"{tag}ln2"), d, ffn, f"{tag}f1"), approx_gelu)
        return m.op("Add", [h, _linear(m, f, ffn, d, f"{tag}f2")])
    h = _ln(m, m.op("Add", [x, _attention(m, x, d, heads, mask, tag)]), d, f"{tag}ln1")
    f = _gelu(m, _linear(m, h, d, ffn, f"{tag}f1"), approx_gelu)
    return _ln(m, m.op("Add", [h, _linear(m, f, ffn, d, f"{tag}f2")]), d, f"{tag}ln2")


def bert_base(seed=0, batch=1, seq=128, layers=12, d=768, heads=12, ffn=3072, vocab=30522):
    m = ModelBuilder(seed)
    pos = m.c("pos_ids", np.arange(seq)[None, :])
    h = m.op("Add", [m.op("Gather", [m.w("wte", vocab, d, scale=0.02), "input_ids"]),
                     m.op("Gather", [m.w("wpe", 512, d, scale=0.02), pos])])
    h = m.op("Add", [h, m.op("Gather", [m.w("wtt", 2, d, scale=0.02), "token_type_ids"])])
    h = _ln(m, h, d, "emb")
    # (B, S) 0/1 mask -> additive (B, 1, 1, S), as BERT exports compute it
    mk = m.op("Unsqueeze", ["attention_mask", m.c("mask_axes", [1, 2])])
    mk = m.op("Cast", [mk], to=TensorProto.FLOAT)
    mask = m.op("Mul", [m.op("Sub", [m.c("one_f", 1.0, np.float32), mk]), m.c("neg", -10000.0, np.float32)])
    for i in range(layers):
        h = _block(m, h, d, heads, ffn, mask, pre_ln=False, approx_gelu=False, tag=f"l{i}")
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [batch, seq])
           for n in ("input_ids", "token_type_ids", "attention_mask")]
    model = m.build("bert_base", ins, [helper.make_tensor_value_info(h, TensorProto.FLOAT, [batch, seq, d])],
                    opset=17)
    mask_np = np.ones((batch, seq), np.int64)
    mask_np[:, seq - seq // 8:] = 0
    feeds = {"input_ids": m.rng.integers(0, vocab, (batch, seq)).astype(np.int64),
             "token_type_ids": (m.rng.random((batch, seq)) < 0.5).astype(np.int64),
             "attention_mask": mask_np}
    return model, feeds


def gpt2_small(seed=0, batch=1, seq=128, layers=12, d=768, heads=12, vocab=50257):
    m = ModelBuilder(seed)
    wte = m.w("wte", vocab, d, scale=0.02)
    h = m.op("Add", [m.op("Gather", [wte, "input_ids"]),
                     m.op("Gather", [m.w("wpe", 1024, d, scale=0.02), m.c("pos_ids", np.arange(seq)[None, :])])])
    mask = m.c("causal", np.where(np.tril(np.ones((seq, seq))) > 0, 0.0, -1e9)[None, None], np.float32)
    for i in range(layers):
        h = _block(m, h, d, heads, 4 * d, mask, pre_ln=True, approx_gelu=True, tag=f"l{i}")
    h = _ln(m, h, d, "lnf")
    logits = m.op("MatMul", [h, m.op("Transpose", [wte], perm=[1, 0])])       # tied LM head
    model = m.build("gpt2_small", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
                    [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [batch, seq, vocab])], opset=17)
    return model, {"input_ids": m.rng.integers(0, vocab, (batch, seq)).astype(np.int64)}


def vit_b16(seed=0, batch=1, size=224, layers=12, d=768, heads=12, classes=1000):
    m = ModelBuilder(seed)
    n = (size // 16) ** 2
    p = m.op("Conv", ["image", m.w("patch_w", d, 3, 16, 16), m.w("patch_b", d, scale=0.02)], strides=[16, 16])
    p = m.op("Transpose", [m.op("Reshape", [p, m.c("flat", [batch, d, n])])], perm=[0, 2, 1])
    cls = m.op("Expand", [m.w("cls", 1, 1, d, scale=0.02), m.c("cls_shape", [batch, 1, d])])
    h = m.op("Add", [m.op("Concat", [cls, p], axis=1), m.w("pos", 1, n + 1, d, scale=0.02)])
    mask = m.c("nomask", np.zeros((1, 1, 1, n + 1)), np.float32)
    for i in range(layers):
        h = _block(m, h, d, heads, 4 * d, mask, pre_ln=True, approx_gelu=False, tag=f"l{i}")
    h = _ln(m, h, d, "lnf")
    cls_out = m.op("Gather", [h, m.c("cls_idx", 0)], axis=1)
    out = m.op("Gemm", [cls_out, m.w("head", classes, d), m.w("head_b", classes, scale=0.02)], transB=1)
    model = m.build("vit_b16", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                    [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, classes])], opset=17)
    return model, {"image": m.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


REAL_MODELS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2, "bert_base": bert_base,
               "gpt2_small": gpt2_small, "vit_b16": vit_b16}
