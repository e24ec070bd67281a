"""The ranges of a model's dynamic dims, from what the user asked for.

Both importers and the compiler (for a Graph handed in directly) call
`resolve_ranges`: every dynamic dim of the model's inputs needs a range, a
name the user gives that no input dim has is a typo, and the error lists every
problem at once with the flag that fixes it.
"""
from __future__ import annotations

from aotc.errors import ModelError
from aotc.ir.dims import DimRange


def parse_range(name: str, r) -> DimRange:
    """(min, max), (min, max, divisor), a DimRange, or the CLI's "MIN..MAX[:DIV]" text."""
    try:
        if isinstance(r, DimRange):
            return r
        if isinstance(r, str):
            body, _, div = r.partition(":")
            lo, sep, hi = body.partition("..")
            if not sep:
                raise ValueError("expected MIN..MAX")
            return DimRange(int(lo), int(hi), int(div) if div else 1)
        return DimRange(*(int(x) for x in r))
    except (TypeError, ValueError) as e:
        raise ModelError(f"dynamic dim '{name}': bad range {r!r} ({e}); give MIN..MAX with "
                         f"0 <= MIN <= MAX < 2^31 (Python: (min, max) or (min, max, divisor))") from None


def resolve_ranges(input_dims: dict[str, list], dynamic: dict, input_shape_flag: bool = True) -> dict[str, DimRange]:
    """Name -> DimRange for every dynamic dim of the inputs.

    `input_dims` maps each input to its dims: ints for static ones, names for dynamic ones.
    `input_shape_flag`: whether the model's importer takes --input-shape (StableHLO's does not: a range
    N..N pins a dim there).
    """
    where: dict[str, list[str]] = {}
    for inp, dims in input_dims.items():
        for i, d in enumerate(dims):
            if isinstance(d, str):
                where.setdefault(d, []).append(f"{inp}[{i}]")
    unknown = sorted(set(dynamic) - set(where))
    if unknown:
        raise ModelError(f"--dynamic names {', '.join(unknown)}, which no input dim is called "
                         f"(dynamic dims of the inputs: {', '.join(sorted(where)) or 'none'})")
    missing = sorted(set(where) - set(dynamic))
    if missing:
        raise ModelError(
            "dynamic dim(s) without a range: " + "; ".join(f"{n} ({', '.join(where[n])})" for n in missing)
            + ". Pass " + " ".join(f"--dynamic {n}=MIN..MAX" for n in missing)
            + " (Python: dynamic={" + ", ".join(f"'{n}': (MIN, MAX)" for n in missing) + "})"
            + ", or pin them: " + (" ".join(
                f"--input-shape {inp}:{'x'.join(str(d) if isinstance(d, int) else '1' for d in dims)}"
                for inp, dims in input_dims.items() if any(isinstance(d, str) for d in dims))
                if input_shape_flag else " ".join(f"--dynamic {n}=N..N" for n in missing)))
    return {n: parse_range(n, dynamic[n]) for n in sorted(where)}


__all__ = ["resolve_ranges", "parse_range"]
