"""Small real architectures built with onnx.helper, random weights, no downloads.

Each builder returns (onnx.ModelProto, {input name: array}). Shapes are small
so the host emulation runs them in seconds; the structure is what exported
models look like (Shape/Gather/Concat chains before Reshape, Gemm with transB,
erf-based GELU, LayerNormalization, batch norm after conv).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from aotc.bench.models.builders import ModelBuilder, batch_norm


def mlp(seed=0, batch=4, dims=(32, 64, 48, 10)):
    m = ModelBuilder(seed)
    x = "x"
    h = x
    h = m.op("Gemm", [h, m.w("w0", dims[1], dims[0]), m.w("b0", dims[1])], transB=1)
    h = m.op("Relu", [h])
    h = m.op("MatMul", [h, m.w("w1", dims[1], dims[2])])
    h = m.op("Add", [h, m.w("b1", dims[2])])
    h = m.op("Gelu", [h], approximate="tanh")
    h = m.op("Gemm", [h, m.w("w2", dims[2], dims[3]), m.w("b2", dims[3])], alpha=0.5, beta=2.0)
    h = m.op("Sigmoid", [h])
    model = m.build("mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, dims[0]])],
                    [helper.make_tensor_value_info(h, TensorProto.FLOAT, [batch, dims[3]])], opset=20)
    return model, {"x": m.rng.standard_normal((batch, dims[0])).astype(np.float32)}


def cnn(seed=0, batch=2, size=16):
    m = ModelBuilder(seed)
    h = m.op("Conv", ["image", m.w("c1", 8, 3, 3, 3), m.w("c1b", 8)], pads=[1, 1, 1, 1])
    h = m.op("Relu", [batch_norm(m, h, 8, "bn1")])
    h = m.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    h = m.op("Conv", [h, m.w("c2", 16, 4, 3, 3)], strides=[2, 2], pads=[1, 1, 1, 1], group=2)
    h = m.op("Relu", [batch_norm(m, h, 16, "bn2")])
    r = m.op("Conv", [h, m.w("c3", 16, 1, 3, 3)], pads=[1, 1, 1, 1], group=16)     # depthwise
    h = m.op("Add", [h, m.op("Clip", [r, m.c("lo", 0.0, np.float32), m.c("hi", 6.0, np.float32)])])
    h = m.op("AveragePool", [h], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1], count_include_pad=0)
    h = m.op("GlobalAveragePool", [h])
    h = m.op("Flatten", [h])
    h = m.op("Gemm", [h, m.w("fc", 10, 16), m.w("fcb", 10)], transB=1)
    out = m.op("Softmax", [h], axis=1)
    model = m.build("cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                    [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, 10])], opset=17)
    return model, {"image": m.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def transformer_block(seed=0, batch=2, seq=16, d=32, heads=4, ffn=64):
    """One post-LN encoder block as PyTorch exports it (Shape/Gather/Concat before Reshape)."""
    m = ModelBuilder(seed)
    dh = d // heads
    x = "x"

    def linear(h, din, dout, tag):
        return m.op("Add", [m.op("MatMul", [h, m.w(f"{tag}_w", din, dout)]), m.w(f"{tag}_b", dout, scale=0.1)])

    def split_heads(h):
        shape = m.op("Shape", [h])
        b = m.op("Unsqueeze", [m.op("Gather", [shape, m.c(f"i0_{m._n}", 0)], axis=0), m.c(f"ax_{m._n}", [0])])
        s = m.op("Unsqueeze", [m.op("Gather", [shape, m.c(f"i1_{m._n}", 1)], axis=0), m.c(f"ax_{m._n}", [0])])
        new = m.op("Concat", [b, s, m.c(f"hd_{m._n}", [heads, dh])], axis=0)
        return m.op("Transpose", [m.op("Reshape", [h, new])], perm=[0, 2, 1, 3])       # (B, H, S, Dh)

    q = split_heads(linear(x, d, d, "q"))
    k = split_heads(linear(x, d, d, "k"))
    v = split_heads(linear(x, d, d, "v"))
    kt = m.op("Transpose", [k], perm=[0, 1, 3, 2])
    scores = m.op("Div", [m.op("MatMul", [q, kt]), m.c("scale", np.sqrt(dh), np.float32)])
    mask = m.c("mask", np.where(np.tril(np.ones((seq, seq))) > 0, 0.0, -1e4), np.float32)
    attn = m.op("Softmax", [m.op("Add", [scores, mask])], axis=-1)
    ctx = m.op("Transpose", [m.op("MatMul", [attn, v])], perm=[0, 2, 1, 3])
    ctx = m.op("Reshape", [ctx, m.c("merge", [0, 0, d])])
    h = m.op("Add", [x, linear(ctx, d, d, "o")])
    h = m.op("LayerNormalization", [h, m.w("ln1_g", d, positive=True), m.w("ln1_b", d, scale=0.1)],
             axis=-1, epsilon=1e-5)
    f = linear(h, d, ffn, "f1")
    # GELU as torch.onnx exports it: x * 0.5 * (1 + erf(x / sqrt(2)))
    g = m.op("Mul", [m.op("Mul", [f, m.op("Add", [m.op("Erf", [m.op("Div", [f, m.c("sqrt2", np.sqrt(2), np.float32)])]),
                                                  m.c("one", 1.0, np.float32)])]),
                     m.c("half", 0.5, np.float32)])
    h2 = m.op("Add", [h, linear(g, ffn, d, "f2")])
    out = m.op("LayerNormalization", [h2, m.w("ln2_g", d, positive=True), m.w("ln2_b", d, scale=0.1)],
               axis=-1, epsilon=1e-5)
    model = m.build("encoder_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d])],
                    [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, seq, d])], opset=17)
    return model, {"x": m.rng.standard_normal((batch, seq, d)).astype(np.float32)}


MODELS = {"mlp": mlp, "cnn": cnn, "transformer_block": transformer_block}


def resnet_bottleneck(seed=0, batch=1, size=32, base=8, blocks=(3, 4, 6, 3), classes=10):
    """ResNet-50's layout (stem 7x7/2 + maxpool, bottleneck stages 3-4-6-3, 1x1 projection shortcuts,
    global pool, Flatten, Gemm) at a small width and image size: 53 conv + batch-norm pairs."""
    m = ModelBuilder(seed)

    def conv_bn(x, cin, cout, k, stride, relu, tag):
        h = m.op("Conv", [x, m.w(f"{tag}w", cout, cin, k, k)], pads=[k // 2] * 4, strides=[stride] * 2)
        h = batch_norm(m, h, cout, tag)
        return m.op("Relu", [h]) if relu else h

    h = conv_bn("image", 3, base, 7, 2, True, "stem")
    h = m.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = base
    for stage, reps in enumerate(blocks):
        width = base * 2 ** stage
        for i in range(reps):
            stride = 2 if (i == 0 and stage > 0) else 1
            t = f"s{stage}b{i}"
            r = conv_bn(h, cin, width, 1, 1, True, t + "a")
            r = conv_bn(r, width, width, 3, stride, True, t + "b")
            r = conv_bn(r, width, width * 4, 1, 1, False, t + "c")
            short = h if i > 0 else conv_bn(h, cin, width * 4, 1, stride, False, t + "d")
            h = m.op("Relu", [m.op("Add", [r, short])])
            cin = width * 4
    h = m.op("Flatten", [m.op("GlobalAveragePool", [h])])
    out = m.op("Gemm", [h, m.w("fc", classes, cin), m.w("fcb", classes, scale=0.1)], transB=1)
    model = m.build("resnet_bottleneck",
                    [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                    [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, classes])], opset=17)
    return model, {"image": m.rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def bert_encoder(seed=0, batch=2, seq=16, layers=2, d=32, heads=4, ffn=64, vocab=50, max_pos=None):
    """BERT's layout as exported: token/position/type embeddings (Gather), LayerNorm, an additive mask
    computed from a 0/1 input (Unsqueeze/Cast/Sub/Mul), post-LN blocks whose head split/merge go
    through Shape/Gather/Unsqueeze/Concat -> Reshape chains, erf GELU, and a tanh pooler on token 0.

    With `max_pos` the positions are the first seq of a max_pos-long table (a Slice to Shape(ids)[1],
    as HF's BERT takes them), so the model serves any sequence up to max_pos once its axes are dynamic
    (zoo.with_dynamic_axes)."""
    m = ModelBuilder(seed)
    dh = d // heads

    def linear(h, din, dout, tag):
        return m.op("Add", [m.op("MatMul", [h, m.w(f"{tag}_w", din, dout)]), m.w(f"{tag}_b", dout, scale=0.1)])

    def ln(h, tag):
        return m.op("LayerNormalization", [h, m.w(f"{tag}_g", d, positive=True), m.w(f"{tag}_b", d, scale=0.1)],
                    axis=-1, epsilon=1e-12)

    def dims(h, *idx):
        shape = m.op("Shape", [h])
        return [m.op("Unsqueeze", [m.op("Gather", [shape, m.c(f"i{i}_{m._n}", i)], axis=0),
                                   m.c(f"ax{i}_{m._n}", [0])]) for i in idx]

    def split(h, perm):
        b, s = dims(h, 0, 1)
        new = m.op("Concat", [b, s, m.c(f"hd_{m._n}", [heads, dh])], axis=0)
        return m.op("Transpose", [m.op("Reshape", [h, new])], perm=perm)

    if max_pos is None:
        pos, table = m.c("pos", np.arange(seq)[None, :]), seq
    else:
        seq_len = m.op("Gather", [m.op("Shape", ["input_ids"]), m.c("seq_axis", [1])], axis=0)
        pos = m.op("Slice", [m.c("pos", np.arange(max_pos)[None, :]), m.c("pos_start", [0]), seq_len,
                             m.c("pos_axis", [1])])
        table = max_pos
    h = m.op("Add", [m.op("Gather", [m.w("wte", vocab, d, scale=0.5), "input_ids"]),
                     m.op("Gather", [m.w("wpe", table, d, scale=0.5), pos])])
    h = ln(m.op("Add", [h, m.op("Gather", [m.w("wtt", 2, d, scale=0.5), "token_type_ids"])]), "emb")
    mask = m.op("Unsqueeze", [m.op("Cast", ["attention_mask"], to=TensorProto.FLOAT), m.c("mask_axes", [1, 2])])
    mask = m.op("Mul", [m.op("Sub", [m.c("one_m", 1.0, np.float32), mask]), m.c("neg", -10000.0, np.float32)])
    for layer in range(layers):
        t = f"l{layer}"
        q = split(linear(h, d, d, t + "q"), [0, 2, 1, 3])
        k = split(linear(h, d, d, t + "k"), [0, 2, 3, 1])
        v = split(linear(h, d, d, t + "v"), [0, 2, 1, 3])
        scores = m.op("Div", [m.op("MatMul", [q, k]), m.c(f"{t}sc", np.sqrt(dh), np.float32)])
        probs = m.op("Softmax", [m.op("Add", [scores, mask])], axis=-1)
        ctx = m.op("Transpose", [m.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        b, s = dims(ctx, 0, 1)
        ctx = m.op("Reshape", [ctx, m.op("Concat", [b, s, m.c(f"{t}d", [d])], axis=0)])
        h = ln(m.op("Add", [h, linear(ctx, d, d, t + "o")]), t + "ln1")
        f = linear(h, d, ffn, t + "f1")
        g = m.op("Mul", [m.op("Mul", [f, m.op("Add", [m.op("Erf", [m.op("Div", [f, m.c(f"{t}r2", np.sqrt(2), np.float32)])]),
                                                      m.c(f"{t}one", 1.0, np.float32)])]),
                         m.c(f"{t}half", 0.5, np.float32)])
        h = ln(m.op("Add", [h, linear(g, ffn, d, t + "f2")]), t + "ln2")
    first = m.op("Gather", [h, m.c("tok0", 0)], axis=1)
    pooled = m.op("Tanh", [m.op("Gemm", [first, m.w("pool_w", d, d), m.w("pool_b", d, scale=0.1)], transB=1)])
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [batch, seq])
           for n in ("input_ids", "token_type_ids", "attention_mask")]
    model = m.build("bert_encoder", ins,
                    [helper.make_tensor_value_info(h, TensorProto.FLOAT, [batch, seq, d]),
                     helper.make_tensor_value_info(pooled, TensorProto.FLOAT, [batch, d])], opset=17)
    attn = np.ones((batch, seq), np.int64)
    attn[:, seq - seq // 4:] = 0
    feeds = {"input_ids": m.rng.integers(0, vocab, (batch, seq)).astype(np.int64),
             "token_type_ids": (np.arange(seq) >= seq // 2).astype(np.int64)[None].repeat(batch, 0),
             "attention_mask": attn}
    return model, feeds
