"""Kernel variants per size bucket: one region, a few kernels, the runtime picks one per shape.

A dynamic region's generic kernel is correct over the whole range, but the
code generators make choices a size decides (a warp per row when rows are
short, split-K when a GEMM has few tiles, the tile geometry); over a whole
range they must take the choice that is right everywhere. A bucket narrows the
ranges (`Bucket.bounds`), and the same region generated inside it may choose
differently: pinned to 1, a dim disappears from the kernel (batch-1 serving and
decode steps get what a static engine gets: known sizes, split-K); capped at 256,
rows take the warp kernel. A variant identical to the generic kernel, or to an
earlier bucket's, is dropped, so regions that no bucket changes keep one kernel.

The runtime evaluates which bucket holds (a shape-program predicate per launch,
package/launch_plan.py); buckets are tried in order, the generic kernel runs
where none holds.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotc.ir import dims as D

SHORT = 256              # rows up to this long take a warp each (codegen.WARP_ROW_MAX)


@dataclass(frozen=True)
class Bucket:
    """Narrowed ranges: dim name -> (lo, hi) within the dim's range."""
    name: str
    bounds: tuple[tuple[str, tuple[int, int]], ...]

    def ranges(self, dims: dict[str, D.DimRange]) -> dict[str, D.DimRange]:
        return {n: D.DimRange(lo, hi, dims[n].divisor) for n, (lo, hi) in self.bounds}


def buckets_for(dims: dict[str, D.DimRange]) -> list[Bucket]:
    """The engine's buckets, in the order the runtime tries them: every dim that starts at 1 pinned
    to 1 (batch 1, a decode step), then long dims capped at SHORT."""
    out = []
    ones = tuple((n, (1, 1)) for n, r in dims.items() if r.min == 1 < r.max)
    if ones:
        out.append(Bucket(",".join(f"{n}=1" for n, _ in ones), ones))
    short = tuple((n, (r.min, SHORT)) for n, r in dims.items() if r.min <= SHORT < r.max)
    if short:
        out.append(Bucket(",".join(f"{n}<={SHORT}" for n, _ in short), short))
    return out


def generate_variants(generate, generic, buckets: list[Bucket], dims: dict[str, D.DimRange]) -> list:
    """[(bucket index, Kernel)] of the buckets where `generate()` (the region's code generator) gives a
    kernel other than `generic` and every earlier variant's."""
    seen = {(generic.name, generic.grid)}
    out = []
    for i, bucket in enumerate(buckets):
        if not any(n in _used(generic) for n, _ in bucket.bounds):
            continue
        with D.dim_ranges(bucket.ranges(dims)):
            k = generate()
        key = (k.name, k.grid)
        if key not in seen:
            seen.add(key)
            out.append((i, k))
    return out


def _used(kernel) -> set[str]:
    """Dims a kernel depends on: the ones it takes, and the ones its grid counts."""
    return set(kernel.dims) | D.symbols(tuple(kernel.grid))


__all__ = ["Bucket", "buckets_for", "generate_variants"]
