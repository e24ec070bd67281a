"""The element types of the IR and their numpy / C spellings.

One table so importers, the interpreter, the code generators and the engine
writer agree on names and sizes. Add a dtype here and everything downstream
sees it.

Storage conventions every layer shares:
- float8 (e4m3fn, e5m2 and their fnuz variants) is one byte per element; the
  C type is a byte and kernels convert with aotc's own functions
  (`aotc_f8_*` in aotc_prelude.cuh), never cuda_fp8.h, so host and GPU agree
  bit for bit. The fnuz types have one NaN (0x80) and no -0.
- int4/uint4 (and int2/uint2, float4e2m1fn) are held one element per byte as
  ml_dtypes holds them: the value's bits low, the rest zero (int4 -5 is 0x0b,
  float4 -0.5 is 0x09); kernels sign-extend at loads. ONNX's packing (two or
  four per byte) is undone at import.
- float8e8m0fnu is a scale type (MX block scales): the byte is an f32 exponent,
  value 2^(code-127), no sign, no zero, 0xFF is NaN. It converts to and from
  other types (with ONNX Cast's round modes) but takes no arithmetic, and it is
  no float8 MMA operand (`is_float8` is false for it).
- Floats narrower than f32 compute in f32 (kernels and interpreter alike); f64
  computes in double, its dot_general / convolution / reduce sums included
  (the kernels add each f64 product with one fma, on the host as on the GPU).
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str          # IR / engine name: "f32"
    np: np.dtype       # numpy dtype used by the interpreter
    c: str             # CUDA C type in generated kernels (the storage type)
    itemsize: int      # bytes per element in memory (int4/uint4: 1, unpacked)
    is_float: bool
    is_signed: bool
    bits: int = 0      # value bits when narrower than itemsize (int4/uint4: 4), else 8 * itemsize

    def __repr__(self) -> str:
        return self.name

    @property
    def value_bits(self) -> int:
        return self.bits or 8 * self.itemsize

    @property
    def is_float8(self) -> bool:
        """The 1-byte sign/exponent/mantissa floats (e4m3fn, e5m2 and fnuz): not the e8m0 scale type."""
        return self.is_float and self.itemsize == 1 and not self.bits and not self.is_scale

    @property
    def is_scale(self) -> bool:
        """f8e8m0fnu: a power-of-two scale, converted to and from but never computed on."""
        return self.name == "f8e8m0fnu"

    @property
    def is_narrow_int(self) -> bool:
        """int4/uint4/int2/uint2: held one per byte, wrapped to their bits at converts and stores."""
        return bool(self.bits) and not self.is_float


f64 = DType("f64", np.dtype(np.float64), "double", 8, True, True)
f32 = DType("f32", np.dtype(np.float32), "float", 4, True, True)
f16 = DType("f16", np.dtype(np.float16), "__half", 2, True, True)
bf16 = DType("bf16", np.dtype(ml_dtypes.bfloat16), "__nv_bfloat16", 2, True, True)
f8e4m3fn = DType("f8e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn), "unsigned char", 1, True, True)
f8e5m2 = DType("f8e5m2", np.dtype(ml_dtypes.float8_e5m2), "unsigned char", 1, True, True)
f8e4m3fnuz = DType("f8e4m3fnuz", np.dtype(ml_dtypes.float8_e4m3fnuz), "unsigned char", 1, True, True)
f8e5m2fnuz = DType("f8e5m2fnuz", np.dtype(ml_dtypes.float8_e5m2fnuz), "unsigned char", 1, True, True)
u64 = DType("u64", np.dtype(np.uint64), "unsigned long long", 8, False, False)
i64 = DType("i64", np.dtype(np.int64), "long long", 8, False, True)
u32 = DType("u32", np.dtype(np.uint32), "unsigned int", 4, False, False)
i32 = DType("i32", np.dtype(np.int32), "int", 4, False, True)
u16 = DType("u16", np.dtype(np.uint16), "unsigned short", 2, False, False)
i16 = DType("i16", np.dtype(np.int16), "short", 2, False, True)
i8 = DType("i8", np.dtype(np.int8), "signed char", 1, False, True)
u8 = DType("u8", np.dtype(np.uint8), "unsigned char", 1, False, False)
i4 = DType("i4", np.dtype(ml_dtypes.int4), "unsigned char", 1, False, True, bits=4)
u4 = DType("u4", np.dtype(ml_dtypes.uint4), "unsigned char", 1, False, False, bits=4)
i2 = DType("i2", np.dtype(ml_dtypes.int2), "unsigned char", 1, False, True, bits=2)
u2 = DType("u2", np.dtype(ml_dtypes.uint2), "unsigned char", 1, False, False, bits=2)
f8e8m0fnu = DType("f8e8m0fnu", np.dtype(ml_dtypes.float8_e8m0fnu), "unsigned char", 1, True, False)
f4e2m1fn = DType("f4e2m1fn", np.dtype(ml_dtypes.float4_e2m1fn), "unsigned char", 1, True, True, bits=4)
boolean = DType("bool", np.dtype(np.bool_), "bool", 1, False, False)

# the original eight keep their order (and engine codes); new types follow
ALL = (f32, f16, bf16, i64, i32, i8, u8, boolean,
       f64, i16, u16, u32, u64, f8e4m3fn, f8e5m2, f8e4m3fnuz, f8e5m2fnuz, i4, u4, i2, u2, f4e2m1fn,
       f8e8m0fnu)
FLOAT8 = (f8e4m3fn, f8e5m2, f8e4m3fnuz, f8e5m2fnuz)
BY_NAME = {d.name: d for d in ALL}
_BY_NP = {d.np: d for d in ALL}


def from_name(name: str) -> DType:
    return BY_NAME[name]


def from_numpy(dt) -> DType:
    """The IR dtype of a numpy (or ml_dtypes) dtype."""
    dt = np.dtype(dt)
    if dt not in _BY_NP:
        raise KeyError(f"numpy dtype {dt} has no aotc dtype")
    return _BY_NP[dt]


def is_float_np(dt) -> bool:
    """True for numpy float dtypes including ml_dtypes' (bf16, float8: numpy kind 'V', or 'f' for e5m2)."""
    dt = np.dtype(dt)
    return dt.kind == "f" or (dt in _BY_NP and _BY_NP[dt].is_float)


def compute_np(dt) -> np.dtype:
    """The numpy dtype the reference computes a dtype in: f32 for floats narrower than f32
    (as the kernels do), the dtype itself otherwise."""
    dt = np.dtype(dt)
    if is_float_np(dt) and dt.itemsize < 4:
        return np.dtype(np.float32)
    return dt


def float_limits(d: DType) -> tuple[float, float]:
    """(largest finite, smallest positive normal) of a float dtype."""
    fi = ml_dtypes.finfo(d.np)
    return float(fi.max), float(fi.tiny)


def int_range(d: DType) -> tuple[int, int]:
    """(min, max) of an integer dtype, int4/uint4 included."""
    ii = ml_dtypes.iinfo(d.np)
    return int(ii.min), int(ii.max)


def to_float8(x: np.ndarray, d: DType, saturate: bool) -> np.ndarray:
    """Round `x` to float8 dtype `d` (round to nearest even, as ONNX Cast and aotc's kernels).

    saturate: out-of-range finite values and +-inf become +-max (ONNX Cast's
    default for float8 outputs); otherwise they become inf (e5m2) or NaN, as
    ml_dtypes' astype does.
    """
    x = np.asarray(x)
    if not is_float_np(x.dtype):
        x = x.astype(np.float64)
    elif x.dtype.itemsize < 4:
        x = x.astype(np.float32)
    if saturate:
        hi = float_limits(d)[0]
        with np.errstate(invalid="ignore"):
            x = np.clip(x, -hi, hi)      # NaN stays NaN; inf -> max
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(d.np)


E8M0_ROUND_MODES = ("up", "down", "nearest")


def to_e8m0(x: np.ndarray, saturate: bool, round_mode: str = "up") -> np.ndarray:
    """Round `x` to f8e8m0fnu as ONNX Cast does: through f32, the sign dropped, the mantissa rounded
    away by round_mode ('up': +1 when non-zero, 'down': truncate, 'nearest': +1 on the guard bit,
    a tie going up for normals and down for f32 subnormals, as onnx's reference); NaN and +-inf
    give 0xFF, and saturate stops a round-up at code 254 (2^127) instead of NaN."""
    if round_mode not in E8M0_ROUND_MODES:
        raise ValueError(f"round_mode must be one of {E8M0_ROUND_MODES}, got {round_mode!r}")
    with np.errstate(over="ignore", invalid="ignore"):
        bits = np.asarray(x).astype(np.float32).view(np.uint32)
    e = (bits >> 23) & 0xFF
    m = bits & 0x7FFFFF
    if round_mode == "up":
        code = e + (m != 0)
    elif round_mode == "nearest":
        code = e + ((m >> 22 != 0) & (((m & 0x3FFFFF) != 0) | (e != 0)))
    else:
        code = e.copy()
    if saturate:
        code = np.where((code == 0xFF) & (e != 0xFF), 0xFE, code)
    return np.minimum(code, 0xFF).astype(np.uint8).view(f8e8m0fnu.np)
