"""What the model builders share: a small ONNX graph builder with seeded random weights.

Every builder in small.py, real.py and zoo.py starts from `ModelBuilder(seed)`,
adds nodes with `m.op("Conv", [x, m.w("k", 8, 3, 3, 3)], pads=[1, 1, 1, 1])`
and ends with `m.build(name, inputs, outputs, opset)`, which runs the ONNX
checker. Weights are drawn with a fan-in scale so activations stay near unit
size through deep stacks; `m.rng` then draws the inputs.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


class ModelBuilder:
    """Nodes and initializers of one model; `op` adds a node and names its outputs, `w` a random weight."""

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


def batch_norm(m, x, c, tag):
    """BatchNormalization of the (N, c, ...) tensor `x` with random positive scales and variances."""
    return m.op("BatchNormalization", [x, m.w(f"{tag}_s", c, positive=True), m.w(f"{tag}_b", c, scale=0.1),
                                       m.w(f"{tag}_m", c, scale=0.1), m.w(f"{tag}_v", c, positive=True)],
                epsilon=1e-5)
