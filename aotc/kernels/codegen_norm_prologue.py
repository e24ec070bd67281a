"""A GEMM's norm prologue: LayerNorm/RMSNorm statistics of the block's rows, then normalized loads.

When fusion puts a row norm into a GEMM's lhs prologue (regions.norm_prologue),
the GEMM kernel starts with a pre-pass: one warp per row of its block tile
runs the norm's reductions as phases over the row (as the row kernel does, the
row re-read from L2 each phase) and leaves the per-row values that the
normalized element needs (mean and 1/std for LayerNorm) in shared memory.
LayerNorm's two phases (the sum of x, then the sum of (x - mean)^2) become one
(`one_pass_pair`): Welford's update per lane and Chan's formula across the
warp give both from a single read of the row (templates/norm_welford.part). The
operand loads then compute the normalized element from x and those values, so
the normalized tensor is never written. Every GEMM template runs `row_stats`
after its tile origin (m0, n0) is set and before its first fetch; the pre-pass
is templates/norm_row_stats.part, each phase reduce_phase.part.
"""
from __future__ import annotations

import math

from aotc.errors import UnsupportedError
from aotc.kernels.builder import unravel
from aotc.kernels.emitter import Emitter
from aotc.kernels.template import instantiate

TILE_M = 64


def frontier(nodes, shape, reduces):
    """The row-shaped values (derived from `reduces`) that full-shape nodes read."""
    dependent = set(reduces)
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
    """(pre-pass code, overrides for the A loads); ("", {}) when the region has no row norm.

    The region's reductions are split into norms (norm_groups); a norm the anchor's lhs depends on is the
    prologue's (its stats indexed by the A load's row `am`), any other one is an epilogue norm (a residual
    LN(s) the epilogue adds; its stats indexed by the output row `m`, left in b.epilogue_overrides for
    dot_epilogue). Each norm runs over its own row (the reduce's axes), not necessarily the GEMM's K.
    A prologue norm folded into the weights (b.fold, norm_fold.py) leaves its stats to the epilogue too.
    """
    groups = norm_groups(b.members, b.region.anchor)
    if not groups:
        return "", {}
    codes, prologue = [], {}
    b.norm_phases = []
    for g, (reduces, in_prologue) in enumerate(groups):
        x = reduces[0].inputs[0]
        axes = list(reduces[0].attrs["axes"])
        rshape = [d for i, d in enumerate(x.shape) if i not in axes]
        if [str(d) for d in rshape] != [str(d) for d in mshape]:
            raise UnsupportedError(f"norm '{reduces[0].name}' in gemm '{b.region.anchor.name}': its rows "
                                   f"{rshape} are not the gemm's m rows {list(mshape)}")
        cshape = [x.shape[a] for a in axes]
        rs = "aotc_rs" if g == 0 else f"aotc_rs{g}"
        code, stats = _norm_pass(b, reduces, cshape, math.prod(cshape), mshape, M, tile_m, rs)
        codes.append(code)
        in_prologue = in_prologue and b.fold is None     # folded (norm_fold.py): the epilogue reads them
        row = "am" if in_prologue else "m"
        overrides = {v: f"{rs}[{i}][{row} - m0]" for i, v in enumerate(stats)}
        if in_prologue:
            prologue.update(overrides)
        else:
            b.epilogue_overrides.update(overrides)
    return "\n".join(codes), prologue


def norm_groups(members, anchor) -> list[tuple[list, bool]]:
    """The region's row norms: (their reduce nodes, whether the anchor's lhs depends on them), in graph order.

    Two reductions belong to one norm when one depends on the other (LayerNorm's variance reads the mean);
    a region may hold the norm its GEMM's prologue normalizes and one its epilogue adds (a post-LN
    encoder's residual, fusion/prologues.py epilogue_norms)."""
    produced = {v: n for n in members for v in n.outputs}
    reduces = [n for n in members if n.op == "reduce"]

    def ancestors(v):
        seen, stack = set(), [v]
        while stack:
            w = stack.pop()
            n = produced.get(w)
            if n is None or n in seen:
                continue
            seen.add(n)
            stack += list(n.inputs)
        return seen

    groups: list[list] = []
    for r in reduces:
        above = ancestors(r.inputs[0])
        for grp in groups:
            if any(q in above for q in grp):
                grp.append(r)
                break
        else:
            groups.append([r])
    lhs_deps = ancestors(anchor.inputs[0]) if anchor is not None and anchor.inputs else set()
    return [(grp, any(r in lhs_deps for r in grp)) for grp in groups]


def _norm_pass(b, reduces, kshape, K, mshape, M, tile_m, rs):
    """(norm_row_stats.part for one norm, the row values it leaves in `rs`, in order)."""
    shape = reduces[0].inputs[0].shape
    stats = frontier(b.members, shape, reduces)
    em_row: Emitter = b.emitter(indent=3)
    kept = unravel(em_row, "am", mshape, "nr_")
    pair = one_pass_pair(b.members, reduces, b.graph.constants)
    if pair is not None:
        phases = [_one_pass_phase(b, pair, kept, kshape, K)]
        overrides = {pair[0].outputs[0]: "nred0", pair[1].outputs[0]: "nred1"}
        b.norm_phases.append(list(reduces))
    else:
        phases, overrides = _reduce_phases(b, reduces, kept, kshape, K)
        b.norm_phases += [[r] for r in reduces]
    em: Emitter = b.emitter(indent=3, overrides=overrides)
    for i, v in enumerate(stats):
        val = em.value(v, kept + ["0"] * (v.type.rank - len(kept)))
        em.emit(f"if ((threadIdx.x & 31) == 0) {rs}[{i}][aotc_r] = {val};")
    code = instantiate("norm_row_stats.part", dict(
        rs=rs, nstats=len(stats), tile_m=tile_m, idx_t=b.idx_t, m=M, row_index=em_row.text(),
        phases="\n".join(phases), stats=em.text()), indent=2)
    return code, stats


def _reduce_phases(b, reduces, kept, kshape, K):
    """(one reduce_phase.part per reduction, each a read of the row; overrides naming their results)."""
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
    return phases, overrides


def one_pass_pair(members, reduces, constants=None):
    """(sum reduce, squared-deviation reduce, x, center) when the norm's reductions are LayerNorm's two
    phases: sum(x) and sum(d * d) (or sum(d ** 2)) with d = x - center, where center is computed from
    the first sum alone (the mean, broadcast back over the row); else None."""
    if len(reduces) != 2:
        return None
    r0, r1 = reduces
    if {r0.attrs["kind"], r1.attrs["kind"]} != {"sum"} or tuple(r0.attrs["axes"]) != tuple(r1.attrs["axes"]):
        return None
    produced = {v: n for n in members for v in n.outputs}
    sq = produced.get(r1.inputs[0])
    if sq is None or not (sq.op == "mul" and sq.inputs[0] is sq.inputs[1] or
                          sq.op == "pow" and _is_two(sq.inputs[1], produced, constants or {})):
        return None
    sub = produced.get(sq.inputs[0])
    x = r0.inputs[0]
    if sub is None or sub.op != "sub" or sub.inputs[0] is not x:
        return None
    center = sub.inputs[1]
    return (r0, r1, x, center) if _from_sum_alone(center, r0.outputs[0], produced, x.type.size) else None


def _from_sum_alone(center, total, produced, full: int) -> bool:
    """`center` is computed from `total` (and constants), broadcast back: no other full-size value on the way."""
    seen, stack, reached = set(), [center], False
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v is total:
            reached = True
            continue
        node = produced.get(v)
        if node is None:
            if v.type.size > 1:       # a tensor input: not a function of the sum alone
                return False
            continue
        if v is not center and v.type.size >= full:
            return False
        stack += list(node.inputs)
    return reached


def _is_two(v, produced, constants) -> bool:
    """`v` is the constant 2 (maybe broadcast)."""
    node = produced.get(v)
    while node is not None and node.op == "broadcast_in_dim":
        v = node.inputs[0]
        node = produced.get(v)
    c = constants.get(v)
    return c is not None and c.size == 1 and float(c.reshape(-1)[0]) == 2.0


def _one_pass_phase(b, pair, kept, kshape, K) -> str:
    """norm_welford.part for `pair` (one_pass_pair): nred0 = sum(x), nred1 = sum((x - center)^2)."""
    r0, _, x, center = pair
    em: Emitter = b.emitter(indent=5)
    value = em.value(x, kept + unravel(em, "c", kshape, "nw_"))
    em_s: Emitter = b.emitter(indent=5)
    shift = em_s.value(x, kept + ["0"] * len(kshape))          # the row's first element
    em_c: Emitter = b.emitter(indent=5, overrides={r0.outputs[0]: "nred0"})
    mean = em_c.value(center, kept + ["0"] * len(kshape))
    return instantiate("norm_welford.part", dict(
        sum="nred0", sq="nred1", idx_t=b.idx_t, extent=K, load=em.text(), value=value, shift_load=em_s.text(),
        shift=shift, center_load=em_c.text(), center=mean), indent=6)


def _identity(kind: str) -> str:
    return {"sum": "0.0f", "max": "(-AOTC_INF)", "min": "AOTC_INF"}[kind]

