"""The reference interpreter: runs any Graph with numpy, op by op.

It is the oracle for passes (interpret before == after), for kernels
(generated code vs interpreter) and the last word on what an op means.
"""
from __future__ import annotations

import numpy as np

from aotc.errors import InputError
from aotc.ir import ops
from aotc.ir.graph import Graph, Value
from aotc.ir.specialize import bind_dims, specialize


def interpret(graph: Graph, inputs: dict[str, np.ndarray] | list[np.ndarray],
              return_env: bool = False):
    """Run `graph` on inputs (by input name, or in signature order); outputs in order.

    A dynamic graph runs at the shapes of the inputs given (specialize.py); with
    `return_env` the environment is keyed by the specialized graph's Values.
    """
    if not isinstance(inputs, dict):
        inputs = {v.name: a for v, a in zip(graph.inputs, inputs)}
    if graph.is_dynamic:
        env = bind_dims(graph, {k: np.shape(a) for k, a in inputs.items()})
        graph = specialize(graph, env)
    env: dict[Value, np.ndarray] = dict(graph.constants)
    for v in graph.inputs:
        if v.name not in inputs:
            raise InputError(f"missing input '{v.name}' (expected {v.type})")
        a = np.asarray(inputs[v.name])
        if a.shape != v.shape or a.dtype != v.dtype.np:
            raise InputError(f"input '{v.name}': expected {v.type}, got {a.dtype}{list(a.shape)}")
        env[v] = a
    for n in graph.nodes:
        results = ops.reference(n.op, n.attrs, *(env[v] for v in n.inputs))
        for v, r in zip(n.outputs, results):
            r = np.asarray(r)
            assert r.shape == v.shape, f"{n!r}: reference gave shape {r.shape}"
            env[v] = r.astype(v.dtype.np, copy=False)
    outs = [env[v] for v in graph.outputs]
    return (outs, env) if return_env else outs


def evaluate_node(op: str, attrs: dict, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Evaluate one op on concrete arrays (used by constant folding)."""
    return [np.asarray(r) for r in ops.reference(op, attrs, *arrays)]
