"""One worklist walk for the graph searches of fusion and pattern matching.

Every search there is the same loop: start from some nodes or values, take one
off a stack, look at its neighbours (producers, users, inputs), keep the ones a
rule admits, and never take the same one twice. `walk` is that loop; the caller
says what the neighbours are and which to keep by the items its `step` yields.

Depth first, last found first taken. An item counts as found when `step`
yields it, and `step` is read lazily, so a rule that asks "is this user already
found?" sees the items found earlier in the same step.
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

T = TypeVar("T", bound=Hashable)


def walk(starts: Iterable[T], step: Callable[[T], Iterable[T]], found: set | None = None) -> list[T]:
    """Every item reachable from `starts` through `step`, each once, in the order found (starts first).

    `found`, if given, is updated in place and may hold items already found (or to
    pass by): the caller's rule can read it while the walk runs. The starts are
    walked even when `found` already holds them (a region growing from its members).
    """
    found = set() if found is None else found
    order: list[T] = list(dict.fromkeys(starts))
    found.update(order)
    stack = list(order)
    while stack:
        for item in step(stack.pop()):
            if item not in found:
                found.add(item)
                order.append(item)
                stack.append(item)
    return order


def producers_of(producer, values: Iterable) -> Iterable:
    """The nodes producing `values` (graph inputs and constants have none)."""
    for v in values:
        p = producer.get(v)
        if p is not None:
            yield p


def users_of(users, values: Iterable) -> Iterable:
    """The nodes reading `values`."""
    for v in values:
        yield from users.get(v, [])
