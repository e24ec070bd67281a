"""Values for a dynamic engine's dims, as `aotc run --dim batch=4` and `aotc bench` pick them.

A tool that draws random inputs for a dynamic engine needs one concrete
shape: each dim takes the value the user named, else its largest value (the
shape the arena is planned for). Names and ranges are checked here so a typo
is one clear line, not a runtime error about some input.
"""
from __future__ import annotations

from aotc.errors import InputError
from aotc.package.plan import DimSpec, Reg, TensorSpec


def parse_dim_values(items) -> dict[str, int]:
    """["batch=4", "seq=128"] -> {"batch": 4, "seq": 128}."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise InputError(f"--dim '{item}' is not NAME=INT (e.g. batch=4)")
    return out


def top_value(dim: DimSpec) -> int:
    """The largest value in the dim's range (a multiple of its divisor)."""
    return dim.max // dim.divisor * dim.divisor


def choose_dims(dims: list[DimSpec], given: dict[str, int]) -> dict[str, int]:
    """Every dim's value: the given one (checked against its range), else its largest."""
    known = {d.name: d for d in dims}
    unknown = [n for n in given if n not in known]
    if unknown:
        have = ", ".join(f"{d.name} ({d.min}..{d.max})" for d in dims) or "none (a static engine)"
        raise InputError(f"unknown dim(s) {', '.join(map(repr, unknown))}; the engine's dynamic dims: {have}")
    out = {}
    for d in dims:
        v = given.get(d.name, top_value(d))
        if not d.min <= v <= d.max or v % d.divisor:
            extra = f" in multiples of {d.divisor}" if d.divisor > 1 else ""
            raise InputError(f"dim {d.name} = {v} is outside its range {d.min}..{d.max}{extra}")
        out[d.name] = v
    return out


def concrete_spec(spec: TensorSpec, dims: list[DimSpec], values: dict[str, int]) -> TensorSpec:
    """`spec` with each dynamic dim replaced by its value (an input's dims name engine dims)."""
    if spec.is_static:
        return spec
    return TensorSpec(spec.name, spec.dtype,
                      tuple(values[dims[d.index].name] if isinstance(d, Reg) else d for d in spec.shape))
