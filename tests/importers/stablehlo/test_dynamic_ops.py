"""StableHLO dynamism ops with static result types, against their static counterparts run by jax."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402

from aotc.errors import UnsupportedError  # noqa: E402
from aotc.importers.stablehlo import import_stablehlo  # noqa: E402
from aotc.ir.interpreter import interpret  # noqa: E402
from tests.helpers.rng import fresh_rng, random_array  # noqa: E402
from tests.importers.stablehlo.test_importer import close  # noqa: E402

_PROGRAM = """
func.func @main(%x: tensor<2x3xf32>, %img: tensor<1x5x5x2xf32>, %w: tensor<3x3x2x4xf32>)
    -> (tensor<3x2xf32>, tensor<3x2x3xf32>, tensor<4x3xi32>, tensor<5x9xf32>, tensor<2x2xf32>,
        tensor<1x2x2x4xf32>) {
  %shape = stablehlo.constant dense<[3, 2]> : tensor<2xi64>
  %0 = stablehlo.dynamic_reshape %x, %shape : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<3x2xf32>
  %bshape = stablehlo.constant dense<[3, 2, 3]> : tensor<3xi64>
  %1 = stablehlo.dynamic_broadcast_in_dim %x, %bshape, dims = [1, 2]
      : (tensor<2x3xf32>, tensor<3xi64>) -> tensor<3x2x3xf32>
  %ishape = stablehlo.constant dense<[4, 3]> : tensor<2xi64>
  %2 = stablehlo.dynamic_iota %ishape, dim = 1 : (tensor<2xi64>) -> tensor<4x3xi32>
  %one = stablehlo.constant dense<1> : tensor<2xi64>
  %lo = stablehlo.constant dense<[0, 2]> : tensor<2xi64>
  %hi = stablehlo.add %one, %one : tensor<2xi64>
  %pv = stablehlo.constant dense<-7.5> : tensor<f32>
  %3 = stablehlo.dynamic_pad %x, %pv, %lo, %hi, %one
      : (tensor<2x3xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<5x9xf32>
  %idx = stablehlo.constant dense<[[1, 0], [0, 1]]> : tensor<2x2xi64>
  %sizes = stablehlo.constant dense<[1, 2]> : tensor<2xi64>
  %4 = "stablehlo.dynamic_gather"(%x, %idx, %sizes) {dimension_numbers = #stablehlo.gather<offset_dims = [1],
      collapsed_slice_dims = [0], start_index_map = [0, 1], index_vector_dim = 1>, indices_are_sorted = false}
      : (tensor<2x3xf32>, tensor<2x2xi64>, tensor<2xi64>) -> tensor<2x2xf32>
  %pads = stablehlo.constant dense<[[1, 0], [0, 1]]> : tensor<2x2xi64>
  %5 = "stablehlo.dynamic_conv"(%img, %w, %pads) {window_strides = array<i64: 2, 2>,
      dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
      feature_group_count = 1 : i64, batch_group_count = 1 : i64}
      : (tensor<1x5x5x2xf32>, tensor<3x3x2x4xf32>, tensor<2x2xi64>) -> tensor<1x2x2x4xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<3x2xf32>, tensor<3x2x3xf32>, tensor<4x3xi32>, tensor<5x9xf32>,
      tensor<2x2xf32>, tensor<1x2x2x4xf32>
}"""


def test_dynamic_ops_with_static_shapes():
    rng, seed = fresh_rng()
    x, img, w = random_array(rng, (2, 3)), random_array(rng, (1, 5, 5, 2)), random_array(rng, (3, 3, 2, 4))
    got = interpret(import_stablehlo(_PROGRAM), [x, img, w])
    conv = lax.conv_general_dilated(img, w, (2, 2), ((1, 0), (0, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"))
    ref = [x.reshape(3, 2), np.broadcast_to(x, (3, 2, 3)), np.broadcast_to(np.arange(3, dtype=np.int32), (4, 3)),
           np.asarray(lax.pad(x, np.float32(-7.5), ((0, 2, 1), (2, 2, 1)))), np.stack([x[1, 0:2], x[0, 1:3]]),
           np.asarray(conv)]
    for k, (a, r) in enumerate(zip(got, ref, strict=True)):
        close(a, np.asarray(r), 1e-5, 1e-5, f"output {k}, seed {seed}")


def test_traced_padding_is_reported():
    text = """
func.func @main(%x: tensor<2x3xf32>, %lo: tensor<2xi64>) -> tensor<4x5xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.constant dense<0> : tensor<2xi64>
  %1 = stablehlo.dynamic_pad %x, %z, %lo, %lo, %0
      : (tensor<2x3xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<4x5xf32>
  return %1 : tensor<4x5xf32>
}"""
    with pytest.raises(UnsupportedError, match="dynamic_pad.*edge_padding_low must be computable at import time"):
        import_stablehlo(text)
