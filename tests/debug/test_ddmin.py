"""ddmin: a 1-minimal sub-list that keeps the test holding, in order, within a budget."""
from aotc.debug.ddmin import ddmin


def test_single_culprit_in_few_tests():
    kept, tests = ddmin(list(range(80)), lambda s: 37 in s)
    assert kept == [37] and tests <= 16


def test_two_culprits_keep_order():
    kept, _ = ddmin([f"n{i}" for i in range(50)], lambda s: "n3" in s and "n44" in s)
    assert kept == ["n3", "n44"]


def test_result_is_one_minimal():
    test = lambda s: sum(s) >= 20          # noqa: E731
    kept, _ = ddmin(list(range(10)), test)
    assert test(kept) and all(not test(kept[:i] + kept[i + 1:]) for i in range(len(kept)))


def test_budget_bounds_tests_and_keeps_the_best_so_far():
    calls = []

    def test(s):
        calls.append(len(s))
        return 3 in s and 70 in s
    kept, tests = ddmin(list(range(80)), test, budget=4)
    assert tests == 4 == len(calls) and 3 in kept and 70 in kept


def test_each_sub_list_tested_once_and_rounds_reported():
    seen, rounds = [], []

    def test(s):
        seen.append(tuple(s))
        return 5 in s
    ddmin(list(range(12)), test, on_round=lambda size, n: rounds.append(size))
    assert len(seen) == len(set(seen))
    assert rounds == sorted(rounds, reverse=True) and rounds[-1] == 1
