"""Delta debugging (Zeller's ddmin): a small sub-list for which a test still holds.

`ddmin(items, test)` starts from a list for which `test` holds and splits it into n
chunks: a chunk that holds on its own replaces the list (n back to 2), else the list
without one chunk that holds does (n shrinks by one), else n doubles, until n passes the
list's length. The result is 1-minimal: removing any one item breaks the test (unless
the budget ran out first). Sub-lists keep the items' order, so a sub-list of nodes in
graph order is in graph order.

reduce.py uses it over a model's nodes ("still fails"), bisect.py over the nodes kept
in f32 ("still meets the tolerance"). Each distinct sub-list is tested once; `budget`
bounds the tests run, and `on_round(size, tests)` hears about every reduction.
"""
from __future__ import annotations

from typing import Callable, Sequence


class _Spent(Exception):
    pass


def _chunks(items: list, n: int) -> list[list]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def ddmin(items: Sequence, test: Callable[[list], bool], *, budget: int | None = None,
          on_round: Callable[[int, int], None] | None = None) -> tuple[list, int]:
    """(a 1-minimal sub-list of `items` for which `test` holds, tests run); `test(items)` is assumed to hold."""
    pool = list(items)
    seen: dict[tuple, bool] = {}
    count = 0

    def holds(positions: list[int]) -> bool:
        nonlocal count
        key = tuple(positions)
        if key not in seen:
            if budget is not None and count >= budget:
                raise _Spent
            count += 1
            seen[key] = bool(test([pool[i] for i in positions]))
        return seen[key]

    kept, n = list(range(len(pool))), 2
    try:
        while len(kept) >= 2:
            chunks = _chunks(kept, n)
            reduced = next((c for c in chunks if holds(c)), None)
            if reduced is not None:
                kept, n = reduced, 2
            elif len(chunks) > 2:       # with 2 chunks the complements are the chunks themselves
                for c in map(set, chunks):
                    rest = [i for i in kept if i not in c]
                    if holds(rest):
                        reduced, kept, n = rest, rest, max(n - 1, 2)
                        break
            if reduced is not None:
                if on_round:
                    on_round(len(kept), count)
                continue
            if n >= len(kept):
                break
            n = min(len(kept), 2 * n)
    except _Spent:
        pass
    return [pool[i] for i in kept], count


__all__ = ["ddmin"]
