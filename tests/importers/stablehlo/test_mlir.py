"""The MLIR access layer of the StableHLO importer: form detection, types, dense constants, locations."""
import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("jaxlib")

from aotc.errors import ModelError, UnsupportedError  # noqa: E402
from aotc.importers.stablehlo import mlir as M  # noqa: E402
from aotc.ir import dtypes  # noqa: E402

PROGRAM = b"""func.func @main(%x: tensor<2x3xf32> loc("x"), %m: tensor<4xbf16>) -> tensor<2x3xf32> {
  %c = stablehlo.constant dense<[[1.0, -2.5, 3.0], [0.0, 1.0e+10, -0.0]]> : tensor<2x3xf32>
  %s = stablehlo.constant dense<7> : tensor<2x2xi32>
  %b = stablehlo.constant dense<[1.5, -2.0, 0.0, 3.0]> : tensor<4xbf16>
  %p = stablehlo.constant dense<[true, false]> : tensor<2xi1>
  %0 = stablehlo.add %x, %c : tensor<2x3xf32> loc("prog.py":7:11)
  return %0 : tensor<2x3xf32>
}
"""


def _ops(module):
    fn = module.body.operations[0]
    return list(fn.regions[0].blocks[0].operations), fn


def test_forms_are_recognised_and_garbage_is_not():
    assert M.looks_like_stablehlo(PROGRAM) and M.looks_like_stablehlo(b"  module {}")
    assert M.looks_like_stablehlo(M.MLIR_MAGIC + b"\x00bytecode")
    assert not M.looks_like_stablehlo(b"\x08\x09\x12\x07onnx-ish protobuf bytes")
    assert not M.looks_like_stablehlo(b"")


def test_text_parses_and_garbage_is_a_model_error():
    ctx = M.new_context()
    module, exported = M.parse(ctx, PROGRAM)
    assert exported is None and len(_ops(module)[0]) == 6   # four constants, add, return
    with pytest.raises(ModelError, match="cannot parse"):
        M.parse(ctx, b"func.func @main( {")


def test_dense_constants_become_arrays_of_their_dtype():
    ctx = M.new_context()
    module, _ = M.parse(ctx, PROGRAM)
    with ctx:
        ops, _ = _ops(module)
        c, s, b, p = (M.elements_to_numpy(op.attributes["value"]) for op in ops[:4])
    np.testing.assert_array_equal(c, np.array([[1.0, -2.5, 3.0], [0.0, 1.0e10, -0.0]], np.float32))
    assert c.dtype == np.float32 and np.signbit(c[1, 2])
    assert s.dtype == np.int32 and s.shape == (2, 2) and (s == 7).all()
    assert b.dtype == ml_dtypes.bfloat16 and b.astype(np.float32).tolist() == [1.5, -2.0, 0.0, 3.0]
    assert p.dtype == np.bool_ and p.tolist() == [True, False]


def test_types_name_what_is_unsupported():
    ctx = M.new_context()
    module, _ = M.parse(ctx, b"""func.func @main(%a: tensor<?x4xf32>, %b: tensor<3xcomplex<f32>>, %c: tensor<2x5xbf16>)
        -> tensor<2x5xbf16> {
      return %c : tensor<2x5xbf16>
    }""")
    with ctx:
        _, fn = _ops(module)
        a, b, c = fn.regions[0].blocks[0].arguments
        assert M.tensor_type(c.type, "c") == ((2, 5), dtypes.bf16)
        assert M.tensor_type(a.type, "a") == ((None, 4), dtypes.f32) and M.type_problem(a.type) is None
        assert "element type complex<f32>" in M.type_problem(b.type) and M.type_problem(c.type) is None
        with pytest.raises(UnsupportedError, match="argument b has element type complex<f32>"):
            M.tensor_type(b.type, "argument b")


def test_locations_give_names_and_short_file_positions():
    ctx = M.new_context()
    module, _ = M.parse(ctx, PROGRAM)
    with ctx:
        ops, fn = _ops(module)
        x = fn.regions[0].blocks[0].arguments[0]
        assert M.loc_name(x.location) == "x"
        assert M.describe_loc(ops[4].location) == "prog.py:7:11" and M.loc_name(ops[4].location) is None
