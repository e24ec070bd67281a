"""Graph builders for the norms models feed GEMMs (as the importers lower them), shared by tests."""
import numpy as np

from aotc.ir.graph import GraphBuilder


def _rows(b: GraphBuilder, v, shape):
    return b.add("broadcast_in_dim", v, shape=shape, broadcast_dimensions=tuple(range(len(shape) - 1)))


def layer_norm(b: GraphBuilder, x, gamma, beta=None, eps=1e-5):
    """(x - mean) * rsqrt(var + eps) * gamma (+ beta) over the last axis, two reductions."""
    shape = x.shape
    r = len(shape)
    rows = shape[:-1]
    n = b.add("broadcast_in_dim", b.constant(np.asarray(shape[-1], x.dtype.np)), shape=rows, broadcast_dimensions=())
    mean = b.add("div", b.add("reduce", x, kind="sum", axes=(r - 1,)), n)
    d = b.add("sub", x, _rows(b, mean, shape))
    var = b.add("div", b.add("reduce", b.add("mul", d, d), kind="sum", axes=(r - 1,)), n)
    e = b.add("broadcast_in_dim", b.constant(np.asarray(eps, x.dtype.np)), shape=rows, broadcast_dimensions=())
    y = b.add("mul", d, _rows(b, b.add("rsqrt", b.add("add", var, e)), shape))
    y = b.add("mul", y, b.add("broadcast_in_dim", gamma, shape=shape, broadcast_dimensions=(r - 1,)))
    if beta is not None:
        y = b.add("add", y, b.add("broadcast_in_dim", beta, shape=shape, broadcast_dimensions=(r - 1,)))
    return y


def rms_norm(b: GraphBuilder, x, gamma, eps=1e-6):
    """x * rsqrt(mean(x^2) + eps) * gamma over the last axis, with a keepdims reshape as exporters write it."""
    shape = x.shape
    r = len(shape)
    rows = shape[:-1]
    n = b.add("broadcast_in_dim", b.constant(np.asarray(shape[-1], x.dtype.np)), shape=rows, broadcast_dimensions=())
    ms = b.add("div", b.add("reduce", b.add("mul", x, x), kind="sum", axes=(r - 1,)), n)
    e = b.add("broadcast_in_dim", b.constant(np.asarray(eps, x.dtype.np)), shape=rows, broadcast_dimensions=())
    inv = b.add("reshape", b.add("rsqrt", b.add("add", ms, e)), shape=rows + (1,))
    y = b.add("mul", x, b.add("broadcast_in_dim", inv, shape=shape, broadcast_dimensions=tuple(range(r))))
    return b.add("mul", y, b.add("broadcast_in_dim", gamma, shape=shape, broadcast_dimensions=(r - 1,)))


def matmul(b: GraphBuilder, x, w, **attrs):
    """x (..., K) @ w (K, N): contract x's last axis, as ONNX MatMul lowers with a 2-D weight."""
    return b.add("dot_general", x, w, lhs_batch=(), rhs_batch=(), lhs_contract=(len(x.shape) - 1,),
                 rhs_contract=(0,), **attrs)
