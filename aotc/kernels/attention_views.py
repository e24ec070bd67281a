"""Q, K and V of the tensor-core attention that are plain strided views of a parameter, staged by cp.async.

attention_mma.cu stages each operand tile per element through the region's load code: index math, a
load, a round trip through f32 and a shared store per element. Where the operand is a chain of the
region's slices, transposes and reshapes of one kernel parameter (mma_views.view_offsets: BERT's Q, K and V once
the QKV bias is the projection's epilogue, and any head split or merge of a plain tensor), its offsets
are checked exactly to be affine in its indices with the head dim contiguous and every other stride,
and the first offset, a whole number of 16-byte chunks. A 16-byte chunk of a tile row is then one
aligned run of the parameter, and the kernel copies it with one cp.async (zero-filled past the rows or
keys), into the same XOR-swizzled slot the per-element path writes. The parameter's own alignment is
known only at run time: the kernel tests it and stages per element where it fails. Anything else (a
dynamic shape, a computed or converted operand, an odd stride) keeps the per-element path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aotc.fusion.rules.attention import VIEW_OPS
from aotc.ir import dims as D
from aotc.kernels.builder import KernelBuilder
from aotc.kernels.mma_staging import CHUNK
from aotc.ir import ops
from aotc.kernels.mma_views import MAX_ELEMENTS
from aotc.patterns.attention import free_dim


@dataclass(frozen=True)
class AffineView:
    """Element (batch..., row, d) of an operand tile is param[offset + sum(batch * strides) + row * row_stride + d]."""
    param: str
    offset: int
    batch_strides: tuple[int, ...]
    row_stride: int


def view_offsets(b: KernelBuilder, value):
    """(parameter, the element offsets from its pointer in `value`'s shape) where `value` is the region's
    chain of VIEW_OPS of one kernel parameter, which may itself be a view (a slice read through a pointer to
    its first element, builder.KernelBuilder: BERT's Q, K and V columns of the QKV GEMM's output); else None."""
    node = b.producer.get(value)
    if value in b.param_names or node is None or node not in b.members:
        if value not in b.param_names or math.prod(value.shape) > MAX_ELEMENTS:
            return None
        if value not in b.views:
            return value, np.arange(math.prod(value.shape), dtype=np.int64).reshape(value.shape)
        source, strides = b.view_layout[value]
        idx = np.indices(value.shape, dtype=np.int64) * np.asarray(strides, np.int64).reshape((-1,) + (1,) * len(strides))
        return value, np.ravel_multi_index(tuple(idx), source)
    if node.op not in VIEW_OPS:
        return None
    inner = view_offsets(b, node.inputs[0])
    if inner is None:
        return None
    (out,) = ops.reference(node.op, node.attrs, inner[1])
    return inner[0], np.asarray(out)


def affine_view(b: KernelBuilder, value, batch_axes, row_axis: int, col_axis: int) -> AffineView | None:
    """The AffineView of `value` (its batch axes in the kernel's batch order, tile rows along `row_axis`, the
    head dim along `col_axis`), or None where it is no plain view of one parameter of its dtype that qualifies."""
    if not all(D.is_static(x) for x in value.shape):
        return None
    found = view_offsets(b, value)
    if found is None or found[0].dtype != value.dtype:
        return None
    param, offs = found
    offs = np.asarray(offs, np.int64)
    strides = [int(offs[tuple(1 if a == ax else 0 for a in range(offs.ndim))] - offs.flat[0]) if n > 1 else 0
               for ax, n in enumerate(offs.shape)]
    expected = offs.flat[0] + sum(np.arange(n).reshape([-1 if a == ax else 1 for a in range(offs.ndim)]) * s
                                  for ax, (n, s) in enumerate(zip(offs.shape, strides)))
    if not (offs == expected).all() or strides[col_axis] != 1 or offs.shape[col_axis] % CHUNK:
        return None
    others = [int(offs.flat[0])] + [s for ax, s in enumerate(strides) if ax != col_axis]
    if any(x % CHUNK for x in others):
        return None
    return AffineView(b.param_names[param], int(offs.flat[0]), tuple(strides[a] for a in batch_axes),
                      strides[row_axis])


def operand_views(b: KernelBuilder) -> tuple:
    """(Q, K, V) AffineViews (None where an operand stages per element): Q's rows are queries, K's and V's
    keys; the column is the head dim."""
    m = b.region.payload.match
    qk, pv = m.qk, m.pv
    q_ax = (free_dim(qk, "lhs"), qk.attrs["lhs_contract"][0])
    k_ax = (free_dim(qk, "rhs"), qk.attrs["rhs_contract"][0])
    v_ax = (pv.attrs["rhs_contract"][0], free_dim(pv, "rhs"))
    return (affine_view(b, qk.inputs[0], qk.attrs["lhs_batch"], *q_ax),
            affine_view(b, qk.inputs[1], qk.attrs["rhs_batch"], *k_ax),
            affine_view(b, pv.inputs[1], pv.attrs["rhs_batch"], *v_ax))


def aligned_test(view: AffineView | None) -> str:
    """The kernel's run-time test that `view` may be copied: its parameter 16-byte aligned ("false": no view)."""
    return "false" if view is None else f"(reinterpret_cast<unsigned long long>({view.param}) & 15) == 0"


def copy_code(view: AffineView, batch_idx, idx_t: str, smem_base: str, rows: int, width: int, threads: int,
              first: str, inside: str) -> str:
    """Code issuing this thread's cp.async copies of a tile of `rows` rows (`first` + 0 .. rows - 1) x `width`
    head dims into shared memory `smem_base` bytes past aotc_smem, 16 bytes each into the swizzled slot of
    chunk c of row r at (c ^ r % 8); `inside` tests that the row's index x lies inside ("true": whole tiles)."""
    chunks = width // CHUNK
    assert rows * chunks % threads == 0, (rows, width, threads)
    base = " + ".join([str(view.offset)] + [f"({idx_t}){z} * {s}" for z, s in zip(batch_idx, view.batch_strides) if s])
    return (f"{{\n  const {idx_t} vbase = {base};\n#pragma unroll\n"
            f"  for (int r = 0; r < {rows * chunks // threads}; ++r) {{\n"
            f"    const int e = threadIdx.x + {threads} * r, row = e / {chunks}, c = e % {chunks};\n"
            f"    const {idx_t} x = {first} + row;\n"
            f"    const bool in = {inside};\n"
            f"    aotc_cp_async_16_at(aotc_smem, {smem_base} + 2 * (row * {width} + ((c ^ (row & 7)) << 3)),\n"
            f"                        {view.param} + (in ? vbase + x * {view.row_stride} + {CHUNK} * c : 0), in ? 16u : 0u);\n"
            f"  }}\n}}")
