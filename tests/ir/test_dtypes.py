"""The dtype table and the interpreter's handling of the narrow and wide types."""
import ml_dtypes
import numpy as np
import pytest

from aotc.errors import VerifyError
from aotc.ir import dtypes, ops
from aotc.ir.graph import TensorType

NEW = ("f64", "i16", "u16", "u32", "u64", "f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "i4", "u4",
       "i2", "u2", "f4e2m1fn", "f8e8m0fnu")


def test_table_is_consistent():
    assert [d.name for d in dtypes.ALL[:8]] == ["f32", "f16", "bf16", "i64", "i32", "i8", "u8", "bool"]
    for d in dtypes.ALL:
        assert dtypes.from_name(d.name) is d
        assert dtypes.from_numpy(d.np) is d
        assert d.np.itemsize == d.itemsize
    for name in NEW:
        assert name in dtypes.BY_NAME
    assert dtypes.i4.value_bits == 4 and dtypes.u64.value_bits == 64
    assert all(d.is_float8 for d in dtypes.FLOAT8) and not dtypes.i8.is_float8 and not dtypes.f4e2m1fn.is_float8
    assert dtypes.i2.is_narrow_int and not dtypes.f4e2m1fn.is_narrow_int and dtypes.int_range(dtypes.i2) == (-2, 1)


def test_numpy_helpers():
    assert dtypes.is_float_np(ml_dtypes.float8_e5m2) and dtypes.is_float_np(ml_dtypes.bfloat16)
    assert not dtypes.is_float_np(ml_dtypes.int4) and not dtypes.is_float_np(np.int16)
    assert dtypes.compute_np(ml_dtypes.float8_e4m3fn) == np.float32
    assert dtypes.compute_np(np.float64) == np.float64
    assert dtypes.int_range(dtypes.i4) == (-8, 7) and dtypes.int_range(dtypes.u4) == (0, 15)
    assert dtypes.float_limits(dtypes.f8e4m3fnuz)[0] == 240.0
    with pytest.raises(KeyError):
        dtypes.from_numpy(np.complex64)


@pytest.mark.parametrize("name", ["f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz"])
@pytest.mark.parametrize("saturate", [True, False])
def test_to_float8_matches_onnx_cast(name, saturate):
    from onnx.numpy_helper import saturate_cast
    d = dtypes.from_name(name)
    rng = np.random.default_rng(0)
    hi = dtypes.float_limits(d)[0]
    x = np.concatenate([rng.standard_normal(500) * hi / 4, rng.standard_normal(200) * 3 * hi,
                        [np.inf, -np.inf, np.nan, 0.0, -0.0, hi, -hi, 2 * hi]]).astype(np.float32)
    got = dtypes.to_float8(x, d, saturate).view(np.uint8)
    want = (saturate_cast(x, d.np) if saturate else x.astype(d.np)).view(np.uint8)
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(dtypes.to_float8(x, d, saturate).astype(np.float32)[nan]).all()


def _one_op(op, x, **attrs):
    (t,) = ops.infer_types(op, attrs, [TensorType(x.shape, dtypes.from_numpy(x.dtype))])
    (out,) = ops.reference(op, attrs, x)
    assert out.dtype == t.dtype.np and out.shape == t.shape
    return out


def test_convert_to_float8_saturates_only_when_asked():
    x = np.array([1000.0, -1e6, np.inf, 0.3], np.float32)
    sat = _one_op("convert", x, dtype="f8e4m3fn", saturate=True).astype(np.float32)
    assert sat.tolist()[:3] == [448.0, -448.0, 448.0]
    raw = _one_op("convert", x, dtype="f8e4m3fn").astype(np.float32)
    assert np.isnan(raw[:3]).all()


def test_convert_int4_wraps_and_truncates_like_ml_dtypes():
    x = np.array([7.9, -8.5, 9.0, -3.2], np.float32)
    got = _one_op("convert", x, dtype="i4")
    assert got.dtype == ml_dtypes.int4
    assert got.astype(np.int8).tolist() == [7, -8, -7, -3]
    back = _one_op("convert", got, dtype="u4")
    assert back.astype(np.int8).tolist() == [7, 8, 9, 13]


def test_float8_arithmetic_computes_in_f32():
    x = np.array([1.5, 2.0, 240.0], ml_dtypes.float8_e5m2)
    got = _one_op("exp", x)
    assert got.dtype == ml_dtypes.float8_e5m2
    assert got.astype(np.float32)[0] == np.float32(np.exp(np.float32(1.5))).astype(ml_dtypes.float8_e5m2)


def test_f64_computes_in_double():
    x = np.array([1e-300, 1.0 + 2**-40], np.float64)
    got = _one_op("sqrt", x)
    assert got.dtype == np.float64 and got[1] == np.sqrt(x[1]) and got[1] != 1.0


def test_int4_arithmetic_is_refused():
    t = TensorType((2,), dtypes.i4)
    with pytest.raises(VerifyError, match="storage type"):
        ops.infer_types("add", {}, [t, t])
    with pytest.raises(VerifyError, match="storage type"):
        ops.infer_types("reduce", {"kind": "sum", "axes": (0,)}, [t])
    with pytest.raises(VerifyError, match="storage type"):
        ops.infer_types("reduce_window", {"kind": "max", "window": (2,), "strides": (1,), "padding": ((0, 0),),
                                          "dilations": (1,)}, [t])
    assert ops.infer_types("max", {}, [t, t])[0].dtype == dtypes.i4


def test_float8_bitcast_is_refused():
    with pytest.raises(VerifyError, match="NaN bit patterns"):
        ops.infer_types("bitcast_convert", {"dtype": "u8"}, [TensorType((2,), dtypes.f8e5m2)])


def test_e8m0_is_a_scale_type_not_a_float8_operand():
    d = dtypes.f8e8m0fnu
    assert d.is_scale and d.is_float and not d.is_float8 and d not in dtypes.FLOAT8
    assert not any(x.is_scale for x in dtypes.ALL if x is not d)
    assert dtypes.compute_np(d.np) == np.float32


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_convert_to_e8m0_takes_the_round_mode(mode):
    x = np.array([3.0, 1.5, 1.25, 1.75, -6.0, 0.0, np.nan, np.inf, 3.0e38], np.float32)
    got = _one_op("convert", x, dtype="f8e8m0fnu", round_mode=mode, saturate=True).view(np.uint8).tolist()
    want = {"up": [129, 128, 128, 128, 130, 0, 255, 255, 254],
            "down": [128, 127, 127, 127, 129, 0, 255, 255, 254],
            "nearest": [129, 128, 127, 128, 130, 0, 255, 255, 254]}[mode]
    assert got == want
    assert _one_op("convert", x[-1:], dtype="f8e8m0fnu", round_mode=mode).view(np.uint8).tolist() == \
        [254 if mode == "down" else 255]
    back = _one_op("convert", np.array([0, 1, 127, 254], np.uint8).view(ml_dtypes.float8_e8m0fnu), dtype="f32")
    assert back.tolist() == [2.0**-127, 2.0**-126, 1.0, 2.0**127]


def test_convert_refuses_an_unknown_round_mode():
    with pytest.raises(VerifyError, match="round_mode must be one of"):
        ops.infer_types("convert", {"dtype": "f8e8m0fnu", "round_mode": "even"}, [TensorType((2,), dtypes.f32)])


@pytest.mark.parametrize("op,n", [("add", 2), ("exp", 1), ("reduce", 1), ("dot_general", 2), ("iota", 0)])
def test_e8m0_arithmetic_is_refused(op, n):
    t = TensorType((2, 2), dtypes.f8e8m0fnu)
    attrs = {"reduce": {"kind": "sum", "axes": (1,)}, "iota": {"shape": (4,), "dimension": 0, "dtype": t.dtype.name},
             "dot_general": {"lhs_contract": (1,), "rhs_contract": (0,), "lhs_batch": (), "rhs_batch": ()}}
    with pytest.raises(VerifyError, match="f8e8m0fnu.*scale type"):
        ops.infer_types(op, attrs.get(op, {}), [t] * n)
