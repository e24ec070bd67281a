"""The converter table both importers share: registration, checks, and refusing a second converter for one op."""
import pytest

from aotc.importers.onnx.ops import TABLE as ONNX_TABLE
from aotc.importers.registry import ConverterTable
from aotc.importers.stablehlo.importer import TABLE as STABLEHLO_TABLE, load_converters


def test_register_fills_converters_and_checks_for_every_name():
    t = ConverterTable()

    def check(op):
        return "never" if op == "bad" else None

    @t.register("A", "B", check=check)
    def conv(ctx, ins):
        return ins[0]

    @t.register("C")
    def other(ctx, ins):
        return ins[1]

    assert t.converters == {"A": conv, "B": conv, "C": other}
    assert t.checks == {"A": check, "B": check}
    assert "B" in t and "D" not in t and t.names() == ["A", "B", "C"]
    assert conv(None, [7]) == 7          # the decorator returns the function itself


def test_a_second_converter_for_one_op_is_refused():
    t = ConverterTable()
    t.register("A")(lambda ctx, ins: None)
    with pytest.raises(ValueError, match="'A' already has a converter"):
        t.register("A")(lambda ctx, ins: None)
    with pytest.raises(ValueError, match="at least one op name"):
        t.register()


def test_both_importers_fill_one_table_each():
    load_converters()
    assert isinstance(ONNX_TABLE, ConverterTable) and isinstance(STABLEHLO_TABLE, ConverterTable)
    assert {"Relu", "Conv", "LSTM", "Resize"} <= set(ONNX_TABLE.converters)
    assert {"stablehlo.add", "stablehlo.convolution", "stablehlo.sort", "chlo.erf"} <= set(STABLEHLO_TABLE.converters)
    assert "Cast" in ONNX_TABLE.checks and "stablehlo.custom_call" in STABLEHLO_TABLE.checks
