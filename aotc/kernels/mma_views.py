"""dot_mma operands that are a region's transposes and reshapes of a kernel parameter, staged by cp.async.

BERT's attention output projection multiplies heads transposed back to (tokens, heads x 64): the operand
is no plain load, yet every 8 consecutive k of it are 8 consecutive elements of the parameter. Such an
operand goes by 16-byte cp.async like a plain one when, checked exactly on the parameter's element
offsets (the op table's numpy references applied to an index array):
- each 16-byte chunk along the operand's k is one aligned run of the parameter, and
- the offset splits into a part of (batch, m or n) and a part of k: offset(b, x, k) = offset(b, x, 0)
  + offset(b, 0, k) - offset(b, 0, 0), so each of a thread's rows gets its part once before the loop and
  each stage its k part once (mma_staging's row_setup / stage_setup, as the implicit-GEMM conv does).
Only the 'k' layout (k contiguous) is taken; anything else stays per element.
"""
from __future__ import annotations

import math

import numpy as np

from aotc.ir import ops
from aotc.kernels.builder import KernelBuilder, operand_index
from aotc.kernels.emitter import linear
from aotc.kernels.mma_staging import CHUNK, ROW_MARK, Operand

INDEX_OPS = ("transpose", "reshape")
MAX_ELEMENTS = 1 << 24           # the exact check builds an index array of the operand's size


def view_offsets(b: KernelBuilder, value):
    """(parameter, its element offsets in `value`'s shape) where `value` is the region's chain of
    transposes and reshapes of one kernel parameter; None otherwise or for a dynamic shape."""
    node = b.producer.get(value)
    if node is None or node not in b.members:
        if value in b.param_names and value not in b.views and all(isinstance(d, int) for d in value.shape) \
                and math.prod(value.shape) <= MAX_ELEMENTS:
            return value, np.arange(math.prod(value.shape), dtype=np.int64).reshape(value.shape)
        return None
    if node.op not in INDEX_OPS:
        return None
    inner = view_offsets(b, node.inputs[0])
    if inner is None:
        return None
    param, offs = inner
    (out,) = ops.reference(node.op, node.attrs, offs)
    return param, np.asarray(out)


def chunks_and_split(offs: np.ndarray, batch_dims, free, contract) -> bool:
    """The two conditions of the module docstring on (batch, mn, k)-ordered offsets."""
    order = list(batch_dims) + list(free) + list(contract)
    nb = math.prod(offs.shape[d] for d in batch_dims)
    nmn = math.prod(offs.shape[d] for d in free)
    o = offs.transpose(order).reshape(nb, nmn, -1)
    k = o.shape[2]
    if k % CHUNK:
        return False
    runs = o.reshape(nb, nmn, k // CHUNK, CHUNK)
    if (runs != runs[..., :1] + np.arange(CHUNK)).any() or (runs[..., 0] % CHUNK).any():
        return False
    return bool((o == o[:, :, :1] + o[:, :1, :] - o[:, :1, :1]).all())


def _offset_code(b: KernelBuilder, bshape, var, value, param, batch_dims, dims_x, dims_y, flat_x, flat_y,
                 shape_x, shape_y, target: str) -> str:
    """Code setting `target` to the parameter offset of the operand's element at (b, flat_x, flat_y)."""
    seen = []
    em = b.emitter(indent=2, overrides={param: lambda idx: seen.append(idx) or "0.0f"})
    idx = operand_index(em, bshape, var, value, batch_dims, dims_x, dims_y, flat_x, flat_y, shape_x, shape_y)
    em.value(value, idx)
    em.emit(f"{target} = {linear(seen[-1], param.shape)};")
    return em.text()


def view_operand(b: KernelBuilder, which: str, value, batch_dims, dims_x, dims_y, bshape, shape_x, shape_y,
                 layout: str, load: str):
    """(Operand, the parameter's name) staging this view by cp.async, or None where it does not qualify."""
    found = view_offsets(b, value) if layout == "k" else None
    contract, free = (dims_y, dims_x) if which == "A" else (dims_x, dims_y)
    if found is None or not chunks_and_split(found[1], batch_dims, free, contract):
        return None
    param, _ = found
    row = f"(({'m0' if which == 'A' else 'n0'}) + (threadIdx.x >> 3) + 16 * {ROW_MARK})"

    def at(mn: str, k: str, var: str, target: str) -> str:
        flat = (mn, k) if which == "A" else (k, mn)
        return _offset_code(b, bshape, var, value, param, batch_dims, dims_x, dims_y, *flat, shape_x, shape_y,
                            target)
    idx_t, kv, r = b.idx_t, "ak" if which == "A" else "bk", ROW_MARK
    rows = (f"{idx_t} Vr{r}, Vz{r};\n{{\n{at(row, '0', f'Vr{r}', f'Vr{r}')}\n}}\n"
            f"{{\n{at('0', '0', f'Vz{r}', f'Vz{r}')}\n}}\nVr{r} -= Vz{r};")
    stage = f"const {idx_t} {kv} = k0 + {CHUNK} * (threadIdx.x & 7);\n{idx_t} Vk;\n{{\n{at('0', kv, 'Vk', 'Vk')}\n}}"
    address = f"  src = {b.param_names[param]} + (Vr{r} + Vk);\n  nbytes = 16u;"
    return Operand(which, layout, address=address, load=load, row_setup=rows, stage_setup=stage), \
        b.param_names[param]
