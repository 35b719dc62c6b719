"""Is drafting paying off in this reply? The acceptance at which it breaks even, from this pair's measured costs.

A step that drafts m tokens costs m * c_draft + verify(m + 1) seconds and emits 1 + (accepted) tokens;
plain decoding costs verify(1) per token. Over a reply's n drafting steps (m_j tokens drafted in step j),
drafting is as fast as plain decoding when

    n + acceptance * sum(m_j) = sum(cost(m_j)) / verify(1),

so the break-even acceptance (accepted / drafted, the figure the app shows) is
(sum(cost(m_j)) / verify(1) - n) / sum(m_j). With every step drafting k tokens this is
(k * c_draft + verify(k + 1) - verify(1)) / (k * verify(1)): the "~40%" rule of thumb is one value of it,
and on a GPU, where verify(k + 1) is close to verify(1), prompt lookup (c_draft ~ 0) breaks even near 0.

The costs are the adaptive controller's model (:class:`specdesk.core.adaptive.AdaptiveK`: seconds per
drafted token and per verify pass of m positions, each a line in the context length), fed here with the
steps' own timings and predicted at the reply's current context. Plain decoding's cost is learnt from any
step that drafted nothing (k = auto's plain steps, prompt lookup finding no match, Compare with plain
decoding); until one is seen it is taken as no cheaper than the smallest verify pass seen, which puts
the break-even lower (no false alarm from a guess).
"""

from __future__ import annotations

from dataclasses import dataclass

from specdesk.core.adaptive import AdaptiveK
from specdesk.core.pairing import HYBRID, PHRASES

MIN_STEPS = 12  # drafting steps of a reply before it is judged
MIN_DRAFTED = 24  # drafted tokens before it is judged
SLOW_MARGIN = 0.03  # the alarm needs the reply predicted at least this much slower than plain decoding
CLEAR_MARGIN = 0.03  # a raised alarm clears once acceptance is this far above the break-even


@dataclass(frozen=True)
class Payoff:
    """The verdict on one reply so far (drafting steps only: a step that drafted nothing cost plain decoding)."""

    drafter: str
    steps: int
    drafted: int
    accepted: int
    acceptance: float  # accepted / drafted
    break_even: float  # the acceptance at which these steps would be exactly as fast as plain decoding
    predicted_speedup: float  # predicted time of plain decoding for these tokens / predicted time of these steps
    plain_measured: bool  # verify(1) was measured on this pair (else assumed no cheaper than the smallest seen)
    slowing: bool  # the alarm (see PayoffMonitor.verdict)
    reply_speedup: float = 1.0  # the whole reply so far, its plain steps (no draft) counted at plain speed
    k: int = 0  # the most frequent number of tokens drafted per step
    draft_ms: float = 0.0  # predicted costs at the reply's context: one drafted token,
    verify_ms: float = 0.0  # a verify pass over k + 1 positions,
    plain_ms: float = 0.0  # a plain decoding step

    @property
    def mean_k(self) -> float:
        return self.drafted / self.steps if self.steps else 0.0


class PayoffMonitor:
    """Feed it every step of every generation on one loaded pair; ask it about the current reply.

    One cost model per drafter (a draft model costs milliseconds per token, prompt lookup microseconds);
    steps that drafted nothing teach every drafter's model the cost of plain decoding, which is the
    target's alone. A "model+lookup" reply's steps are each one or the other (StepEvent.lookup), and are
    judged together, each priced by its own.
    """

    def __init__(self, drafters: tuple[str, ...] = ("model", "ngram")) -> None:
        self.costs = {name: AdaptiveK() for name in drafters}
        self.drafter: str | None = None
        self._counts: dict[tuple[str, int], int] = {}  # this reply: drafting steps by (cost model, tokens drafted)
        self.accepted = 0
        self.plain_steps = 0  # this reply's steps that drafted nothing
        self.context = 0
        self.alarm = False

    def begin(self, drafter: str) -> None:
        """A new reply with ``drafter`` ("model", "model+lookup", "phrases", "ngram" or "none")."""
        for ctl in self.costs.values():  # a new prompt's first passes run slow (its prefill had the CPU's cache):
            ctl.reset_acceptance()  # not plain decoding's cost (AdaptiveK.PLAIN_SETTLE); acceptance is unused here
        self.drafter = drafter
        self._counts = {}
        self.accepted = 0
        self.plain_steps = 0
        self.alarm = False

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float, context_len: int,
                setup_s: float = 0.0, lookup: bool = False) -> None:
        """One step of the current reply (any generation on this pair: plain runs teach the plain cost).
        ``setup_s``: seconds of ``draft_s`` the draft spent catching up (StepEvent.setup_s): such a step's costs
        are not drafting's (a reply's first drafted step read its prompt: 2.4 ms a drafted token where drafting
        costs 0.4, q4 SmolLM2; learnt as drafting's, the banner called a 1.15x reply 0.94x). ``lookup``: the tokens
        were prompt lookup's (StepEvent.lookup), priced as prompt lookup's."""
        self.context = context_len
        if drafted <= 0:
            for ctl in self.costs.values():
                ctl.observe(0, 0, 0, 0.0, verify_s, context_len)
            self.plain_steps += 1
            return
        name = self.drafter or ""
        if name == HYBRID:
            name = "ngram" if lookup else "model"
        elif name == PHRASES:  # no model either: priced as prompt lookup's (microseconds a proposal)
            name = "ngram"
        ctl = self.costs.get(name)
        if ctl is None:
            return
        ctl.observe(drafted, drafted, accepted, draft_s, verify_s, context_len, setup_s=setup_s)
        key = (name, drafted)
        self._counts[key] = self._counts.get(key, 0) + 1
        self.accepted += accepted

    def break_even(self, counts: dict[tuple[str, int], int], context_len: int) -> tuple[float, float] | None:
        """For steps drafting m tokens with drafter ``name`` ``counts[name, m]`` times, at ``context_len``: (the
        break-even acceptance, their predicted time in units of one plain decoding step); None while a cost is
        unknown."""
        n = sum(counts.values())
        tokens = sum(m * c for (_, m), c in counts.items())
        spent = 0.0
        for (name, m), c in counts.items():
            ctl = self.costs.get(name)
            if ctl is None:
                return None
            ctl.context = context_len
            plain = ctl.step_cost(0) or 0.0  # every cost model learns it from the same plain steps
            cost = ctl.step_cost(m)
            if cost is None or not plain:
                return None
            spent += c * cost / plain
        return (spent - n) / tokens, spent

    def verdict(self) -> Payoff | None:
        """The current reply's payoff, or None before it has drafted enough to judge (or with no drafter).

        The alarm (``slowing``) rises when acceptance is under the break-even and the whole reply, its
        plain steps included, is predicted at least 3% slower than plain decoding (so k = auto's short
        probes between plain steps raise none); it falls once acceptance is 3 points over the break-even.
        """
        n = sum(self._counts.values())
        drafted = sum(m * c for (_, m), c in self._counts.items())
        if n < MIN_STEPS or drafted < MIN_DRAFTED:
            return None
        got = self.break_even(self._counts, self.context)
        if got is None:
            return None
        break_even, plain_steps = got
        acceptance = self.accepted / drafted
        # the whole reply: its plain steps ran at plain speed (k = auto decoding plainly between probes)
        reply = (n + self.accepted + self.plain_steps) / (plain_steps + self.plain_steps)
        if acceptance < break_even and reply < 1.0 - SLOW_MARGIN:
            self.alarm = True
        elif acceptance >= break_even + CLEAR_MARGIN:
            self.alarm = False
        name, k = max(self._counts, key=lambda key: (self._counts[key], key[1]))  # the most frequent step's figures
        ctl = self.costs[name]
        return Payoff(drafter=self.drafter or "", steps=n, drafted=drafted, accepted=self.accepted,
                      acceptance=acceptance,
                      break_even=max(0.0, break_even), predicted_speedup=(n + self.accepted) / plain_steps,
                      plain_measured=ctl.verify[1].seen, slowing=self.alarm, reply_speedup=reply, k=k,
                      draft_ms=1000 * (ctl.draft_cost or 0.0), verify_ms=1000 * (ctl.verify_cost(k + 1) or 0.0),
                      plain_ms=1000 * (ctl.step_cost(0) or 0.0))
