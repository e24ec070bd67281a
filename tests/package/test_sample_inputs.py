"""Random engine inputs: the dtype each spec names, reproducible per seed, integers in range."""
from types import SimpleNamespace as Spec

import numpy as np

from aotc.package.sample_inputs import random_inputs

SPECS = [Spec(name="x", dtype="f16", shape=(3, 4)), Spec(name="ids", dtype="i64", shape=(50,)),
         Spec(name="m", dtype="bool", shape=(40,)), Spec(name="b", dtype="bf16", shape=(2,))]


def test_dtypes_shapes_and_ranges():
    out = random_inputs(SPECS, seed=3, int_high=5)
    assert out["x"].dtype == np.float16 and out["x"].shape == (3, 4) and np.abs(out["x"]).max() > 0
    assert out["ids"].dtype == np.int64 and out["ids"].min() >= 0 and out["ids"].max() == 4
    assert out["m"].dtype == np.bool_ and 0 < out["m"].sum() < 40
    assert str(out["b"].dtype) == "bfloat16"


def test_one_seed_draws_the_same_arrays():
    a, b, c = random_inputs(SPECS, 1), random_inputs(SPECS, 1), random_inputs(SPECS, 2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["x"], c["x"])
