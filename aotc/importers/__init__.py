"""Importers: source models onto the IR's primitive ops, one converter per source op.

onnx/            the ONNX importer (`from aotc.importers.onnx import import_onnx`)
stablehlo/       the StableHLO importer (`from aotc.importers.stablehlo import import_stablehlo`)
registry.py      ConverterTable, the op-name -> converter table both importers fill with `register`
expr.py          Ex, the expression helper their decompositions are written with
static_values.py import-time evaluation of values computed from constants (shapes, axes)
"""
