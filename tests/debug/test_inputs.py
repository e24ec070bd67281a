"""inputs: seeded random inputs per dtype, and .npz inputs checked by name and shape."""
import numpy as np
import pytest

from aotc.debug.inputs import load_inputs, random_inputs
from aotc.errors import InputError
from aotc.package.plan import TensorSpec

SPECS = [TensorSpec("x", "f32", (3, 4)), TensorSpec("ids", "i64", (5,)), TensorSpec("m", "bool", (2,))]


def test_random_inputs_are_seeded_and_typed():
    a, b = random_inputs(SPECS, 7), random_inputs(SPECS, 7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["x"].dtype == np.float32 and a["x"].shape == (3, 4) and np.all(a["x"] != 0)
    assert a["ids"].dtype == np.int64 and a["ids"].min() >= 0 and a["ids"].max() < 2
    assert a["m"].dtype == np.bool_
    assert not np.array_equal(random_inputs(SPECS, 8)["x"], a["x"])


def test_load_inputs_checks_names_and_shapes(tmp_path):
    path = tmp_path / "in.npz"
    np.savez(path, x=np.ones((3, 4), np.float64), ids=np.arange(5), m=np.ones(2, bool))
    got = load_inputs(path, SPECS)
    assert got["x"].dtype == np.float32 and got["ids"].dtype == np.int64
    np.savez(path, x=np.ones((4, 3)), ids=np.arange(5), m=np.ones(2, bool))
    with pytest.raises(InputError, match="'x' has shape"):
        load_inputs(path, SPECS)
    np.savez(path, x=np.ones((3, 4)))
    with pytest.raises(InputError, match="have no array 'ids'"):
        load_inputs(path, SPECS)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="cannot read"):
        load_inputs(tmp_path / "bad.npz", SPECS)
