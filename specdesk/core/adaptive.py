"""Adaptive k: choose the number of draft tokens each step to maximise expected tokens per second.

Model (after Leviathan et al. 2023, section 3.3): a step that drafts k tokens emits
E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j tokens, where a_j is the probability that draft token j is accepted
given that tokens 1..j-1 were (with a constant a this is (1 - a^(k+1)) / (1 - a)). Acceptance is bursty in
real text (easy stretches and hard ones), so a_j is estimated per position rather than assumed constant:
a_j = accepted_j / judged_j over recent steps, where a step judges position j when it drafted at least j
tokens and kept the first j-1. A step costs k * c_draft + verify(k + 1); verify(m), the target's cost for
m positions in one pass, is measured per m (on a CPU it jumps from m = 1 to m = 2 and then grows slowly,
on a GPU it is nearly flat), interpolated where a size was not seen. Plain decoding is k = 0: one token for
verify(1). The controller picks argmax_k E(k) / cost(k); estimates forget old steps exponentially so a
change of text regime is followed within tens of steps.

Each a_j is shrunk toward a_{j-1} with a few pseudo-trials, so a position seldom judged looks like its
neighbour instead of like its one unlucky sample; and every twelfth step the controller drafts one token
more than its best guess, so the position just beyond it keeps being measured (without this it settles
on whatever k its first noisy samples favoured; exploring every 6th step by 2 tokens measured 1-5% slower
on the demo pair's short replies). When no k > 0 pays it decodes plainly, drafting a short
probe now and then (at growing intervals) to notice when speculation starts paying again, so it is never
much slower than plain decoding.
"""

from __future__ import annotations


class _Decayed:
    """An exponentially forgetting (weight, sum) pair: a mean whose old samples fade."""

    __slots__ = ("keep", "w", "s")

    def __init__(self, half_life: float, w: float = 0.0, s: float = 0.0) -> None:
        self.keep = 0.5 ** (1.0 / half_life)
        self.w, self.s = w, s

    def add(self, value: float, weight: float = 1.0) -> None:
        self.w = self.w * self.keep + weight
        self.s = self.s * self.keep + value

    @property
    def mean(self) -> float | None:
        return self.s / self.w if self.w > 1e-9 else None


class AdaptiveK:
    """A k controller for the decode loop: ``choose()`` before a step, ``observe(...)`` after it."""

    PSEUDO_TRIALS = 2.0  # strength of the pull of a_j toward a_{j-1}

    def __init__(self, k_max: int = 12, k_init: int = 4, prior_acceptance: float = 0.7,
                 half_life: float = 16.0, probe_k: int = 2, probe_every: int = 16, probe_max: int = 128,
                 explore_every: int = 12, explore_step: int = 1) -> None:
        self.k_max = k_max
        self.k_init = k_init
        self.prior_acceptance = prior_acceptance
        self.explore_every, self.explore_step = explore_every, explore_step
        self.steps = 0
        self.probe_k = probe_k
        self.probe_min, self.probe_max = probe_every, probe_max
        self.probe_every = probe_every
        self.half_life = half_life
        # per-position acceptance, decayed successes / judged, kept apart by the previous step's outcome:
        # state 1 after a step that kept every draft token (an easy stretch tends to go on), else state 0
        self.acc_by_state = [[_Decayed(half_life) for _ in range(k_max + 1)] for _ in range(2)]
        self.state = 0
        self.draft = _Decayed(half_life * 4)  # seconds per drafted token (a property of the machine)
        self.verify = [_Decayed(half_life * 4) for _ in range(k_max + 2)]  # seconds per pass, by positions m
        self.plain_streak = 0
        self.history: list[int] = []  # chosen k per step (for inspection and tests)

    # ------------------------------------------------------------------ estimates

    @property
    def acc(self) -> list[_Decayed]:
        return self.acc_by_state[self.state]

    def acceptances(self, k: int, state: int | None = None) -> list[float]:
        """[a_1 .. a_k] in the current state: P(draft token j accepted | tokens 1..j-1 accepted).

        a_1 is shrunk toward both states' pooled a_1, each later a_j toward a_{j-1}.
        """
        table = self.acc_by_state[self.state if state is None else state]
        p0, p1 = self.acc_by_state[0][1], self.acc_by_state[1][1]
        pooled = (p0.s + p1.s + self.PSEUDO_TRIALS * self.prior_acceptance) / (p0.w + p1.w + self.PSEUDO_TRIALS)
        out, prior = [], pooled
        for j in range(1, k + 1):
            a = table[min(j, self.k_max)]
            prior = (a.s + self.PSEUDO_TRIALS * prior) / (a.w + self.PSEUDO_TRIALS)
            out.append(min(0.995, max(0.0, prior)))
        return out

    def acceptance_at(self, j: int) -> float:
        return self.acceptances(j)[-1]

    @property
    def acceptance(self) -> float:
        return self.acceptance_at(1)

    @property
    def draft_cost(self) -> float | None:
        return self.draft.s / self.draft.w if self.draft.w > 1e-9 and self.draft.s > 0 else None

    def _seen(self) -> list[tuple[int, float]]:
        return [(i, v.s / v.w) for i, v in enumerate(self.verify) if i >= 1 and v.w > 1e-9]

    def verify_cost(self, m: int, seen: list[tuple[int, float]] | None = None) -> float | None:
        """Seconds for a verify pass over m positions: measured, else interpolated / extrapolated."""
        if seen is None:
            seen = self._seen()
        if not seen:
            return None
        for i, c in seen:
            if i == m:
                return c
        below = [(i, c) for i, c in seen if i < m]
        above = [(i, c) for i, c in seen if i > m]
        if below and above:
            (i0, c0), (i1, c1) = below[-1], above[0]
            return c0 + (c1 - c0) * (m - i0) / (i1 - i0)
        if below:  # beyond the largest seen: grow at the observed slope past m = 2 (at least 2% per position)
            multi = [(i, c) for i, c in below if i >= 2]
            i1, c1 = below[-1]
            slope = 0.02 * c1
            if len(multi) >= 2:
                (ia, ca), (ib, cb) = multi[0], multi[-1]
                slope = max(slope, (cb - ca) / (ib - ia))
            return c1 + slope * (m - i1)
        i1, c1 = above[0]  # below the smallest seen (m = 1 before any plain step): assume no cheaper
        return c1

    def expected_tokens(self, k: int, acc: list[float] | None = None) -> float:
        e, run = 1.0, 1.0
        for a in (acc if acc is not None else self.acceptances(k))[:k]:
            run *= a
            e += run
        return e

    def rate(self, k: int, acc: list[float] | None = None) -> float | None:
        """Predicted tokens per second for drafting k tokens per step."""
        v = self.verify_cost(k + 1)
        c = self.draft_cost if k > 0 else 0.0
        if v is None or c is None:
            return None
        return self.expected_tokens(k, acc) / (k * c + v)

    def best_k(self) -> int:
        """argmax_k rate(k) in one pass over k (it runs before every step: ~65 us, was ~150 calling rate per k)."""
        acc = self.acceptances(self.k_max)
        c = self.draft_cost
        seen = self._seen()
        best_r, best = None, self.k_init
        e, run = 1.0, 1.0
        for k in range(self.k_max + 1):
            if k > 0:
                if c is None:
                    break
                run *= acc[k - 1]
                e += run
            v = self.verify_cost(k + 1, seen)
            if v is None:
                break
            r = e / (k * c + v) if k > 0 else e / v
            if best_r is None or r >= best_r:  # ties go to the larger k (as max over (rate, k) did)
                best_r, best = r, k
        return best

    # ------------------------------------------------------------------ controller protocol

    def choose(self) -> int:
        self.steps += 1
        if self.draft_cost is None:
            k = self.k_init  # nothing measured yet: draft, to learn the costs
        elif self.verify[1].mean is None:
            k = 0  # one plain step, to learn what plain decoding costs here
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
                if self.steps % self.explore_every == 0:
                    k = min(self.k_max, k + self.explore_step)
        self.history.append(k)
        return k

    def observe(self, k: int, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        m = min(drafted + 1, len(self.verify) - 1)
        self.verify[m].add(verify_s)
        if drafted <= 0:
            return
        self.draft.add(draft_s, float(drafted))
        table = self.acc
        for j in range(1, min(drafted, self.k_max) + 1):
            if j > accepted + 1:
                break  # positions after the first rejection were never judged
            table[j].add(1.0 if j <= accepted else 0.0)
        self.state = 1 if accepted == drafted else 0

    def reset_acceptance(self, keep: float = 0.25) -> None:
        """A new prompt: keep the cost model (a property of the machine), mostly forget acceptance."""
        for table in self.acc_by_state:
            for a in table:
                a.w *= keep
                a.s *= keep
        self.state = 0
