"""Small real architectures built with onnx.helper, random weights, no downloads.

Each builder returns (onnx.ModelProto, {input name: array}). Shapes are small
so the host emulation runs them in seconds; the structure is what exported
models look like (Shape/Gather/Concat chains before Reshape, Gemm with transB,
erf-based GELU, LayerNormalization, batch norm after conv).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Model:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self._n = 0

    def w(self, name, *shape, scale=None, positive=False):
        if positive:
            a = self.rng.uniform(0.5, 1.5, shape)
        else:
            scale = scale if scale is not None else 1.0 / np.sqrt(max(1, np.prod(shape[1:]) if len(shape) > 1 else 1))
            a = self.rng.standard_normal(shape) * scale
        self.inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    def c(self, name, value, dtype=np.int64):
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type, inputs, n_out=1, **attrs):
        self._n += 1
        outs = [f"{op_type.lower()}_{self._n}" + (f"_{i}" if n_out > 1 else "") for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{op_type}_{self._n}", **attrs))
        return outs[0] if n_out == 1 else outs

    def build(self, name, inputs, outputs, opset):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 9
        onnx.checker.check_model(model)
        return model


def mlp(seed=0, batch=4, dims=(32, 64, 48, 10)):
    m = _Model(seed)
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


def _bn(m, x, c, tag):
    return m.op("BatchNormalization", [x, m.w(f"{tag}_s", c, positive=True), m.w(f"{tag}_b", c, scale=0.1),
                                       m.w(f"{tag}_m", c, scale=0.1), m.w(f"{tag}_v", c, positive=True)],
                epsilon=1e-5)


def cnn(seed=0, batch=2, size=16):
    m = _Model(seed)
    h = m.op("Conv", ["image", m.w("c1", 8, 3, 3, 3), m.w("c1b", 8)], pads=[1, 1, 1, 1])
    h = m.op("Relu", [_bn(m, h, 8, "bn1")])
    h = m.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    h = m.op("Conv", [h, m.w("c2", 16, 4, 3, 3)], strides=[2, 2], pads=[1, 1, 1, 1], group=2)
    h = m.op("Relu", [_bn(m, h, 16, "bn2")])
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
    m = _Model(seed)
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
