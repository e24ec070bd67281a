"""The inputs a debug run feeds both the engine and onnxruntime: from an .npz, or drawn at random.

Random floats are standard normal, integers lie in [0, 2) so they are valid token ids,
segment ids (a BERT token-type table has 2 rows) and masks, booleans are fair coins; one seed draws the same arrays every time,
so a compare, its bisection and a reduction see the same data.
"""
from __future__ import annotations

import numpy as np

from aotc.errors import InputError
from aotc.ir import dtypes
from aotc.package import sample_inputs


def random_inputs(specs, seed: int = 0) -> dict[str, np.ndarray]:
    """One array per (name, dtype name, shape) spec; integers in [0, 2)."""
    return sample_inputs.random_inputs(specs, seed, int_high=2)


def read_npz(path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as e:  # noqa: BLE001 - numpy raises several types for a bad file
        raise InputError(f"cannot read inputs from {path}: {e}") from None


def load_inputs(source, specs) -> dict[str, np.ndarray]:
    """The arrays of an .npz (or a dict) named like the specs, checked for shape and cast to their dtype."""
    data = source if isinstance(source, dict) else read_npz(source)
    where = "the inputs" if isinstance(source, dict) else str(source)
    out = {}
    for spec in specs:
        if spec.name not in data:
            raise InputError(f"{where} have no array '{spec.name}'; the model's inputs are "
                             f"{[s.name for s in specs]}")
        a = np.asarray(data[spec.name])
        if tuple(a.shape) != tuple(spec.shape):
            raise InputError(f"{where}: '{spec.name}' has shape {list(a.shape)}, the model wants {list(spec.shape)}")
        out[spec.name] = a.astype(dtypes.from_name(spec.dtype).np, copy=False)
    return out


__all__ = ["random_inputs", "load_inputs", "read_npz"]
