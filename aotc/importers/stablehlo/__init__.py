"""The StableHLO importer: `import_stablehlo(program)` turns a JAX/StableHLO program into an aotc Graph.

importer.py holds the flow (read, parse, pre-scan, op by op conversion);
mlir.py is the only module that touches jaxlib's MLIR bindings; ops.py holds
the shared helpers and the elementwise/shape converters; the other modules
add converters by op family and register them when imported.
"""
from aotc.importers.stablehlo.importer import import_stablehlo

__all__ = ["import_stablehlo"]
