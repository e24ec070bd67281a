"""Channels-last (NHWC) convolution and pooling kernels on the host emulation vs the interpreter.

The same cases as the NCHW tests in test_codegen.py, laid out channels-last:
shapes that break the tiles (odd spatial sizes, 50, single channels), groups,
depthwise, dilation, 1-D and 3-D, an f16 case; outputs are poisoned with NaN
(run_on_host) so an unwritten element fails. Each NHWC result is also checked
against the NCHW op on transposed operands, so the two layouts mean the same.
"""
import numpy as np
import pytest

from aotc.ir import ops
from aotc.ir.graph import GraphBuilder
from aotc.ir.interpreter import interpret
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_codegen import check

CONV_CASES = [
    ((2, 3, 9, 11), (4, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((1, 4, 10, 7), (6, 2, 3, 2), (2, 1), ((0, 1), (2, 0)), (2, 1), 2),
    ((1, 6, 8, 8), (6, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 6),     # depthwise
    ((2, 3, 50), (5, 3, 4), (3,), ((2, 1),), (1,), 1),                        # 1-D
    ((1, 2, 4, 5, 3), (3, 2, 2, 2, 2), (1, 1, 1), ((1, 0), (0, 1), (1, 1)), (1, 1, 1), 1),  # 3-D
    ((3, 5, 7, 1), (1, 5, 1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),      # one output channel
]


def _last(shape):
    to_last, _ = ops.conv_layout_perms(len(shape))
    return tuple(shape[i] for i in to_last)


@pytest.mark.parametrize("xshape,wshape,strides,pads,dil,groups", CONV_CASES)
def test_nhwc_conv_with_epilogue(xshape, wshape, strides, pads, dil, groups):
    rng, seed = fresh_rng()
    to_last, back = ops.conv_layout_perms(len(xshape))
    b = GraphBuilder()
    x = b.input("x", _last(xshape))
    w_nchw = random_array(rng, wshape)
    w = b.constant(np.ascontiguousarray(w_nchw.transpose(to_last)), "w")
    bias = b.constant(random_array(rng, (wshape[0],)), "b")
    c = b.add("convolution", x, w, strides=strides, padding=pads, dilations=dil, groups=groups, layout="NHWC")
    bb = b.add("broadcast_in_dim", bias, shape=c.shape, broadcast_dimensions=(len(xshape) - 1,))
    zero = b.add("broadcast_in_dim", b.constant(np.float32(0)), shape=c.shape, broadcast_dimensions=())
    out = b.add("max", b.add("add", c, bb), zero)
    graph = b.build([out])
    xin = random_array(rng, _last(xshape))
    check(graph, [xin], seed, rtol=1e-4, atol=1e-5, kinds=["conv"])
    # the NHWC op is the NCHW op on transposed operands
    (nchw,) = ops.reference("convolution", dict(strides=strides, padding=pads, dilations=dil, groups=groups),
                            np.ascontiguousarray(xin.transpose(back)), w_nchw)
    (nhwc,) = ops.reference("convolution", graph.nodes[0].attrs, xin, graph.constants[w])
    np.testing.assert_allclose(nhwc, nchw.transpose(to_last), rtol=1e-6, atol=1e-6, err_msg=f"seed {seed}")


def test_nhwc_conv_f16_with_transposed_input():
    """An NCHW f16 input read channels-last through a fused transpose (index math in the loads)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 3, 13, 50), "f16")
    xt = b.add("transpose", x, permutation=(0, 2, 3, 1))
    w = b.constant(random_array(rng, (8, 3, 3, 3)).astype(np.float16), "w")
    c = b.add("convolution", xt, w, strides=(2, 2), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1,
              layout="NHWC")
    graph = b.build([b.add("tanh", c)])
    check(graph, [random_array(rng, (2, 3, 13, 50)).astype(np.float16)], seed, rtol=2e-2, atol=2e-2,
          kinds=["conv"])


@pytest.mark.parametrize("kind,window,strides,pads", [
    ("max", (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0))),
    ("sum", (1, 2, 3, 1), (1, 2, 1, 1), ((0, 0), (0, 1), (1, 0), (0, 0))),
    ("max", (1, 50, 3, 1), (1, 1, 1, 1), ((0, 0),) * 4),
])
def test_nhwc_window(kind, window, strides, pads):
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", (2, 50, 9, 3))
    pre = b.add("exp", x)
    r = b.add("reduce_window", pre, kind=kind, window=window, strides=strides, padding=pads, dilations=(1,) * 4)
    graph = b.build([b.add("log", r)])
    xin = random_array(rng, (2, 50, 9, 3))
    check(graph, [xin], seed, rtol=1e-5, kinds=["window"])
    # the same pooling as NCHW with the window permuted
    perm = (0, 3, 1, 2)
    nchw = dict(kind=kind, window=tuple(window[i] for i in perm), strides=tuple(strides[i] for i in perm),
                padding=tuple(pads[i] for i in perm), dilations=(1,) * 4)
    (want,) = ops.reference("reduce_window", nchw, np.exp(xin.transpose(perm)))
    (got,) = interpret(b.build([r]), [xin])
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-6, err_msg=f"seed {seed}")


def test_bad_layout_is_rejected():
    from aotc.errors import VerifyError
    b = GraphBuilder()
    x = b.input("x", (1, 4, 4, 3))
    w = b.constant(np.ones((2, 3, 1, 1), np.float32))
    with pytest.raises(VerifyError, match="layout must be one of"):
        b.add("convolution", x, w, strides=(1, 1), padding=((0, 0), (0, 0)), dilations=(1, 1), groups=1,
              layout="CHWN")
