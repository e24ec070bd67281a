"""Liveness-based memory plan: every intermediate gets an offset in one arena.

A buffer is live from the launch that writes it to the last launch that
reads it. Buffers are placed largest first at the lowest aligned offset that
overlaps no placed buffer with an overlapping live range (greedy best-fit
by offset, as TFLite's and XLA's heap simulators do). The lower bound is the
largest total size of buffers live at one step: no plan can be smaller.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

ALIGN = 256


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class Buffer:
    key: Hashable
    size: int
    first: int     # step that writes it
    last: int      # last step that reads it (>= first)


@dataclass
class MemoryPlan:
    offsets: dict
    size: int
    lower_bound: int

    @property
    def ratio(self) -> float:
        return self.size / self.lower_bound if self.lower_bound else 1.0


def plan_memory(buffers: list[Buffer], align: int = ALIGN) -> MemoryPlan:
    placed: list[tuple[int, int, Buffer]] = []      # (offset, end, buffer)
    offsets = {}
    order = sorted(buffers, key=lambda b: (-align_up(b.size, align), b.first, str(b.key)))
    for b in order:
        size = align_up(max(b.size, 1), align)
        conflicts = sorted((o, e) for o, e, p in placed if p.first <= b.last and b.first <= p.last)
        offset = 0
        for o, e in conflicts:
            if offset + size <= o:
                break
            offset = max(offset, align_up(e, align))
        placed.append((offset, offset + size, b))
        offsets[b.key] = offset
    total = max((e for _, e, _ in placed), default=0)
    return MemoryPlan(offsets, total, lower_bound(buffers, align))


def lower_bound(buffers: list[Buffer], align: int = ALIGN) -> int:
    steps = sorted({b.first for b in buffers} | {b.last for b in buffers})
    best = 0
    for t in steps:
        best = max(best, sum(align_up(max(b.size, 1), align) for b in buffers if b.first <= t <= b.last))
    return best
