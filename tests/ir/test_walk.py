"""The shared worklist walk: each item once, depth first, a rule can read what was found so far."""
from aotc.ir.graph import GraphBuilder
from aotc.ir.walk import producers_of, users_of, walk


def test_each_item_once_depth_first():
    edges = {1: [2, 3], 2: [4], 3: [4, 1], 4: []}
    assert walk([1], edges.__getitem__) == [1, 2, 3, 4]
    seen = []
    walk([1], lambda n: seen.append(n) or edges[n])
    assert seen == [1, 3, 4, 2]                      # last found, first taken; 4 is taken once


def test_found_is_shared_and_starts_are_walked_anyway():
    edges = {1: [2], 2: [3], 3: []}
    found = {1, 3}
    assert walk([1], edges.__getitem__, found) == [1, 2] and found == {1, 2, 3}


def test_a_rule_sees_items_found_earlier_in_the_same_step():
    found = set()

    def step(n):               # "b" joins only once "a" is found: yielded in the same step, "a" counts
        for m in ("a", "b") if n == "start" else ():
            if m == "a" or "a" in found:
                yield m

    assert walk(["start"], step, found) == ["start", "a", "b"]


def test_producers_and_users_of_values():
    b = GraphBuilder()
    x = b.input("x", (3,))
    e = b.add("exp", x)
    t = b.add("tanh", e)
    graph = b.build([b.add("add", e, t)])
    producer, users = graph.producers(), graph.users()
    (add,) = [n for n in graph.nodes if n.op == "add"]
    assert [n.op for n in producers_of(producer, add.inputs)] == ["exp", "tanh"]
    assert list(producers_of(producer, [x])) == []
    assert sorted(n.op for n in users_of(users, [e])) == ["add", "tanh"]
    ups = walk([add], lambda n: producers_of(producer, n.inputs))
    assert [n.op for n in ups] == ["add", "exp", "tanh"]
