"""How far an engine's tensor is from its reference, and the conditions `--until` accepts.

The relative error is normwise: the largest absolute difference over the largest
reference magnitude (at least REL_FLOOR), as the e2e precision tests measure it. An
elementwise relative error would flag every value near zero in an fp16 tensor; the
normwise one stays near the precision's unit roundoff (fp16 ~1e-3, bf16 ~1e-2).

A NaN or Inf where the reference holds something else (a finite value, or the other
infinity) is not averaged into the errors: it is counted in `nonfinite` ({"nan", "inf"},
by what the engine holds; a finite engine value where the reference is NaN/Inf counts
under the reference's kind). A tensor fails when its relative error is past the
tolerance or any such mismatch exists.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass

import numpy as np

from aotc.errors import AotcError

REL_FLOOR = 1e-6
# tolerance per engine precision: fp16/tf32 round to 10-11 bits, bf16 to 8 (the e2e precision tests' bounds)
DEFAULT_RTOL = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 1e-2, "bf16": 5e-2}


@dataclass(frozen=True)
class TensorError:
    max_abs_err: float
    max_rel_err: float
    nan: int = 0
    inf: int = 0

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf

    def fails(self, rtol: float) -> bool:
        return self.max_rel_err > rtol or self.nonfinite > 0

    def as_dict(self) -> dict:
        return {"max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "nonfinite": {"nan": self.nan, "inf": self.inf}}


NO_ERROR = TensorError(0.0, 0.0)


def measure(got: np.ndarray, want: np.ndarray) -> TensorError:
    """The error of `got` (any dtype, cast to f64) against `want` of the same shape."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise AotcError(f"cannot compare a tensor of {got.shape} with a reference of {want.shape}")
    g, w = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
    finite = np.isfinite(g) & np.isfinite(w)
    same = (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & (g == w))
    bad = ~finite & ~same
    nan = int(np.count_nonzero(bad & (np.isnan(g) | (np.isfinite(g) & np.isnan(w)))))
    inf = int(np.count_nonzero(bad)) - nan
    if not finite.any():
        return TensorError(0.0, 0.0, nan, inf)
    diff = float(np.max(np.abs(g[finite] - w[finite])))
    scale = max(float(np.max(np.abs(w[finite]))), REL_FLOOR)
    return TensorError(diff, diff / scale, nan, inf)


def worst(errors) -> TensorError:
    """One error for several tensors: the largest of each measure, the mismatches summed."""
    errors = list(errors)
    if not errors:
        return NO_ERROR
    return TensorError(max(e.max_abs_err for e in errors), max(e.max_rel_err for e in errors),
                       sum(e.nan for e in errors), sum(e.inf for e in errors))


_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_CONDITION = re.compile(r"^\s*(rel|abs|nonfinite)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Condition:
    """A parsed `--until` condition such as `rel>1e-2`, `abs>=0.5` or `nonfinite>0`.

    `rel` and `abs` read a NaN/Inf mismatch as an infinite error, so `rel>1e-2` holds for
    an engine that overflows where the reference stays finite.
    """
    metric: str
    op: str
    threshold: float

    def holds(self, error: TensorError) -> bool:
        if self.metric == "nonfinite":
            value = float(error.nonfinite)
        else:
            value = error.max_rel_err if self.metric == "rel" else error.max_abs_err
            value = float("inf") if error.nonfinite else value
        return _OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


def parse_condition(text: str) -> Condition:
    m = _CONDITION.match(text or "")
    if not m:
        raise AotcError(f"--until '{text}' is not METRIC OP NUMBER with METRIC rel, abs or nonfinite "
                        f"and OP >, >=, < or <= (e.g. 'rel>1e-2')")
    try:
        threshold = float(m.group(3))
    except ValueError:
        raise AotcError(f"--until '{text}': '{m.group(3)}' is not a number") from None
    return Condition(m.group(1), m.group(2), threshold)


__all__ = ["DEFAULT_RTOL", "TensorError", "NO_ERROR", "measure", "worst", "Condition", "parse_condition"]
