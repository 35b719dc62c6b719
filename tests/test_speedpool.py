"""The app's comparison with plain decoding pools short runs side by side (core/speedpool.py)."""

from __future__ import annotations

import pytest

from specdesk.core.speedpool import SpeedPool


def _run(pool: SpeedPool, plain_s: float, spec_s: float, tokens: int = 24) -> list[str]:
    order = []
    while (nxt := pool.next_run()) is not None:
        order.append(nxt)
        pool.add(nxt == "plain", tokens, plain_s if nxt == "plain" else spec_s)
    return order


def test_a_short_reply_is_compared_on_new_runs_alternating_up_to_the_cap():
    pool = SpeedPool(reply_tokens=24, reply_s=0.2)  # the reply itself (it drew its text as it came) is not counted
    assert _run(pool, 0.1, 0.08) == ["plain", "spec"] * 8  # 0.8 and 0.64 s after 8 runs each: the cap
    assert pool.pooled and pool.plain_runs == pool.spec_runs == 8
    assert pool.speedup == pytest.approx((192 / 0.64) / (192 / 0.8))


def test_the_comparison_ends_once_both_sides_pooled_enough():
    pool = SpeedPool(reply_tokens=200, reply_s=0.7)
    assert _run(pool, 0.6, 0.45, tokens=200) == ["plain", "spec"] * 3  # 1.8 / 1.35 s: both past a second
    assert pool.spec_tps == pytest.approx(600 / 1.35) and pool.plain_tps == pytest.approx(600 / 1.8)


def test_a_long_reply_is_compared_with_one_plain_run():
    pool = SpeedPool(reply_tokens=600, reply_s=2.0)
    assert not pool.pooled and _run(pool, 2.5, 0.0, tokens=600) == ["plain"]
    assert pool.speedup == pytest.approx(300 / 240)
    assert SpeedPool(10, 0.0).speedup is None  # nothing run yet


def test_a_speedup_the_reply_cannot_have_is_measured_again_side_by_side():
    """A long reply of 1.03 tokens a pass beside one plain run that met a busy neighbour (7.4x: the app showed
    that once): not believed; both sides run again, alternating, at least twice each."""
    pool = SpeedPool(reply_tokens=128, reply_s=1.5, tokens_per_pass=1.03)
    order = []
    plain_times = iter([11.1, 1.6, 1.6])  # the first plain run 7.4x slower than the reply, then the machine's pace
    while (nxt := pool.next_run()) is not None:
        order.append(nxt)
        pool.add(nxt == "plain", 128, next(plain_times) if nxt == "plain" else 1.5)
    assert order == ["plain", "plain", "spec", "plain", "spec"]
    assert pool.remeasured and pool.plain_runs == pool.spec_runs == 2
    assert pool.speedup == pytest.approx(3.2 / 3.0) and not pool.implausible()
    # believable at once: one plain run, as before
    ok = SpeedPool(reply_tokens=128, reply_s=1.5, tokens_per_pass=2.0)
    assert _run(ok, 2.4, 0.0, tokens=128) == ["plain"] and not ok.remeasured  # 1.6x with 2 tokens a pass
