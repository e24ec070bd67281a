"""dim_values: how `aotc run` and `aotc bench` choose a dynamic engine's dims for random inputs."""
from __future__ import annotations

import pytest

from aotc.errors import InputError
from aotc.package.dim_values import choose_dims, concrete_spec, parse_dim_values, top_value
from aotc.package.plan import DimSpec, Reg, TensorSpec

DIMS = [DimSpec("batch", 1, 64), DimSpec("seq", 8, 510, 8)]


def test_parse_and_choose():
    assert parse_dim_values(["batch=4", " seq = 16"]) == {"batch": 4, "seq": 16}
    assert top_value(DIMS[1]) == 504                      # the largest multiple of 8 in range
    assert choose_dims(DIMS, {"batch": 3}) == {"batch": 3, "seq": 504}
    assert choose_dims([], {}) == {}
    spec = TensorSpec("ids", "i64", (Reg(0), Reg(1), 4), (64, 510, 4))
    assert concrete_spec(spec, DIMS, {"batch": 3, "seq": 16}) == TensorSpec("ids", "i64", (3, 16, 4))
    static = TensorSpec("w", "f32", (2, 2))
    assert concrete_spec(static, DIMS, {}) is static


@pytest.mark.parametrize("items, message", [
    (["batch"], r"--dim 'batch' is not NAME=INT"), (["=3"], "is not NAME=INT"), (["batch=x"], "is not NAME=INT"),
])
def test_parse_errors(items, message):
    with pytest.raises(InputError, match=message):
        parse_dim_values(items)


@pytest.mark.parametrize("given, message", [
    ({"batch": 65}, r"^dim batch = 65 is outside its range 1\.\.64$"),
    ({"batch": 0}, "outside its range 1..64"),
    ({"seq": 12}, r"^dim seq = 12 is outside its range 8\.\.510 in multiples of 8$"),
    ({"bach": 2}, r"^unknown dim\(s\) 'bach'; the engine's dynamic dims: batch \(1\.\.64\), seq \(8\.\.510\)$"),
])
def test_choose_errors_name_the_dim_and_range(given, message):
    with pytest.raises(InputError, match=message):
        choose_dims(DIMS, given)
    with pytest.raises(InputError, match="none \\(a static engine\\)"):
        choose_dims([], {"batch": 1})
