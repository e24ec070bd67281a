"""`aotc run --inputs/--outputs`: .npz files holding dtypes numpy itself cannot name.

numpy saves an ml_dtypes array (bfloat16, float8, int4) under a raw-bytes
descr: `|V2` for bfloat16, `|V1` for most float8 and int4, and '<f1' for
float8_e5m2, which np.load then refuses to read. Inputs: a raw-bytes array is
reinterpreted as the engine input's dtype when the bytes per element agree (a
clear error otherwise), and a member np.load refuses is read from its header
by hand. Outputs: arrays of these dtypes are written as raw-bytes views, so
`np.load(path)[name].view(ml_dtypes.bfloat16)` (or `float8_e4m3fn`, ...)
gets them back; ordinary dtypes are written as they are.
"""
from __future__ import annotations

import ast
import zipfile

import numpy as np

from aotc.errors import InputError
from aotc.ir import dtypes


def _raw_member(path, name: str) -> np.ndarray:
    """An .npy member np.load cannot type ('<f1'), as raw bytes of its recorded item size."""
    with zipfile.ZipFile(path) as z, z.open(name + ".npy") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError("not an .npy member")
    hlen_size = 2 if data[6] == 1 else 4
    hlen = int.from_bytes(data[8:8 + hlen_size], "little")
    header = ast.literal_eval(data[8 + hlen_size:8 + hlen_size + hlen].decode("latin1"))
    descr, shape = header["descr"], tuple(header["shape"])
    if not isinstance(descr, str) or header.get("fortran_order"):
        raise ValueError(f"unsupported .npy header {header}")
    itemsize = int(descr.lstrip("<>|=")[1:] or 0)
    body = data[8 + hlen_size + hlen:]
    return np.frombuffer(body, np.dtype(f"V{itemsize}"), count=int(np.prod(shape, dtype=np.int64))).reshape(shape)


def _read(path, name: str, data) -> np.ndarray:
    try:
        return data[name]
    except ValueError:
        return _raw_member(path, name)


def read_inputs(path, specs) -> dict[str, np.ndarray]:
    """One array per engine input spec from the .npz at `path`, raw bytes taken as the spec's dtype."""
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - numpy raises several types for a bad file
        raise InputError(f"cannot read inputs from {path}: {e}") from None
    names = [s.name for s in specs]
    missing = [n for n in names if n not in data.files]
    if missing:
        raise InputError(f"{path} lacks input(s) {missing}; the engine's inputs are {names}")
    out = {}
    for spec in specs:
        try:
            a = _read(path, spec.name, data)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"cannot read input '{spec.name}' from {path}: {e}") from None
        if a.dtype.type is np.void and a.dtype.names is None:    # raw bytes, not a record
            want = dtypes.from_name(spec.dtype).np
            if a.dtype.itemsize != want.itemsize:
                raise InputError(f"input '{spec.name}' in {path} holds raw {a.dtype.itemsize}-byte elements "
                                 f"({a.dtype.str}); the engine wants {spec.dtype} ({want.itemsize} byte(s) each)")
            a = np.ascontiguousarray(a).view(want)
        out[spec.name] = a
    return out


def _needs_raw(a: np.ndarray) -> bool:
    """True for dtypes numpy stores under a descr np.load cannot map back (ml_dtypes' types)."""
    return a.dtype.type.__module__.startswith("ml_dtypes")


def write_outputs(path, outputs: dict[str, np.ndarray]) -> None:
    np.savez(path, **{k: (np.ascontiguousarray(a).view(f"V{a.dtype.itemsize}") if _needs_raw(a) else a)
                      for k, a in outputs.items()})
