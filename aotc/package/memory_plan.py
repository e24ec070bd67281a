"""Liveness-based memory plan: every intermediate gets an offset in one arena.

A buffer is live from the launch that writes it to the last launch that
reads it; two buffers live at the same step never overlap, because a kernel
reads its inputs while it writes its output. The one exception is in-place
reuse: a buffer may name (`reuses`) an input of the launch that writes it
whose last read is that launch, and then takes the input's place. The
launch plan only asks for it where it is safe (a pure elementwise map of
that input, same byte size: each thread reads element i before it writes
element i). Chains of such reuses share one slot.

Slots are placed at the lowest aligned offset that overlaps no placed slot
with an overlapping live range (greedy first-fit by offset, as TFLite's and
XLA's heap simulators do); a few orders are tried (largest first, earliest
first, longest-lived first) and the smallest arena wins. The lower bound is
the largest total size of slots live at one step: no plan with the same
reuses can be smaller, so `ratio` says how much the placement wastes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable

from aotc.errors import ModelError

ALIGN = 256

# The most bytes that one tensor, the weights or one context's arena may take:
# the memory of an H200 (about 141 GiB), the largest GPU among aotc's default
# targets (sm_80: A100, 80 GB; sm_90: H100 80 GB, H200). Anything larger cannot
# be resident on one of them, so the compiler refuses it instead of writing an
# engine that fails when it allocates.
DEVICE_MEMORY_LIMIT = 141 * 2**30


def check_fits(what: str, nbytes: int) -> None:
    """ModelError naming `what` if `nbytes` exceeds DEVICE_MEMORY_LIMIT."""
    if nbytes > DEVICE_MEMORY_LIMIT:
        raise ModelError(f"{what} needs {nbytes / 2**30:,.1f} GiB ({nbytes:,} bytes), more than one GPU "
                         f"holds: aotc's limit is {DEVICE_MEMORY_LIMIT >> 30} GiB (an H200's memory)")


def check_graph_fits(graph) -> None:
    """Every tensor of `graph` (inputs, constants, node outputs) and its constants together fit."""
    for v in [*graph.inputs, *graph.constants, *(o for n in graph.nodes for o in n.outputs)]:
        check_fits(f"tensor '{v.name}' {v.type}", v.type.max_nbytes)
    check_fits("the weights (all constants together)",
               sum(math.prod(v.shape) * v.dtype.itemsize for v in graph.constants))


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class Buffer:
    key: Hashable
    size: int
    first: int     # step that writes it
    last: int      # last step that reads it (>= first)
    reuses: Hashable = None   # key of a buffer this one overwrites in place at step `first`


@dataclass
class MemoryPlan:
    offsets: dict
    size: int
    lower_bound: int
    in_place: int = 0          # buffers written over one of their inputs
    zeroed: int = 0            # bytes at the arena's end the runtime zeroes once (split-K tile counters)

    @property
    def ratio(self) -> float:
        return self.size / self.lower_bound if self.lower_bound else 1.0


@dataclass
class _Slot:
    keys: list
    size: int
    first: int
    last: int


def _slots(buffers: list[Buffer], align: int) -> tuple[list[_Slot], int]:
    """Merge in-place chains into slots; returns (slots, number of reuses honoured)."""
    by_key = {b.key: b for b in buffers}
    slot_of: dict = {}
    slots: list[_Slot] = []
    honoured = 0
    claimed: set = set()
    for b in sorted(buffers, key=lambda b: (b.first, b.last)):
        size = align_up(max(b.size, 1), align)
        src = by_key.get(b.reuses) if b.reuses is not None else None
        ok = (src is not None and src.key in slot_of and src.last == b.first and
              align_up(max(src.size, 1), align) == size)
        if ok and src.key not in claimed and slot_of[src.key].last == src.last:
            claimed.add(src.key)      # src is its slot's newest member, overwritten once
            s = slot_of[src.key]
            s.keys.append(b.key)
            s.last = max(s.last, b.last)
            honoured += 1
        else:
            s = _Slot([b.key], size, b.first, b.last)
            slots.append(s)
        slot_of[b.key] = s
    return slots, honoured


def _place(slots: list[_Slot], order) -> tuple[dict, int]:
    placed: list[tuple[int, int, _Slot]] = []
    where: dict[int, int] = {}
    for s in sorted(slots, key=order):
        conflicts = sorted((o, e) for o, e, p in placed if p.first <= s.last and s.first <= p.last)
        offset = 0
        for o, e in conflicts:
            if offset + s.size <= o:
                break
            offset = max(offset, e)
        placed.append((offset, offset + s.size, s))
        where[id(s)] = offset
    return where, max((e for _, e, _ in placed), default=0)


_ORDERS = [
    lambda s: (-s.size, s.first, s.last),                  # largest first
    lambda s: (s.first, -s.size, s.last),                  # earliest first
    lambda s: (-(s.last - s.first), -s.size, s.first),     # longest-lived first
]


def plan_memory(buffers: list[Buffer], align: int = ALIGN) -> MemoryPlan:
    slots, honoured = _slots(buffers, align)
    best = None
    for order in _ORDERS:
        where, total = _place(slots, order)
        if best is None or total < best[1]:
            best = (where, total)
    where, total = best
    check_fits("the activation arena", total)
    offsets = {k: where[id(s)] for s in slots for k in s.keys}
    return MemoryPlan(offsets, total, _bound(slots), honoured)


def _bound(slots: list[_Slot]) -> int:
    steps = sorted({s.first for s in slots} | {s.last for s in slots})
    return max((sum(s.size for s in slots if s.first <= t <= s.last) for t in steps), default=0)


def lower_bound(buffers: list[Buffer], align: int = ALIGN) -> int:
    """The largest total size of slots live at one step (in-place chains merged)."""
    return _bound(_slots(buffers, align)[0])
