"""The elementwise ops added for ONNX conformance (inverse/hyperbolic trig, bit shifts) on the host emulation.

Generated kernels vs the interpreter, poisoned outputs, shapes off the block
size (783 elements), fresh random inputs; shifts include out-of-range counts
(negative, equal to and past the bit width), which must saturate like ONNX.
"""
import numpy as np

from aotc.ir.graph import GraphBuilder
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_codegen import check

_DOMAIN = {"asin": (-0.99, 0.99), "acos": (-0.99, 0.99), "atanh": (-0.95, 0.95), "acosh": (1.0, 6.0),
           "tan": (-1.4, 1.4)}


_TRIG = ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]


def test_trig_kernels():
    """All nine ops, f32 and f16, in one graph (one host build)."""
    rng, seed = fresh_rng()
    b = GraphBuilder()
    outs, feeds = [], []
    for op in _TRIG:
        lo, hi = _DOMAIN.get(op, (-3.0, 3.0))
        xs = random_array(rng, (3, 261), np.float32, lo, hi)
        outs += [b.add(op, b.input(f"x_{op}", (3, 261))), b.add(op, b.input(f"h_{op}", (3, 261), "f16"))]
        feeds += [xs, xs.astype(np.float16)]
    check(b.build(outs), feeds, seed, rtol=2e-3, atol=2e-3, kinds=["loop"] * len(outs))


def test_shift_kernels_saturate_out_of_range():
    rng, seed = fresh_rng()
    b = GraphBuilder()
    outs, feeds = [], []
    for dt, npdt in (("i8", np.int8), ("i32", np.int32), ("i64", np.int64), ("u8", np.uint8)):
        npdt = np.dtype(npdt)
        bits = 8 * npdt.itemsize
        info = np.iinfo(npdt)
        x = b.input(f"x_{dt}", (783,), dt)
        s = b.input(f"s_{dt}", (783,), dt)
        outs += [b.add("shift_left", x, s), b.add("shift_right", x, s)]
        xs = rng.integers(max(info.min, -1000), min(info.max, 1000), 783, endpoint=True).astype(npdt)
        ss = rng.integers(-3 if info.min < 0 else 0, bits + 3, 783, endpoint=True).astype(npdt)
        ss[:4] = [0, bits - 1, bits, bits + 1]
        feeds += [xs, ss]
    check(b.build(outs), feeds, seed, kinds=["loop"] * len(outs))
