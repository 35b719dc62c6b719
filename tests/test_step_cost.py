"""Per-step Python work does not grow with the context length.

Counted, not timed: the number of Python function calls one decode step makes (sys.setprofile) is the
same after a short and a long prompt, for each drafter.
"""

from __future__ import annotations

import sys

import pytest

from specdesk.core.events import StepEvent


def calls_per_step(engine, prompt_ids, drafter: str, steps: int = 6) -> list[int]:
    counts: list[int] = []
    n = [0]

    def prof(frame, event, arg):
        if event == "call":
            n[0] += 1

    gen = engine.stream(prompt_ids, drafter=drafter, k=3, max_new_tokens=40)
    next(gen)  # the PrefillEvent, not counted
    next(gen)  # nor the first step: it can fill Python's one-off caches (abc's subclass checks)
    for _ in range(steps):
        n[0] = 0
        sys.setprofile(prof)
        ev = next(gen)
        sys.setprofile(None)
        if isinstance(ev, StepEvent):
            counts.append((n[0], ev.drafted, ev.accepted))
    gen.close()
    return counts


@pytest.mark.parametrize("drafter", ["model", "ngram", "none"])
def test_python_calls_per_step_do_not_depend_on_context(tiny_engine, drafter):
    base = tiny_engine.encode("for i in range(10):\n    print(i)\n")
    short = base * 2
    long = base * 40  # 20x longer context, and 20x more n-grams in the lookup table
    assert len(long) > 400
    a = calls_per_step(tiny_engine, short, drafter)
    b = calls_per_step(tiny_engine, long, drafter)
    # compare steps that did the same work (same drafted / accepted counts)
    by_shape_a = {(d, acc): c for c, d, acc in a}
    same = [(by_shape_a[(d, acc)], c) for c, d, acc in b if (d, acc) in by_shape_a]
    assert same, (a, b)
    for ca, cb in same:
        assert abs(ca - cb) <= 0.02 * ca + 5, (drafter, a, b)
