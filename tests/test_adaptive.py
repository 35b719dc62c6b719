"""Adaptive k: picks the k that maximises expected tokens per second, falls back to plain decoding."""

from __future__ import annotations

import random

from specdesk.core.adaptive import AdaptiveK
from tests.conftest import PROMPTS


def simulate(ctl: AdaptiveK, alpha: float, c_draft: float, v0: float, v1: float, steps: int, seed: int = 0):
    """Feed the controller steps drawn from the i.i.d. acceptance model; return (tokens, seconds)."""
    rng = random.Random(seed)
    tokens = seconds = 0.0
    for _ in range(steps):
        k = ctl.choose()
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        draft_s, verify_s = k * c_draft, v0 + v1 * (k + 1)
        ctl.observe(k, k, n, draft_s, verify_s)
        tokens += n + 1
        seconds += draft_s + verify_s
    return tokens, seconds


def best_fixed_rate(alpha, c_draft, v0, v1, k_max=12):
    def rate(k):
        e = (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1
        return e / (k * c_draft + v0 + v1 * (k + 1))
    return max((rate(k), k) for k in range(k_max + 1))


def test_high_acceptance_cheap_draft_drafts_many():
    ctl = AdaptiveK()
    simulate(ctl, alpha=0.9, c_draft=0.001, v0=0.02, v1=0.001, steps=300)
    best_rate, best_k = best_fixed_rate(0.9, 0.001, 0.02, 0.001)
    tail = ctl.history[-100:]
    assert abs(sum(tail) / len(tail) - best_k) <= 2
    assert abs(ctl.acceptance - 0.9) < 0.08


def test_useless_draft_falls_back_to_plain_and_probes_rarely():
    ctl = AdaptiveK()
    tokens, seconds = simulate(ctl, alpha=0.05, c_draft=0.004, v0=0.02, v1=0.002, steps=600)
    tail = ctl.history[100:]
    probes = sum(1 for k in tail if k > 0)
    assert probes >= 2  # it keeps checking whether speculation started paying
    assert probes / len(tail) < 0.05
    plain_rate = 1 / (0.02 + 0.002)
    assert tokens / seconds > 0.97 * plain_rate


def test_rate_tracks_the_best_fixed_k_within_5_percent():
    for alpha, c_draft, v0, v1 in ((0.8, 0.002, 0.02, 0.003), (0.6, 0.001, 0.015, 0.0005), (0.95, 0.003, 0.03, 0.0)):
        ctl = AdaptiveK()
        simulate(ctl, alpha, c_draft, v0, v1, steps=100, seed=1)  # learn
        tokens, seconds = simulate(ctl, alpha, c_draft, v0, v1, steps=2000, seed=2)
        best_rate, _ = best_fixed_rate(alpha, c_draft, v0, v1)
        assert tokens / seconds > 0.95 * best_rate, (alpha, tokens / seconds, best_rate)


def test_regime_change_is_followed():
    ctl = AdaptiveK()
    simulate(ctl, alpha=0.9, c_draft=0.001, v0=0.02, v1=0.001, steps=200)
    assert ctl.history[-1] >= 4
    simulate(ctl, alpha=0.02, c_draft=0.001, v0=0.02, v1=0.001, steps=200, seed=3)
    assert sum(ctl.history[-50:]) / 50 < 1


def test_auto_k_is_exact_and_reports_its_choices(tiny_engine):
    plain = tiny_engine.generate(PROMPTS[1], max_new_tokens=40, drafter="none")
    auto = tiny_engine.generate(PROMPTS[1], max_new_tokens=40, k="auto")
    assert auto.token_ids == plain.token_ids
    assert all(0 <= s.k <= 12 for s in auto.steps)
    assert tiny_engine._adaptive["model"].draft_cost is not None  # learned costs persist in the engine


def test_best_k_is_the_argmax_of_rate():
    """best_k's one-pass loop picks what max over rate(k) picks (ties to the larger k)."""
    rng = random.Random(5)
    for alpha in (0.1, 0.5, 0.8, 0.97):
        ctl = AdaptiveK()
        for _ in range(150):
            k = ctl.choose()
            n = 0
            while n < k and rng.random() < alpha:
                n += 1
            ctl.observe(k, k, n, 0.002 * k * rng.uniform(0.8, 1.2), (0.01 + 0.001 * k) * rng.uniform(0.8, 1.2))
            acc = ctl.acceptances(ctl.k_max)
            want = max((ctl.rate(j, acc), j) for j in range(ctl.k_max + 1))[1]
            assert ctl.best_k() == want
