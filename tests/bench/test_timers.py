"""The benchmarks' call-by-call timer (``common.alternating_ns``) measures what it is given."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import common


def test_call_by_call_times_each_statement_and_removes_the_clock() -> None:
    ns = {"calls": [], "work": list(range(3000))}
    rounds = common.alternating_ns({"empty": "pass", "sum": "sum(work)", "two": "sum(work); sum(work)"},
                                   ns, number=60, rounds=4, setup="calls.append(1)", typical=True)
    assert set(rounds) == {"empty", "sum", "two"} and all(len(v) == 4 for v in rounds.values())
    assert len(ns["calls"]) == 4  # setup runs before every round, in the caller's namespace
    # the typical call of each round (a stall of the shared 2-core CI host in a few calls moves
    # nothing), and the quietest round of each statement: CI once read 2.93 with round means
    empty, one, two = (min(rounds[k]) for k in ("empty", "sum", "two"))
    assert abs(empty) < 0.2 * one  # the clock's own cost is taken out
    assert 1.5 < two / one < 2.6  # a statement twice the work reads about twice the time


def test_multiline_statements_and_both_orders_run() -> None:
    ns = {"seen": []}
    common.alternating_ns({"a": "seen.append('a')", "b": "x = 1\nseen.append('b')"}, ns, number=2, rounds=2)
    assert ns["seen"] == ["a", "b", "a", "b", "b", "a", "b", "a"]


def test_the_typical_call_ignores_a_stall_in_one_call() -> None:
    ns = {"work": list(range(2000)), "calls": [0], "time": __import__("time")}
    # every 10th call of "stalls" sleeps 5 ms: its mean per call moves by ~0.5 ms, its median not
    stall = "calls[0] += 1\nif calls[0] % 10 == 0: time.sleep(0.005)\nsum(work)"
    typical = common.alternating_ns({"plain": "sum(work)", "stalls": stall}, ns, number=40, rounds=2, typical=True)
    mean = common.alternating_ns({"plain": "sum(work)", "stalls": stall}, ns, number=40, rounds=2)
    assert min(mean["stalls"]) > 300_000 + max(mean["plain"])  # ns
    assert max(typical["stalls"]) < 3 * min(typical["plain"]) + 2_000


def test_an_interlude_runs_untimed_before_every_statement() -> None:
    ns = {"seen": [], "work": list(range(20000))}
    common.alternating_ns({"a": "seen.append('a')", "b": "seen.append('b')"}, ns, number=1, rounds=2,
                          interlude="seen.append('-')")
    # before every statement, the clock's empty one included, in both orders
    assert ns["seen"] == ["-", "a", "-", "b", "-", "-", "-", "b", "-", "a"]
    # a heavy interlude is not in any statement's time
    timed = common.alternating_ns({"small": "sum(work[:100])"}, ns, number=30, rounds=2, typical=True,
                                  interlude="sorted(work, reverse=True)")
    heavy = common.alternating_ns({"heavy": "sorted(work, reverse=True)"}, ns, number=30, rounds=2, typical=True)
    assert max(timed["small"]) < 0.5 * min(heavy["heavy"])
