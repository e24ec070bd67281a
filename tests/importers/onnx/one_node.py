"""One-node ONNX models checked against onnxruntime through the importer and the interpreter.

The helpers the ONNX importer's tests share: seeded random inputs (`F`, `P`,
`I`), `make_model` for a one-node model, `check` comparing the imported
graph's interpretation with onnxruntime, and `C`, one parametrized case.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from aotc.hlo_passes.verify import verify
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret

rng = np.random.default_rng(1234)


def F(*shape):
    """Random f32 normal values (never exactly zero in practice)."""
    return rng.standard_normal(shape).astype(np.float32)


def P(*shape):
    """Random positive f32 values."""
    return rng.uniform(0.5, 2.0, shape).astype(np.float32)


def I(*vals):
    return np.array(vals, np.int64)


def make_model(op, inputs, attrs=None, opset=17, consts=(), n_out=1, domain=""):
    """One-node model; `inputs` is [(name, array)], '' names an omitted optional input."""
    vis, inits = [], []
    for name, a in inputs:
        if not name:
            continue
        if name in consts:
            inits.append(numpy_helper.from_array(a, name))
        else:
            vis.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, [n for n, _ in inputs], outs, name=f"{op.lower()}_0", domain=domain, **(attrs or {}))
    g = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m)


def check(model, feeds, rtol=1e-5, atol=1e-5):
    graph = import_onnx(model)
    verify(graph)
    got = interpret(graph, feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert graph.output_names == [o.name for o in model.graph.output]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def C(op, inputs, attrs=None, opset=17, consts=(), n_out=1, id=None):
    return pytest.param(op, inputs, attrs, opset, consts, n_out, id=id or op)


def run_case(op, inputs, attrs, opset, consts, n_out):
    """Build the case's one-node model and check it (inputs named in `consts` become initializers)."""
    model = make_model(op, inputs, attrs, opset, consts, n_out)
    check(model, {n: a for n, a in inputs if n and n not in consts})
