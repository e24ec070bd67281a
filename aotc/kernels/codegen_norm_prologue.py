"""A GEMM's norm prologue: LayerNorm/RMSNorm statistics of the block's rows, then normalized loads.

When fusion puts a row norm into a GEMM's lhs prologue (regions.norm_prologue),
the GEMM kernel starts with a pre-pass: one warp per row of its 64-row tile
runs the norm's reductions as phases over the row (as the row kernel does, the
row re-read from L2 each phase) and leaves the per-row values that the
normalized element needs (mean and 1/std for LayerNorm) in shared memory. The
operand loads then compute the normalized element from x and those values, so
the normalized tensor is never written. Every GEMM template runs `row_stats`
after its tile origin (m0, n0) is set and before its first fetch.
"""
from __future__ import annotations

from aotc.kernels.emitter import Emitter

TILE_M = 64


def _frontier(nodes, shape):
    """The row-shaped values (derived from a reduction) that full-shape nodes read."""
    dependent = {n for n in nodes if n.op == "reduce"}
    produced = {v: n for n in nodes for v in n.outputs}
    out = []
    for n in nodes:                               # graph order
        if n in dependent or not any(produced.get(v) in dependent for v in n.inputs):
            continue
        dependent.add(n)
        if n.outputs[0].shape != shape:
            continue
        for v in n.inputs:
            if produced.get(v) in dependent and v.shape != shape and v not in out:
                out.append(v)
    return out


def norm_row_stats(b, unravel, mshape, kshape, M: int, K: int):
    """(pre-pass code, overrides for the A loads); ("", {}) when the region has no norm prologue."""
    reduces = [n for n in b.members if n.op == "reduce"]
    if not reduces:
        return "", {}
    shape = reduces[0].inputs[0].shape
    frontier = _frontier(b.members, shape)
    idx_t = b.idx_t
    lines = [f"  __shared__ float aotc_rs[{len(frontier)}][{TILE_M}];",
             f"  for (int aotc_r = threadIdx.x >> 5; aotc_r < {TILE_M}; aotc_r += blockDim.x >> 5) {{",
             f"    const {idx_t} am = m0 + aotc_r;",
             f"    if (am < {M}) {{                    // warp-uniform: the whole warp owns row am"]
    em_row: Emitter = b.emitter(indent=3)
    kept = unravel(em_row, "am", mshape, "nr_")
    lines.append(em_row.text())
    overrides = {}
    for j, red in enumerate(reduces):
        kind = red.attrs["kind"]
        em: Emitter = b.emitter(indent=4, overrides=dict(overrides))
        em.emit(f"float acc = {_identity(kind)};")
        em.open(f"for ({idx_t} c = threadIdx.x & 31; c < {K}; c += 32)")
        idx = kept + unravel(em, "c", kshape, f"nc{j}_")
        em.emit(f"acc = AOTC_COMBINE_{kind}(acc, {em.value(red.inputs[0], idx)});")
        em.close()
        em.emit(f"nred{j} = aotc_warp_{kind}(acc);")
        lines.append(f"      float nred{j};\n      {{\n{em.text()}\n      }}")
        overrides[red.outputs[0]] = f"nred{j}"
    em: Emitter = b.emitter(indent=3, overrides=overrides)
    for i, v in enumerate(frontier):
        val = em.value(v, kept + ["0"] * (v.type.rank - len(kept)))
        em.emit(f"if ((threadIdx.x & 31) == 0) aotc_rs[{i}][aotc_r] = {val};")
    lines += [em.text(), "    }", "  }", "  __syncthreads();"]
    return "\n".join(lines), {v: f"aotc_rs[{i}][am - m0]" for i, v in enumerate(frontier)}


def _identity(kind: str) -> str:
    return {"sum": "0.0f", "max": "(-AOTC_INF)", "min": "AOTC_INF"}[kind]

