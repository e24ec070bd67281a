"""The element types of the IR and their numpy / C spellings.

One table so importers, the interpreter, the code generators and the engine
writer agree on names and sizes. Add a dtype here and everything downstream
sees it.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str          # IR / engine name: "f32"
    np: np.dtype       # numpy dtype used by the interpreter
    c: str             # CUDA C type in generated kernels
    itemsize: int
    is_float: bool
    is_signed: bool

    def __repr__(self) -> str:
        return self.name


f32 = DType("f32", np.dtype(np.float32), "float", 4, True, True)
f16 = DType("f16", np.dtype(np.float16), "__half", 2, True, True)
bf16 = DType("bf16", np.dtype(ml_dtypes.bfloat16), "__nv_bfloat16", 2, True, True)
i64 = DType("i64", np.dtype(np.int64), "long long", 8, False, True)
i32 = DType("i32", np.dtype(np.int32), "int", 4, False, True)
i8 = DType("i8", np.dtype(np.int8), "signed char", 1, False, True)
u8 = DType("u8", np.dtype(np.uint8), "unsigned char", 1, False, False)
boolean = DType("bool", np.dtype(np.bool_), "bool", 1, False, False)

ALL = (f32, f16, bf16, i64, i32, i8, u8, boolean)
BY_NAME = {d.name: d for d in ALL}
_BY_NP = {d.np: d for d in ALL}


def from_name(name: str) -> DType:
    return BY_NAME[name]


def from_numpy(dt) -> DType:
    """The IR dtype of a numpy dtype; f64 maps to nothing (callers cast first)."""
    dt = np.dtype(dt)
    if dt not in _BY_NP:
        raise KeyError(f"numpy dtype {dt} has no aotc dtype")
    return _BY_NP[dt]
