"""Det (aotc/importers/onnx/math_ops.py) vs onnxruntime through the importer and the interpreter.

Random matrices per run (the seed is in every failure message), plus the
matrices that need pivoting: a zero leading entry, a permutation, a singular
matrix, a tiny leading pivot. The other ops of the module are covered by
test_more_ops.py and the ONNX node suite.
"""
import numpy as np
import pytest

from aotc.errors import UnsupportedError
from aotc.importers.onnx import import_onnx
from tests.helpers.rng import fresh_rng, random_array
from tests.importers.onnx.one_node import check, make_model


@pytest.mark.parametrize("shape", [(2, 2), (3, 3, 3), (2, 3, 5, 5), (1, 1), (4, 9, 9)])
def test_det_matches_onnxruntime(shape):
    rng, seed = fresh_rng()
    x = random_array(rng, shape)
    try:
        check(make_model("Det", [("x", x)], opset=22), {"x": x}, rtol=1e-4, atol=1e-5)
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from None


def test_det_pivots_on_zero_leading_entries_and_singular_matrices():
    x = np.array([[[0, 1, 2], [1, 0, 3], [4, -3, 8]],      # a zero pivot without row exchanges
                  [[1, 2, 3], [2, 4, 6], [1, 1, 1]],       # singular
                  [[0, 0, 1], [0, 1, 0], [1, 0, 0]],       # a permutation: det -1
                  [[1e-7, 1, 1], [1, 1, 2], [1, 2, 1]]],   # a tiny leading pivot: det 2 - 3e-7
                 np.float32)
    check(make_model("Det", [("x", x)], opset=22), {"x": x}, rtol=1e-5, atol=1e-6)


def test_det_refuses_large_matrices():
    x = np.ones((65, 65), np.float32)
    with pytest.raises(UnsupportedError, match="n <= 64"):
        import_onnx(make_model("Det", [("x", x)], opset=22))
