"""Adaptive k: choose the number of draft tokens each step to maximise expected tokens per second.

Model (Leviathan et al. 2023, section 3.3): with per-token acceptance probability a, a step that drafts
k tokens emits E(k) = (1 - a^(k+1)) / (1 - a) tokens and costs k * c_draft + verify(k + 1), where
verify(m) = v0 + v1 * m is the target's cost for m positions (on a GPU nearly flat in m, on a CPU
clearly not). Plain decoding is k = 0: one token for verify(1). The controller estimates a, c_draft,
v0 and v1 online from the steps it sees (exponentially forgetting old steps, so a change of text
regime is followed within tens of steps) and picks argmax_k E(k) / cost(k).

When no k > 0 pays, it decodes plainly and drafts a short probe now and then (at growing intervals)
to notice when speculation starts paying again, so it is never much slower than plain decoding.
Acceptance is estimated as successes / trials, where a step with n accepted out of k counts n
successes and, when n < k, one failure (draft tokens after the first rejection are never judged).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Decayed:
    """Exponentially decayed running sums (weight halves every ``half_life`` observations)."""

    half_life: float
    w: float = 0.0
    sums: tuple[float, ...] = ()

    def add(self, *values: float) -> None:
        keep = 0.5 ** (1.0 / self.half_life)
        if not self.sums:
            self.sums = tuple(0.0 for _ in values)
        self.w = self.w * keep + 1.0
        self.sums = tuple(s * keep + v for s, v in zip(self.sums, values))


class AdaptiveK:
    """A k controller for the decode loop: ``choose()`` before a step, ``observe(...)`` after it."""

    def __init__(self, k_max: int = 12, k_init: int = 4, prior_acceptance: float = 0.6,
                 half_life: float = 24.0, probe_k: int = 2, probe_every: int = 16, probe_max: int = 128) -> None:
        self.k_max = k_max
        self.k_init = k_init
        self.probe_k = probe_k
        self.probe_min, self.probe_max = probe_every, probe_max
        self.probe_every = probe_every
        # acceptance: decayed successes / trials, seeded with a weak prior of 4 trials
        self.acc = _Decayed(half_life, w=1.0, sums=(prior_acceptance * 4, 4.0))
        # draft cost per drafted token
        self.draft = _Decayed(half_life)
        # verify cost regression on m = positions verified: sums of (1, m, m^2, v, m*v)
        self.verify = _Decayed(half_life * 2)
        self.plain_streak = 0
        self.steps = 0
        self.last_choice = k_init
        self.history: list[int] = []  # chosen k per step (for inspection and tests)

    # ------------------------------------------------------------------ estimates

    @property
    def acceptance(self) -> float:
        s, t = self.acc.sums
        return min(0.999, max(0.0, s / t)) if t > 0 else 0.0

    @property
    def draft_cost(self) -> float | None:
        if not self.draft.sums or self.draft.sums[1] <= 0:
            return None
        return self.draft.sums[0] / self.draft.sums[1]  # seconds per drafted token

    def verify_cost(self, m: int) -> float | None:
        if not self.verify.sums:
            return None
        n, sm, smm, sv, smv = self.verify.sums
        mean_m, mean_v = sm / n, sv / n
        var = smm / n - mean_m * mean_m
        if var > 0.05:
            slope = max(0.0, (smv / n - mean_m * mean_v) / var)
        else:
            slope = 0.05 * mean_v / max(mean_m, 1.0)  # one k seen so far: assume a mild growth with m
        intercept = max(mean_v - slope * mean_m, 0.2 * mean_v)
        return intercept + slope * m

    def expected_tokens(self, k: int, a: float | None = None) -> float:
        a = self.acceptance if a is None else a
        return float(k + 1) if a >= 0.999 else (1.0 - a ** (k + 1)) / (1.0 - a)

    def rate(self, k: int) -> float | None:
        """Predicted tokens per second for drafting k tokens per step."""
        v = self.verify_cost(k + 1)
        c = self.draft_cost if k > 0 else 0.0
        if v is None or c is None:
            return None
        return self.expected_tokens(k) / (k * c + v)

    def best_k(self) -> int:
        rates = [(self.rate(k), k) for k in range(0, self.k_max + 1)]
        known = [(r, k) for r, k in rates if r is not None]
        if not known:
            return self.k_init
        return max(known)[1]

    # ------------------------------------------------------------------ controller protocol

    def choose(self) -> int:
        self.steps += 1
        if self.draft_cost is None:  # nothing measured yet: draft to learn the costs
            k = self.k_init
        else:
            k = self.best_k()
            if k == 0:
                self.plain_streak += 1
                if self.plain_streak >= self.probe_every:
                    self.plain_streak = 0
                    self.probe_every = min(self.probe_max, self.probe_every * 2)
                    k = self.probe_k
            else:
                self.plain_streak = 0
                self.probe_every = self.probe_min
        self.last_choice = k
        self.history.append(k)
        return k

    def observe(self, k: int, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        self.verify.add(1.0, drafted + 1.0, (drafted + 1.0) ** 2, verify_s, (drafted + 1.0) * verify_s)
        if drafted > 0:
            failures = 1.0 if accepted < drafted else 0.0
            self.acc.add(float(accepted), accepted + failures)
            self.draft.add(draft_s, float(drafted))

    def reset_acceptance(self, keep: float = 0.25) -> None:
        """A new prompt: keep the cost model (a property of the machine), mostly forget acceptance."""
        self.acc.sums = tuple(s * keep for s in self.acc.sums)
