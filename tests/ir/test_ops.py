"""The op table: shape rules reject bad programs naming the rule; references agree with numpy."""
import numpy as np
import pytest

from aotc.errors import VerifyError
from aotc.ir import dtypes, ops
from aotc.ir.graph import TensorType

F = dtypes.f32


def t(*shape, dt=F):
    return TensorType(tuple(shape), dt)


def test_every_op_has_a_category_and_reference():
    for name, d in ops.OPS.items():
        assert d.category in (ops.ELEMENTWISE, ops.INJECTIVE, ops.REDUCTION, ops.DOT, ops.CONV, ops.WINDOW,
                              ops.SOURCE), name
        assert callable(d.reference) and callable(d.infer)


@pytest.mark.parametrize("op,attrs,ins,match", [
    ("add", {}, [t(2, 3), t(3, 2)], "shapes differ"),
    ("add", {}, [t(2), t(2, dt=dtypes.i32)], "dtypes differ"),
    ("exp", {}, [t(2, dt=dtypes.i32)], "float"),
    ("reshape", {"shape": (5,)}, [t(2, 3)], "cannot reshape"),
    ("transpose", {"permutation": (0, 0)}, [t(2, 3)], "not a permutation"),
    ("broadcast_in_dim", {"shape": (4, 3), "broadcast_dimensions": (0,)}, [t(3)], "cannot broadcast"),
    ("slice", {"start": (0,), "limit": (5,), "stride": (1,)}, [t(3)], "out of range"),
    ("dot_general", {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (1,), "rhs_contract": (0,)},
     [t(2, 3), t(4, 5)], "contracting dim sizes differ"),
    ("convolution", {"strides": (1, 1), "dilations": (1, 1), "padding": ((0, 0), (0, 0)), "groups": 2},
     [t(1, 3, 5, 5), t(4, 3, 3, 3)], "channels"),
    ("reduce", {"kind": "sum", "axes": (2,)}, [t(2, 3)], "axes"),
    ("compare", {"direction": "XX"}, [t(2), t(2)], "direction"),
    ("bitcast_convert", {"dtype": "i64"}, [t(2)], "element widths differ: f32 has 32 bits, i64 has 64"),
    ("bitcast_convert", {"dtype": "bf16"}, [t(2, dt=dtypes.f16)], "NaN bit patterns"),
])
def test_infer_rejects_with_named_rule(op, attrs, ins, match):
    with pytest.raises(VerifyError, match=match) as e:
        ops.infer_types(op, attrs, ins, node_name="n1")
    assert "'n1'" in str(e.value) and op in str(e.value)


def test_dot_general_matches_einsum():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 5, 4)).astype(np.float32)
    attrs = {"lhs_batch": (0,), "rhs_batch": (0,), "lhs_contract": (2,), "rhs_contract": (2,)}
    (out,) = ops.reference("dot_general", attrs, a, b)
    np.testing.assert_allclose(out, np.einsum("bik,bjk->bij", a, b), rtol=1e-5)
    assert ops.infer_types("dot_general", attrs, [t(2, 3, 4), t(2, 5, 4)])[0].shape == (2, 3, 5)
    assert ops.node_flops("dot_general", attrs, [t(2, 3, 4), t(2, 5, 4)], [t(2, 3, 5)]) == 2 * 2 * 3 * 5 * 4


_DOT = {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (1,), "rhs_contract": (0,)}


def test_f64_dot_and_conv_references_sum_in_double():
    """512-deep f64 sums: f32 accumulation would be ~1e-7 of sum |a*b| off, double is ~1e-15."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((6, 512)), rng.standard_normal((512, 7))
    (out,) = ops.reference("dot_general", _DOT, a, b)
    assert out.dtype == np.float64
    assert np.all(np.abs(out - a @ b) <= 1e-12 * (np.abs(a) @ np.abs(b)))
    x, w = rng.standard_normal((2, 512, 3, 3)), rng.standard_normal((4, 512, 3, 3))
    conv = dict(strides=(1, 1), dilations=(1, 1), padding=((0, 0), (0, 0)), groups=1)
    (y,) = ops.reference("convolution", conv, x, w)
    want = np.einsum("nchw,ochw->no", x, w)[:, :, None, None]
    bound = np.einsum("nchw,ochw->no", np.abs(x), np.abs(w))[:, :, None, None]
    assert y.dtype == np.float64 and np.all(np.abs(y - want) <= 1e-12 * bound)


def test_integer_dot_accumulates_exactly_in_i32_and_wraps_like_mma():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (5, 64), dtype=np.int8)
    b = rng.integers(0, 256, (64, 7), dtype=np.uint8)          # u8 x s8 mixes, as mma.u8.s8 does
    attrs = dict(_DOT, out_dtype="i32")
    (out,) = ops.reference("dot_general", attrs, a, b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))
    assert ops.infer_types("dot_general", attrs, [t(5, 64, dt=dtypes.i8), t(64, 7, dt=dtypes.u8)])[0].dtype == dtypes.i32
    big = np.full((1, 2**17 + 1), 127, np.int8)                 # 127*127*(2**17+1) > 2**31: wraps
    (w,) = ops.reference("dot_general", attrs, big, big.T.copy())
    assert int(w[0, 0]) == (127 * 127 * (2**17 + 1) + 2**31) % 2**32 - 2**31


def test_integer_conv_matches_float_conv_on_exact_values():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 5, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 5, 3, 3), dtype=np.int8)
    attrs = {"strides": (1, 1), "dilations": (1, 1), "padding": ((1, 1), (1, 1)), "groups": 1}
    (qi,) = ops.reference("convolution", dict(attrs, out_dtype="i32"), x, w)
    (qf,) = ops.reference("convolution", attrs, x.astype(np.float32), w.astype(np.float32))
    assert qi.dtype == np.int32
    np.testing.assert_array_equal(qi, qf.astype(np.int32))     # |sums| < 2**24: f32 is exact here
    zp = 7                     # padding holds the zero point: (x - zp) * w over the padded window
    (qz,) = ops.reference("convolution", dict(attrs, out_dtype="i32", pad_value=zp), x, w)
    (fz,) = ops.reference("convolution", attrs, x.astype(np.float32) - zp, w.astype(np.float32))
    np.testing.assert_array_equal(qz - zp * w.astype(np.int64).sum(axis=(1, 2, 3))[None, :, None, None], fz)
    with pytest.raises(VerifyError, match="pad_value"):
        ops.infer_types("convolution", dict(attrs, pad_value=3), [t(1, 5, 6, 6), t(4, 5, 3, 3)])


@pytest.mark.parametrize("ins,attrs,match", [
    ([t(2, 3, dt=dtypes.i8), t(3, 2, dt=dtypes.i8)], {}, "float dtype"),
    ([t(2, 3, dt=dtypes.i8), t(3, 2, dt=dtypes.i8)], {"out_dtype": "f32"}, "out_dtype='i32'"),
    ([t(2, 3, dt=dtypes.i8), t(3, 2, dt=dtypes.f16)], {"out_dtype": "i32"}, "both operands i8/u8"),
    ([t(2, 3), t(3, 2)], {"out_dtype": "f32"}, "1-byte float"),
])
def test_out_dtype_rules_name_what_is_wrong(ins, attrs, match):
    with pytest.raises(VerifyError, match=match):
        ops.infer_types("dot_general", dict(_DOT, **attrs), ins)


def test_convolution_reference_matches_direct_loops():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 6, 5)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 2)).astype(np.float32)
    attrs = {"strides": (2, 1), "dilations": (1, 2), "padding": ((1, 0), (1, 1)), "groups": 2}
    (out,) = ops.reference("convolution", attrs, x, w)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (1, 1)))
    want = np.zeros_like(out)
    for o in range(2):
        g = o // 1
        for i in range(out.shape[2]):
            for j in range(out.shape[3]):
                patch = xp[0, g * 2:(g + 1) * 2, i * 2:i * 2 + 3, j:j + 3:2]
                want[0, o, i, j] = (patch * w[o]).sum()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_reduce_window_max_pads_with_minus_infinity():
    x = -np.ones((1, 1, 2, 2), np.float32)
    attrs = {"kind": "max", "window": (1, 1, 2, 2), "strides": (1, 1, 1, 1),
             "padding": ((0, 0), (0, 0), (1, 0), (1, 0)), "dilations": (1, 1, 1, 1)}
    (out,) = ops.reference("reduce_window", attrs, x)
    assert out.shape == (1, 1, 2, 2) and (out == -1).all()


def test_integer_division_truncates_and_divides_by_zero_to_zero():
    (q,) = ops.reference("div", {}, np.array([7, -7, 5], np.int32), np.array([2, 2, 0], np.int32))
    assert q.tolist() == [3, -3, 0]


def test_gather_negative_indices_and_range_check():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    (out,) = ops.reference("gather", {"axis": 1}, data, np.array([-1, 0], np.int64))
    assert out.tolist() == [[3, 0], [7, 4], [11, 8]]
    with pytest.raises(IndexError):
        ops.reference("gather", {"axis": 0}, data, np.array([3], np.int64))


def test_costs():
    assert ops.node_bytes([t(4, 4)], [t(4, 4)]) == 128
    attrs = {"kind": "sum", "axes": (1,)}
    assert ops.node_flops("reduce", attrs, [t(4, 8)], [t(4)]) == 32


def test_round_tf32_is_round_to_nearest_ties_away():
    round_tf32 = ops.round_tf32
    ulp = 2.0 ** -10
    x = np.array([1.0, 1 + ulp / 2, 1 + ulp / 4, -(1 + ulp / 2), 1 + 1.5 * ulp, 1 + 0.75 * ulp, np.inf, -np.inf, 0.0],
                 np.float32)
    want = np.array([1.0, 1 + ulp, 1.0, -(1 + ulp), 1 + 2 * ulp, 1 + ulp, np.inf, -np.inf, 0.0], np.float32)
    got = round_tf32(x)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(round_tf32(np.array([np.nan], np.float32)))[0]
    assert (got.view(np.uint32)[:6] & 0x1FFF == 0).all()


def test_tf32_precision_attr_is_checked():
    f16 = t(2, 2, dt=dtypes.f16)
    attrs = dict(lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    with pytest.raises(VerifyError, match="tf32' needs f32"):
        ops.infer_types("dot_general", dict(attrs, precision="tf32"), [f16, f16])
    with pytest.raises(VerifyError, match="precision must be one of"):
        ops.infer_types("dot_general", dict(attrs, precision="bf16x3"), [f16, f16])


def test_bitcast_convert_reinterprets_bits():
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 5)).astype(np.float32)
    x[0, :3] = [np.inf, -0.0, np.nan]
    (bits,) = ops.reference("bitcast_convert", {"dtype": "i32"}, x)
    assert bits.dtype == np.int32 and bits.shape == x.shape
    assert bits[0, 0] == 0x7F800000 and bits[0, 1] == -2**31
    np.testing.assert_array_equal(bits, x.view(np.int32))
    (back,) = ops.reference("bitcast_convert", {"dtype": "f32"}, bits)
    np.testing.assert_array_equal(back.view(np.uint32), x.view(np.uint32))
    (u,) = ops.reference("bitcast_convert", {"dtype": "u8"}, np.array([-1, -128, 5], np.int8))
    assert u.tolist() == [255, 128, 5]
    (flags,) = ops.reference("bitcast_convert", {"dtype": "bool"}, np.array([0, 1, 2, 255], np.uint8))
    assert flags.dtype == np.bool_ and flags.tolist() == [False, True, True, True]   # nonzero reads as true
    out = ops.infer_types("bitcast_convert", {"dtype": "u8"}, [t(4, 2, dt=dtypes.boolean)])
    assert out == [t(4, 2, dt=dtypes.u8)]
    assert ops.category("bitcast_convert") == ops.ELEMENTWISE
    assert ops.node_flops("bitcast_convert", {"dtype": "i32"}, [t(4, 4)], [t(4, 4, dt=dtypes.i32)]) == 0
