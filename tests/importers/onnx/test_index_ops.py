"""TensorScatter (aotc/importers/onnx/index_ops.py) vs onnxruntime through the importer and the interpreter.

Random caches, updates and write positions per run (the seed is in every
failure message); circular mode gets positions that wrap. The other ops of
the module are covered by tests/importers/onnx/test_more_ops.py.
"""
import numpy as np
import pytest

from tests.helpers.rng import fresh_rng, random_array
from tests.importers.onnx.one_node import check, make_model


@pytest.mark.parametrize("shape,seq,attrs,with_indices", [
    ((2, 3, 8, 4), 1, {}, True),                                # decode: one new token per sample
    ((3, 2, 8, 4), 5, {"mode": "linear"}, True),
    ((2, 8, 6), 3, {}, False),                                  # prefill: write_indices omitted
    ((2, 3, 6, 4), 4, {"mode": "circular"}, True),
    ((2, 7, 3, 2), 3, {"mode": "circular", "axis": 1}, True),
    ((2, 5, 4), 5, {"axis": -2}, True),                         # the update fills the whole cache
])
def test_tensor_scatter_matches_onnxruntime(shape, seq, attrs, with_indices):
    rng, seed = fresh_rng()
    axis = attrs.get("axis", -2) % len(shape)
    m = shape[axis]
    upd_shape = list(shape)
    upd_shape[axis] = seq
    past, upd = random_array(rng, shape), random_array(rng, tuple(upd_shape))
    inputs = [("past", past), ("upd", upd)]
    if with_indices:
        high = m if attrs.get("mode") == "circular" else m - seq + 1
        inputs.append(("w", rng.integers(0, high, shape[0]).astype(np.int64)))
    try:
        check(make_model("TensorScatter", inputs, attrs, opset=24), dict(inputs))
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from None
