"""Fresh random inputs per run, with the seed in every failure message."""
from __future__ import annotations

import os
import secrets

import numpy as np


def fresh_rng() -> tuple[np.random.Generator, int]:
    """A generator seeded from AOTC_TEST_SEED if set, else from the OS (printed on failure)."""
    seed = int(os.environ.get("AOTC_TEST_SEED", secrets.randbelow(2**31)))
    return np.random.default_rng(seed), seed


def random_array(rng, shape, dtype=np.float32, low=None, high=None) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(low if low is not None else -50, high if high is not None else 50,
                            size=shape).astype(dt)
    if low is not None:
        return rng.uniform(low, high, shape).astype(dt)
    a = rng.standard_normal(shape).astype(dt)
    a[a == 0] = 0.5          # never zeros
    return a
