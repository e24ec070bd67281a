"""The bytes target per kernel and per model: modelled traffic against the floor of the model's own plan.

A kernel's compulsory traffic is each distinct input byte it needs read once
(a gather needs the rows it picks, a slice the window it keeps, overlapping
slices their union) and each output byte written once. Its modelled traffic
is what aotc's cost model charges (Kernel.bytes: every parameter's touched
bytes, the outputs) plus what the kernel moves on top of that:

- a norm prologue's pre-pass (codegen_norm_prologue.py) reads the normalized
  input once more per reduction phase: one for RMSNorm, one for LayerNorm
  whose mean and variance come from a single Welford pass
  (templates/norm_welford.part; the phases are Kernel.norm_phases), else one
  per reduction;
- split-K partials (split_k.py) are written once and read back once, so the
  f32 workspace counts twice.

The floor of a model's fusion plan is the sum of its kernels' compulsory
traffic: each boundary tensor (a value crossing between kernels, a graph
input, output or weight) written once and read once per consuming kernel, a
partial reader charged only the bytes it needs. The targets:
modelled <= 1.05x that floor per model, and <= 1.1x per kernel, where a
kernel above its bound names why. A conv's halo re-reads and a GEMM's
operand re-reads across tiles hit L2 and are in neither side.

Two of the excesses stay in L2 (L2_RESIDENT): split-K partials (at most
8 MiB a launch, written and read back within it) and a norm prologue's
re-reads (the block's 64 rows, read again just before its main loop reads
them). The HBM figure (KernelTraffic.hbm, PlanTraffic.hbm_ratio) leaves them
out; it is optimistic by the partials' eventual write-back, since L2 writes
back the dirty lines it evicts. Both ratios are printed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aotc.ir.walk import walk
from aotc.kernels.builder import touched_bytes

MODEL_BOUND = 1.05
KERNEL_BOUND = 1.1
SPLIT_PARTIALS = "split-K partials"
NORM_REREAD = "norm prologue re-read"
L2_RESIDENT = (SPLIT_PARTIALS, NORM_REREAD)
_MASK_LIMIT = 1 << 25          # elements: above this a union of windows is bounded by their sum


@dataclass
class KernelTraffic:
    """One kernel's modelled and compulsory bytes, and the modelled excess by cause."""
    name: str
    region: str
    modelled: int
    compulsory: int
    excess: dict[str, int] = field(default_factory=dict)     # reason -> bytes over compulsory

    @property
    def ratio(self) -> float:
        return self.modelled / self.compulsory if self.compulsory else 1.0

    @property
    def hbm(self) -> int:
        """Modelled bytes less the excess that stays in L2 (L2_RESIDENT)."""
        return self.modelled - sum(self.excess.get(r, 0) for r in L2_RESIDENT)

    def why(self) -> str:
        """The causes of the excess, largest first, with their share of compulsory traffic; (L2) marks
        the ones that stay in L2."""
        parts = sorted(((b, r) for r, b in self.excess.items() if b > 0), reverse=True)
        return ", ".join(f"{r}{' (L2)' if r in L2_RESIDENT else ''} +{b / max(self.compulsory, 1):.2f}x"
                         for b, r in parts) or "-"


@dataclass
class PlanTraffic:
    """A model's kernels and its plan's floor."""
    kernels: list[KernelTraffic]

    @property
    def modelled(self) -> int:
        return sum(k.modelled for k in self.kernels)

    @property
    def floor(self) -> int:
        return sum(k.compulsory for k in self.kernels)

    @property
    def ratio(self) -> float:
        return self.modelled / self.floor if self.floor else 1.0

    @property
    def hbm(self) -> int:
        return sum(k.hbm for k in self.kernels)

    @property
    def hbm_ratio(self) -> float:
        """HBM bytes (modelled, less the L2-resident excess) over the floor."""
        return self.hbm / self.floor if self.floor else 1.0

    def ratio_without(self, reason: str) -> float:
        """The plan's ratio if no kernel had the `reason` excess (what the rest of the plan costs)."""
        rest = self.modelled - sum(k.excess.get(reason, 0) for k in self.kernels)
        return rest / self.floor if self.floor else 1.0

    def over(self, bound: float = KERNEL_BOUND) -> list[KernelTraffic]:
        return [k for k in self.kernels if k.ratio > bound]


# -- what a kernel needs of each input: full, windows (slices, slices of slices), gathered rows

def _accesses(source, nodes) -> list:
    """How the region's nodes reach `source`: ("full",), ("box", starts, steps, counts) or ("gather", ...)."""
    rank = source.type.rank
    out = []
    pending = [(source, (0,) * rank, (1,) * rank)]
    while pending:
        v, starts, steps = pending.pop()
        users = [n for n in nodes if v in n.inputs]
        box = ("box", starts, steps, v.shape)
        if v is not source and not users:          # a window the kernel stores as it is
            out.append(box)
        for n in users:
            if n.op == "slice" and n.inputs[0] is v:
                s, k = n.attrs["start"], n.attrs["stride"]
                pending.append((n.outputs[0], tuple(a + b * t for a, b, t in zip(starts, s, steps)),
                                tuple(t * q for t, q in zip(steps, k))))
            elif n.op == "gather" and n.inputs[0] is v and v not in n.inputs[1:] and v is source:
                out.append(("gather", n.attrs["axis"], n.inputs[1]))
            else:
                out.append(box if v is not source else ("full",))
    return out


def needed_bytes(source, nodes, constants=None) -> int:
    """The distinct bytes of `source` that `nodes` read: the union of the windows and rows they reach."""
    constants = constants or {}
    acc = _accesses(source, nodes)
    full = source.type.nbytes
    if not acc or any(a[0] == "full" for a in acc):
        return full
    item = source.dtype.itemsize
    exact = source.type.size <= _MASK_LIMIT and all(a[0] == "box" or a[2] in constants for a in acc)
    if not exact:                                   # runtime indices: each looked-up row counted once
        total = 0
        for a in acc:
            if a[0] == "box":
                total += int(np.prod(a[3], dtype=np.int64)) * item
            else:
                rows = min(a[2].type.size, source.shape[a[1]])
                total += rows * full // max(source.shape[a[1]], 1)
        return min(total, full)
    mask = np.zeros(source.shape, bool)
    for a in acc:
        if a[0] == "box":
            _, starts, steps, counts = a
            mask[tuple(slice(s, s + t * c, t) for s, t, c in zip(starts, steps, counts))] = True
        else:
            axis, idx = a[1], np.asarray(constants[a[2]]).reshape(-1)
            n = source.shape[axis]
            picked = np.unique(np.where(idx < 0, idx + n, idx))
            mask[(slice(None),) * axis + (picked,)] = True
    return int(mask.sum()) * item


def _source_of(kernel, param):
    return kernel.views[param][0] if param in kernel.views else param


def _reason(source, nodes) -> str:
    kinds = {a[0] for a in _accesses(source, nodes)}
    if "gather" in kinds:
        return "gather partial read"
    if "box" in kinds:
        return "slice partial read"
    return "input read twice"


def _prologue_rereads(kernel) -> int:
    """Bytes a GEMM's norm prologue pre-pass reads again: the row inputs once per reduction phase, where a
    one-pass LayerNorm (norm_welford.part) runs its two reductions as one phase."""
    region = kernel.region
    produced = {v: n for n in region.nodes for v in n.outputs}
    params = set(kernel.params[:-1])
    total = 0
    for phase in kernel.norm_phases:        # the params each phase's reductions read, through the region
        reached = walk([r.inputs[0] for r in phase],
                       lambda v: produced[v].inputs if v in produced and v not in params else ())
        total += sum(touched_bytes(v, region.nodes) for v in reached if v in params)
    return total


def _label(region) -> str:
    """`conv: convolution +7 ops -> f32[1,96,56,56]`: the kind, the anchor and the root, short."""
    head = region.anchor.op if region.anchor is not None else (region.nodes[0].op if region.nodes else "copy")
    more = f" +{len(region.nodes) - 1} ops" if len(region.nodes) > 1 else ""
    return f"{region.kind}: {head}{more} -> {region.root.type}"


def kernel_traffic(kernel, constants=None) -> KernelTraffic:
    """Modelled (Kernel.bytes + prologue re-reads + split-K partials) against compulsory bytes."""
    region = kernel.region
    writes = region.root.type.nbytes + sum(v.type.nbytes for v in region.extra_roots)
    sources = list(dict.fromkeys(_source_of(kernel, p) for p in kernel.params[:-1]))
    needed = {s: needed_bytes(s, region.nodes, constants) for s in sources}
    excess: dict[str, int] = {}
    for s in sources:
        charged = sum(touched_bytes(p, region.nodes) for p in kernel.params[:-1] if _source_of(kernel, p) is s)
        if charged != needed[s]:
            reason = _reason(s, region.nodes)
            excess[reason] = excess.get(reason, 0) + charged - needed[s]
    rereads = _prologue_rereads(kernel)
    if rereads:
        excess[NORM_REREAD] = rereads
    if kernel.splits > 1:
        excess[SPLIT_PARTIALS] = 2 * kernel.workspace
    partials = 2 * kernel.workspace if kernel.splits > 1 else 0
    return KernelTraffic(kernel.name, _label(region), kernel.bytes + rereads + partials,
                         sum(needed.values()) + writes, excess)


def plan_traffic(kernels, constants=None) -> PlanTraffic:
    """Every kernel of a compile (CompileResult.kernels, one per launch) against the plan's floor."""
    return PlanTraffic([kernel_traffic(k, constants) for k in kernels])


def reasons_count(plan: PlanTraffic, bound: float = KERNEL_BOUND) -> str:
    """`split-K partials 12, norm prologue re-read 3`: how many kernels above `bound` have each cause."""
    counts: dict[str, int] = {}
    for k in plan.over(bound):
        for r, b in k.excess.items():
            if b > 0:
                counts[r] = counts.get(r, 0) + 1
    return ", ".join(f"{r} {n}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"


def format_kernels(plan: PlanTraffic, bound: float = KERNEL_BOUND, limit: int = 0) -> list[str]:
    """The kernels above `bound`, worst first, alike ones (same region shape and excess) on one line;
    at most `limit` lines when limit > 0."""
    groups: dict[tuple, list[KernelTraffic]] = {}
    for k in sorted(plan.over(bound), key=lambda k: -k.ratio):
        groups.setdefault((round(k.ratio, 2), k.modelled, k.region, k.why()), []).append(k)
    rows = list(groups.items())
    shown = rows[:limit] if limit else rows
    lines = [f"    {len(ks):>3} x {ratio:5.2f}x {modelled / 2**20:8.2f} MiB  {why}  [{region}]"
             for (ratio, modelled, region, why), ks in shown]
    if len(rows) > len(shown):
        lines.append(f"    ... {sum(len(ks) for _, ks in rows[len(shown):])} more kernels")
    return lines


__all__ = ["KernelTraffic", "PlanTraffic", "kernel_traffic", "plan_traffic", "needed_bytes", "format_kernels",
           "reasons_count",
           "MODEL_BOUND", "KERNEL_BOUND", "L2_RESIDENT", "SPLIT_PARTIALS", "NORM_REREAD"]
