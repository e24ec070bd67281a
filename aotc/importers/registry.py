"""The converter table both importers use: op name -> converter, plus optional pre-scan checks.

An importer converts a model op by op; each source op name maps to one
converter function, registered with a decorator where the function is
written:

    TABLE = ConverterTable()

    @TABLE.register("Relu", "LeakyRelu", check=_slope_check)
    def _relu(ctx, ins, at): ...

The converter's signature is the importer's business (the ONNX importer
passes `(ctx, ins, attrs)`, the StableHLO importer `(cx, ins)`). A `check`
returns a reason string for attribute values or dtypes the converter cannot
handle (None when it can); the importers run every check in a pre-scan
before converting anything, so one error lists every problem of a model.
"""
from __future__ import annotations

from typing import Callable


class ConverterTable:
    """Converters and checks by op name; `register` is the decorator that fills both."""

    def __init__(self):
        self.converters: dict[str, Callable] = {}
        self.checks: dict[str, Callable] = {}

    def register(self, *names: str, check: Callable | None = None):
        """Decorator: `fn` converts every op in `names`; `check` (if any) pre-scans them."""
        if not names:
            raise ValueError("register() needs at least one op name")

        def deco(fn):
            for n in names:
                if n in self.converters and self.converters[n] is not fn:
                    raise ValueError(f"op {n!r} already has a converter ({self.converters[n].__qualname__})")
                self.converters[n] = fn
                if check is not None:
                    self.checks[n] = check
            return fn
        return deco

    def __contains__(self, name: str) -> bool:
        return name in self.converters

    def names(self) -> list[str]:
        """The supported op names, sorted."""
        return sorted(self.converters)
