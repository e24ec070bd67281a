"""Constant masks that are index math: a causal mask read as `j - i <= k ? a : b`, never loaded.

GPT-2-style graphs add a constant (S, S) causal mask to the attention scores. Loaded in
the tensor-core attention's fragment layout, each warp request touches 8 rows of 16
bytes (25% of its sectors), and every block reads the mask again. A constant whose last
two dims hold two values split along a diagonal, j - i <= k against j - i > k, and
which repeats over its leading dims, is exactly that comparison (one value throughout, as ViT's
all-zero mask, is a literal): the builder leaves it
out of the kernel's parameters and the emitter writes the comparison with the two
values as literals, so the kernel computes what the load would have returned, bit for
bit. Kernels that address a parameter by pointer (GEMM and conv operands, staged views)
keep it a parameter.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aotc.ir import dtypes

MAX_ELEMENTS = 1 << 22          # the check reads the whole array once per region reading it
KINDS = ("attention", "row", "loop")


@dataclass(frozen=True)
class Band:
    """value[..., i, j] = inside if j - i <= k else outside."""
    k: int
    inside: object
    outside: object


def band_of(array: np.ndarray) -> Band | None:
    """The band form of `array` (rank >= 2), or None where it has none (more than two values, a boundary
    that is not a diagonal, leading dims that differ). One value is the band with both values equal."""
    a = np.asarray(array)
    if a.ndim < 2 or a.size == 0 or a.size > MAX_ELEMENTS:
        return None
    rows, cols = a.shape[-2:]
    bits = np.ascontiguousarray(a).view(np.uint8).reshape(-1, rows, cols, a.dtype.itemsize)
    if not (bits == bits[:1]).all():          # the leading dims repeat one matrix (bitwise: -0.0, NaN)
        return None
    m = bits[0]
    inside_bits = m[rows - 1, 0]                   # the corner where j - i is smallest lies inside if any does
    inside = (m == inside_bits).all(axis=-1)
    flat = a.reshape(-1, rows, cols)[0]
    if inside.all():                               # one value (ViT's all-zero mask): a literal
        return Band(cols, flat[0, 0].item(), flat[0, 0].item())
    outside_bits = m[~inside][0]
    if not ((m == outside_bits).all(axis=-1) | inside).all():
        return None                                # a third value
    d = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    if not inside.any():
        return None
    k = int(d[inside].max())
    if not (inside == (d <= k)).all():
        return None
    first_out = tuple(np.argwhere(~inside)[0])
    return Band(k, flat[rows - 1, 0].item(), flat[first_out].item())


def band_constants(graph, region, candidates) -> dict:
    """{Value: Band} for the region's constant inputs in `candidates` that are bands and that no
    GEMM, conv or gather reads directly (those address their operands by pointer)."""
    if region.kind not in KINDS:
        return {}
    pointer_read = {v for n in region.nodes if n.op in ("dot_general", "convolution", "gather")
                    for v in n.inputs}
    out = {}
    for v in candidates:
        if v in graph.constants and v not in pointer_read and v.type.rank >= 2 and \
                v.dtype in (dtypes.f64, dtypes.f32, dtypes.f16, dtypes.bf16, dtypes.boolean) and v.type.is_static:
            band = band_of(graph.constants[v])
            if band is not None:
                out[v] = band
    return out
