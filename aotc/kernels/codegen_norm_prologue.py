"""A GEMM's norm prologue: LayerNorm/RMSNorm statistics of the block's rows, then normalized loads.

When fusion puts a row norm into a GEMM's lhs prologue (regions.norm_prologue),
the GEMM kernel starts with a pre-pass: one warp per row of its 64-row tile
runs the norm's reductions as phases over the row (as the row kernel does, the
row re-read from L2 each phase) and leaves the per-row values that the
normalized element needs (mean and 1/std for LayerNorm) in shared memory. The
operand loads then compute the normalized element from x and those values, so
the normalized tensor is never written. Every GEMM template runs `row_stats`
after its tile origin (m0, n0) is set and before its first fetch; the pre-pass
is templates/norm_row_stats.part, each phase reduce_phase.part.
"""
from __future__ import annotations

from aotc.kernels.builder import unravel
from aotc.kernels.emitter import Emitter
from aotc.kernels.template import instantiate

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


def norm_row_stats(b, mshape, kshape, M: int, K: int, tile_m: int = TILE_M):
    """(pre-pass code, overrides for the A loads); ("", {}) when the region has no norm prologue."""
    reduces = [n for n in b.members if n.op == "reduce"]
    if not reduces:
        return "", {}
    shape = reduces[0].inputs[0].shape
    frontier = _frontier(b.members, shape)
    em_row: Emitter = b.emitter(indent=3)
    kept = unravel(em_row, "am", mshape, "nr_")
    phases, overrides = [], {}
    for j, red in enumerate(reduces):
        kind = red.attrs["kind"]
        em: Emitter = b.emitter(indent=5, overrides=dict(overrides))
        idx = kept + unravel(em, "c", kshape, f"nc{j}_")
        value = em.value(red.inputs[0], idx)
        phases.append(instantiate("reduce_phase.part", dict(
            red=f"nred{j}", init=_identity(kind), idx_t=b.idx_t, first="threadIdx.x & 31", extent=K, step=32,
            load=em.text(), kind=kind, value=value, combine=f"aotc_warp_{kind}(acc)"), indent=6))
        overrides[red.outputs[0]] = f"nred{j}"
    em: Emitter = b.emitter(indent=3, overrides=overrides)
    for i, v in enumerate(frontier):
        val = em.value(v, kept + ["0"] * (v.type.rank - len(kept)))
        em.emit(f"if ((threadIdx.x & 31) == 0) aotc_rs[{i}][aotc_r] = {val};")
    code = instantiate("norm_row_stats.part", dict(
        nstats=len(frontier), tile_m=tile_m, idx_t=b.idx_t, m=M, row_index=em_row.text(),
        phases="\n".join(phases), stats=em.text()), indent=2)
    return code, {v: f"aotc_rs[{i}][am - m0]" for i, v in enumerate(frontier)}


def _identity(kind: str) -> str:
    return {"sum": "0.0f", "max": "(-AOTC_INF)", "min": "AOTC_INF"}[kind]

