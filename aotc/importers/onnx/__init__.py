"""The ONNX importer: `import_onnx(model)` turns an ONNX model into an aotc Graph.

importer.py holds the flow (load, check, shape inference, pre-scan, node by
node conversion); ops.py holds the converter table and its helpers; the other
modules add converters by op family and register them when imported.
"""
from aotc.importers.onnx.importer import ONNX_DTYPES, dtype_name, import_onnx

__all__ = ["ONNX_DTYPES", "dtype_name", "import_onnx"]
