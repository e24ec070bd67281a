"""Ranges of dynamic dims from what the user asked for (aotc/importers/dynamic.py)."""
import pytest

from aotc.errors import ModelError
from aotc.importers.dynamic import parse_range, resolve_ranges
from aotc.ir.dims import DimRange

DIMS = {"ids": ["batch", "seq"], "mask": ["batch", "seq"], "x": [3, "x_dim1"]}


def test_every_dim_gets_its_range():
    got = resolve_ranges(DIMS, {"batch": (1, 64), "seq": "1..512", "x_dim1": (8, 64, 8)})
    assert got == {"batch": DimRange(1, 64), "seq": DimRange(1, 512), "x_dim1": DimRange(8, 64, 8)}
    assert parse_range("s", "2..8:2") == DimRange(2, 8, 2)


def test_missing_ranges_are_listed_with_the_flags_that_fix_them():
    with pytest.raises(ModelError) as e:
        resolve_ranges(DIMS, {"batch": (1, 4)})
    msg = str(e.value)
    assert "seq (ids[1], mask[1]); x_dim1 (x[1])" in msg
    assert "--dynamic seq=MIN..MAX --dynamic x_dim1=MIN..MAX" in msg and "--input-shape x:3x1" in msg


def test_unknown_names_and_bad_ranges():
    with pytest.raises(ModelError, match="names bacth, which no input dim is called"):
        resolve_ranges(DIMS, {"bacth": (1, 2), "batch": (1, 2), "seq": (1, 2), "x_dim1": (1, 2)})
    for bad in ("5..4", "1-4", (1,), "0..2147483648"):
        with pytest.raises(ModelError, match="bad range"):
            parse_range("batch", bad)
