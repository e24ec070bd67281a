"""Random inputs for an engine's input specs: one rule for `aotc run`, `aotc debug` and `aotc profile`.

Floats are standard normal, booleans fair coins, integers uniform in [0, int_high):
small non-negative integers are valid token ids, segment ids and masks for the
models users bring (debug uses 2, a BERT token-type table's rows). One seed
draws the same arrays every time, so runs that are compared see the same data.
"""
from __future__ import annotations

import numpy as np

from aotc.ir import dtypes


def random_inputs(specs, seed: int = 0, int_high: int = 8) -> dict[str, np.ndarray]:
    """One array per spec (anything with .name, .dtype as an aotc dtype name, and a concrete .shape)."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        dt = dtypes.from_name(spec.dtype)
        if dt.is_float:
            out[spec.name] = rng.standard_normal(spec.shape).astype(dt.np)
        elif dt.name == "bool":
            out[spec.name] = rng.random(spec.shape) < 0.5
        else:
            out[spec.name] = rng.integers(0, int_high, spec.shape).astype(dt.np)
    return out
