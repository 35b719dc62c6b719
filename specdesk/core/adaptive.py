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

Both costs grow with the context: every drafted token and every verified position attends over all
earlier ones (demo pair on 2 CPU cores, ~1,250 tokens against ~100: draft 1.8 -> 2.8 ms per token,
verify of 7 positions 16 -> 20 ms, of 1 position 13 -> 14.5 ms). Costs learnt on short prompts would
make a long one look cheap to draft for, so each cost is a line in the context length, fitted by
exponentially forgetting least squares, and predicted at the current length. The slope is shrunk toward
zero until samples span a few hundred positions (one reply's own growth is too little to tell a slope
from noise), and is never negative.

With a draft model, the draft's own probability p of each token it proposes says more about that token
than any average: :meth:`AdaptiveK.plan` lets it draft up to k_max tokens and stop as soon as one more
does not pay. After j tokens, with S_j the chance that all j pass and a_{j+1} the next position's
acceptance, drafting on to length j' > j adds S_j * (a_{j+1} + a_{j+1} a_{j+2} + ...) expected tokens for
(j' - j) c_draft + verify(j' + 1) - verify(j + 1) seconds; it goes on while some j' gives a marginal rate at
least the best fixed-k rate the model predicts (stopping when the marginal return falls under the average
one). Looking past j + 1 matters where verify costs come in steps: q4's int4 kernel takes rows in tiles of 4,
so 2-4 positions cost little more than 2 and 5 as much as 8 (a least-squares slope, used before, priced every
position at the average and stopped q4 drafts after one token). Each drafted token's chance
of passing combines two estimates in log-odds: its position's acceptance a_j in the current stretch of
text, moved by how the acceptance learnt for tokens like it differs from the calibration's average.
"Like it" is first what the text's own repetition says: prompt lookup's continuation of the context
(the hint: microseconds per step) either agrees with the drafted tokens so far, or the token
departs from it, or there is none; then its draft probability p, in bins. p alone pools all the text
seen: when a reply loops, the demo draft stays unsure (p < 0.1) of tokens that all pass, and drafts cut
by p alone stayed 2 tokens long where fixed k = 6 took half the steps. The hint tells those tokens apart:
over every position of the bench's greedy replies, drafted tokens that agree with it passed 96% of the
time (95% of those with p < 0.3), tokens that depart from it 19%, tokens with no hint 76%. The hint's
worth belongs to the text (a long prompt's code can be repeated by the draft and not by the target), so
its states forget as fast as a_j and mostly reset per prompt; the calibration without a hint is the
draft model's and is kept. In a trace-driven simulation of the bench's greedy prompts (total time per
category against the best fixed k, 8 seeds) drafting by p alone reached 0.98-1.06, p and a_j in
log-odds 0.99-1.07 (the worst single prompt 0.81 of its own best fixed k: a looping reply where k = 6
falls in step with the loop), and with the hint 1.01-1.12 (worst prompt 0.87, mean over prompts 0.97 ->
1.01). transformers' assisted generation cuts drafts at a fixed p < 0.4 instead, which the demo draft's
flat distributions (most proposals have p < 0.2, and half of those are accepted) would cut too early.

Each a_j is shrunk toward a_{j-1} with a few pseudo-trials, so a position seldom judged looks like its
neighbour instead of like its one unlucky sample; and every twelfth step the controller drafts one token
more than its best guess, so the position just beyond it keeps being measured (without this it settles
on whatever k its first noisy samples favoured; exploring every 6th step by 2 tokens measured 1-5% slower
on the demo pair's short replies). When no k > 0 pays it decodes plainly, drafting a short
probe now and then (at growing intervals) to notice when speculation starts paying again, so it is never
much slower than plain decoding. While it decodes plainly nothing is judged, so a_j goes back, step by step, toward
the reply's own acceptance (the long-run one with this reply's judged steps: :meth:`AdaptiveK._revert`): a stretch of
bad luck at a reply's start no longer keeps the rest of the reply plain.
"""

from __future__ import annotations

import copy
import math
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence


def _logit(x: float) -> float:
    x = min(1.0 - 1e-3, max(1e-3, x))
    return math.log(x / (1.0 - x))


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

    def shrunk(self, prior: float, trials: float) -> float:
        """The mean with ``trials`` pseudo-samples of ``prior`` added: a seldom-seen mean stays near the prior."""
        return (self.s + trials * prior) / (self.w + trials)


class _DecayedLine:
    """Exponentially forgetting weighted least squares y ~ a + b * x with b >= 0, predicted at any x.

    b is shrunk toward 0 by ``spread``**2 of pseudo-variance in x: samples within a few dozen positions of
    each other give nearly the mean, samples hundreds apart give the fitted line.
    """

    __slots__ = ("keep", "spread2", "w", "sx", "sy", "sxx", "sxy")

    def __init__(self, half_life: float, spread: float) -> None:
        self.keep = 0.5 ** (1.0 / half_life)
        self.spread2 = spread * spread
        self.w = self.sx = self.sy = self.sxx = self.sxy = 0.0

    def add(self, x: float, y: float, weight: float = 1.0) -> None:
        """One sample of y at x (``weight`` samples' worth: y is then their mean)."""
        k = self.keep
        self.w = self.w * k + weight
        self.sx = self.sx * k + weight * x
        self.sy = self.sy * k + weight * y
        self.sxx = self.sxx * k + weight * x * x
        self.sxy = self.sxy * k + weight * x * y

    @property
    def seen(self) -> bool:
        return self.w > 1e-9

    def at(self, x: float) -> float:
        w = self.w
        mx, my = self.sx / w, self.sy / w
        var = max(0.0, self.sxx / w - mx * mx)
        slope = max(0.0, (self.sxy / w - mx * my) / (var + self.spread2))
        return max(0.25 * my, my + slope * (x - mx))  # far left of the samples a steep line could go <= 0


class AdaptiveK:
    """A k controller for the decode loop: ``plan()`` (or ``choose()``) before a step, ``observe(...)`` after it."""

    HINT_NONE, HINT_AGREE, HINT_DEPART = 0, 1, 2
    reads_hints = True  # plan() takes prompt lookup's continuation as a hint (the decode loop supplies it)
    PSEUDO_TRIALS = 2.0  # strength of the pull of a_j toward a_{j-1}
    CONFIDENCE_EDGES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # bins of the draft's p for calibration
    COST_SPREAD = 128.0  # positions: cost slopes count once samples span several times this
    # Speculate only where the model predicts it beats plain decoding by this much: its estimates carry a few
    # percent of noise, and near break-even (q4 SmolLM2 with its draft on a 2-core Xeon once specdesk's own
    # kernels made plain passes 3 ms) drafting on noise lost 5-20% against plain decoding.
    PLAIN_MARGIN = 0.04
    STAY_MARGIN = 0.0
    REPLAN_PLAIN = 4
    # plain steps this many steps after the draft last ran are plain decoding's cost (see observe)
    PLAIN_SETTLE = 4
    PHRASE_PRIOR = 0.6  # free_length's prior acceptance of a phrase-table token (prompt lookup's: 0.8)
    # how fast the machine's speed factor follows what the steps measure (per learnt step: ~6 steps' memory)
    SPEED_RATE = 0.15
    # a new reply starts from the draft's acceptance over many replies, worth this many judged steps (see
    # reset_acceptance), and its own steps take over from there
    NEW_REPLY_TRIALS = 4.0
    # judged steps' memory of that acceptance over many replies, in half-lives of the per-reply one
    LONG_RUN = 16
    # plain steps in which a_j goes halfway back to what a new reply starts from, in a reply's first plain stretch;
    # each further stretch of the reply doubles it, up to REVERT_MAX (see _revert)
    REVERT_HALF_LIFE = 8.0
    REVERT_MAX = 128.0
    # what a_j goes back to is this reply's acceptance so far, from the long-run one worth this many judged steps:
    # replies' acceptances differ by ~0.1 (q8 SmolLM2's draft on the bench's chat prompts: 0.3-0.65), as a Beta prior
    # of ~24 pseudo-steps around ~0.45 says; four rejections then move it ~0.06, thirty ~0.25
    REPLY_PRIOR = 24.0
    # drafted steps in a row after which a plain stretch's probes start over from probe_min: a draft tried again as
    # a_j went back (see _revert) and dropped after a step or two did not pay, and probes stay as seldom as they were
    PROBE_RESET_RUN = 4
    # that acceptance over many replies starts from prior_acceptance, worth this many judged steps in each state (see
    # _long_tables); real steps outweigh it within a few replies and it fades with them
    LONG_PRIOR_TRIALS = 4.0

    def __init__(self, k_max: int = 12, k_init: int = 4, prior_acceptance: float = 0.7,
                 half_life: float = 16.0, probe_k: int = 2, probe_every: int = 32, probe_max: int = 256,
                 explore_every: int = 12, explore_step: int = 1) -> None:
        self.k_max = k_max
        self.k_init = k_init
        self.prior_acceptance = prior_acceptance
        self.explore_every, self.explore_step = explore_every, explore_step
        self.steps = 0
        self.probe_k = probe_k
        # a probe costs more than its own step where the draft's reads push the target out of the CPU's cache for
        # a few passes (q4 SmolLM2: probing every 16-128 steps cost k=auto ~3% against plain; every 32-256 ~1-2%)
        self.probe_min, self.probe_max = probe_every, probe_max
        self.probe_every = probe_every
        self.half_life = half_life
        # per-position acceptance, decayed successes / judged, kept apart by the previous step's outcome:
        # state 1 after a step that kept every draft token (an easy stretch tends to go on), else state 0
        self.acc_by_state = self._acc_tables(half_life)
        # the same, forgotten slowly: the draft's acceptance over many replies, what a new reply starts from
        self.acc_long = self._long_tables()
        self.acc_reply = self._acc_tables(math.inf)  # this reply's, not forgotten (see _revert)
        self.state = 0
        # costs belong to the machine and the models (so they are forgotten slowly), and grow with the context
        self.draft = _DecayedLine(half_life * 4, self.COST_SPREAD)  # seconds per drafted token
        self.verify = [_DecayedLine(half_life * 4, self.COST_SPREAD) for _ in range(k_max + 2)]  # per pass, by m
        # and what every step costs besides: the decode loop's own work (the acceptance rule, detokenizing, the
        # step's event, this controller) between one pass and the next draft, ~0.05-0.1 ms on a 2-core CPU: 2-4%
        # of a 2.5 ms plain step, which a step that emits two tokens pays once
        self.other = _Decayed(half_life * 4)
        # The machine's current speed, as a factor on every pass and draft cost (log): costs are learnt divided by it
        # and predicted times it. A pass over m positions is learnt only in steps that make one, so a stretch when
        # another program held the CPU left its costs for the sizes not made since at that stretch's figures: after
        # ~20 s of a busy loop beside q4 SmolLM2 (2-core AMD EPYC), k=auto with prompt lookup drafted every step from
        # then on against a plain pass it still thought took 19.8 ms (3.2 before); drafted sizes priced at such a
        # stretch's figures, with plain passes quiet again, keep it decoding plainly for good. Every learnt pass moves
        # the factor (its cost against the one predicted), so the sizes not made move with the ones that are.
        self.log_speed = 0.0
        self.context = 0  # context length (tokens) at which costs are predicted: the current step's
        # acceptance of a draft token (given the tokens before it passed) by what the text's own repetition
        # says (HINT_*: no hint, agrees with it, departs from it) and, within that, by its draft probability.
        # Without a hint this is the draft's calibration, a property of the model (forgotten slowly); how far
        # the text's repetition is worth trusting belongs to the current text, like a_j (forgotten as fast)
        lives = {self.HINT_NONE: half_life * 4, self.HINT_AGREE: half_life, self.HINT_DEPART: half_life}
        self.by_hint = [_Decayed(lives[h]) for h in range(3)]
        self.by_confidence = [[_Decayed(lives[h]) for _ in range(len(self.CONFIDENCE_EDGES) + 1)]
                              for h in range(3)]
        self.confidence_judged = _Decayed(half_life * 4)  # the same tokens, all together
        # prompt lookup's continuations beside a draft model: acceptance per position (text-bound, like a_j)
        self.lookup_acc = [_Decayed(half_life) for _ in range(k_max + 1)]
        self.phrase_acc = [_Decayed(half_life) for _ in range(k_max + 1)]  # the target's phrases' (core/phrases.py)
        self._hint: tuple[int, ...] = ()  # this step's lookup continuation
        self._hint_states: list[int] = []  # HINT_* of each token drafted this step
        self.best_rate: float | None = None  # predicted tokens/s of the k best_k picked last
        self._best_inputs: tuple[list[float], list[float] | None] = ([], None)  # best_k's a_j and verify costs
        self._survive = 1.0  # this step's S_j while drafting by confidence
        self._step: tuple[float, float, list[float], list[float], float] | None = None  # (rate, c_draft, a_j,
        # verify(1 ..), mean acceptance of the calibration)
        self.plain_streak = 0
        self._unjudged = 0  # plain steps whose text a_j has not yet been moved toward (see _revert)
        self._stretches = 0  # plain stretches that followed drafting in this reply (see _revert)
        self._drafting_run = 0  # steps drafted in a row by the model's choice
        self._since_draft = self.PLAIN_SETTLE  # steps since the draft model last ran
        self.speculating = False
        self.history: list[int] = []  # chosen k per step (for inspection and tests)

    def _long_tables(self) -> list[list[_Decayed]]:
        """The acceptance over many replies, before any step: LONG_PRIOR_TRIALS pseudo-steps at prior_acceptance at the
        first position in each state. Without them a new controller's first few drafted steps were all it knew: three
        that failed by chance (the draft's acceptance 0.45) put it at 0.08 on q4 SmolLM2, every reply started plain,
        and only probes (one or two judged positions a reply) brought it back, after ~6 replies in a simulation."""
        tables = self._acc_tables(self.half_life * self.LONG_RUN)
        for table in tables:
            table[1].add(self.LONG_PRIOR_TRIALS * self.prior_acceptance, self.LONG_PRIOR_TRIALS)
        return tables

    def _acc_tables(self, half_life: float) -> list[list[_Decayed]]:
        """Per-position acceptance tables (positions 0 .. k_max), one per state."""
        return [[_Decayed(half_life) for _ in range(self.k_max + 1)] for _ in range(2)]

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
            prior = a.shrunk(prior, self.PSEUDO_TRIALS)
            out.append(min(0.995, max(0.0, prior)))
        return out

    def acceptance_at(self, j: int) -> float:
        return self.acceptances(j)[-1]

    @property
    def acceptance(self) -> float:
        return self.acceptance_at(1)

    @property
    def draft_cost(self) -> float | None:
        """Seconds per drafted token at the current context length."""
        if not self.draft.seen or self.draft.sy <= 0:
            return None
        return self.draft.at(self.context) * self.speed

    @property
    def speed(self) -> float:
        """The machine's current speed factor on pass and draft costs (1.0 where it ran as when they were learnt)."""
        return math.exp(self.log_speed)

    def _learn(self, line: _DecayedLine, x: float, y: float, weight: float = 1.0, moves: bool = True) -> None:
        """A measured cost ``y`` at context ``x``: the speed factor moves toward y against the line's prediction
        (``moves``: passes do; a drafted token's cost, which also depends on how many a step drafts, does not), then
        the line learns y at speed 1."""
        if moves and line.seen and y > 0:
            base = line.at(x)
            if base > 0:
                self.log_speed += self.SPEED_RATE * (math.log(y / base) - self.log_speed)
        line.add(x, y / self.speed, weight)

    def _seen(self) -> list[tuple[int, float]]:
        x, speed = self.context, self.speed
        return [(i, v.at(x) * speed) for i, v in enumerate(self.verify) if i >= 1 and v.seen]

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

    @property
    def step_overhead(self) -> float:
        """Seconds every step costs besides drafting and the pass (see ``other``); 0 until measured."""
        return self.other.mean or 0.0

    def step_cost(self, k: int) -> float | None:
        """Predicted seconds of a step that drafts k tokens (k = 0: plain decoding), at the current context."""
        costs = self._monotone(self._seen())
        c = self.draft_cost if k > 0 else 0.0
        if costs is None or c is None:
            return None
        v = costs[k] if k < len(costs) else self.verify_cost(k + 1)
        return k * c + v + self.step_overhead

    def rate(self, k: int, acc: list[float] | None = None) -> float | None:
        """Predicted tokens per second for drafting k tokens per step."""
        cost = self.step_cost(k)
        return None if cost is None else self.expected_tokens(k, acc) / cost

    def best_k(self) -> int:
        """argmax_k rate(k) in one pass over k (it runs before every step: ~65 us, was ~150 calling rate per k)."""
        acc = self.acceptances(self.k_max)
        c = self.draft_cost
        seen = self._seen()
        o = self.step_overhead
        costs = self._monotone(seen)
        self._best_inputs = (acc, costs)  # plan() drafts by them this step (nothing is learnt in between)
        best_r, best = None, self.k_init
        e, run = 1.0, 1.0
        for k in range(self.k_max + 1 if costs is not None else 0):
            if k > 0:
                if c is None:
                    break
                run *= acc[k - 1]
                e += run
            v = costs[k]
            r = e / (k * c + v + o) if k > 0 else e / (v + o)
            if best_r is None or r >= best_r:  # ties go to the larger k (as max over (rate, k) did)
                best_r, best = r, k
        self.best_rate = best_r
        plain = costs[0] if costs is not None and self.verify[1].seen else None
        # hysteresis: resuming drafting costs a catch-up (the draft reads what it missed, and pushes the target out
        # of the CPU's cache for a pass or two), so it starts only where it predicts PLAIN_MARGIN over plain
        # decoding, and once drafting goes on while it predicts no loss (STAY_MARGIN)
        margin = self.STAY_MARGIN if self.history and self.history[-1] > 0 else self.PLAIN_MARGIN
        if best > 0 and plain and best_r < (1.0 + margin) / (plain + o):
            self.best_rate = 1.0 / (plain + o)
            return 0
        return best

    def calibration_mean(self, prior: float) -> float:
        """Acceptance over every token the calibration has judged (shrunk toward ``prior``)."""
        # its own mean, not the bins' sum: each bin forgets at its own pace
        return self.confidence_judged.shrunk(prior, self.PSEUDO_TRIALS)

    def confidence_acceptance(self, p: float, prior: float | None = None, hint: int = HINT_NONE) -> float:
        """P(a draft token is accepted | the draft gave it probability p, its hint state, the tokens before
        it passed). A hint state seldom seen is shrunk toward ``prior`` (default: the current first-position
        acceptance), a band of p seldom seen toward its hint state's acceptance."""
        if prior is None:
            prior = self.acceptance
        state = self.by_hint[hint].shrunk(prior, self.PSEUDO_TRIALS)
        return self._band(p, hint).shrunk(state, self.PSEUDO_TRIALS)

    def _band(self, p: float, hint: int) -> _Decayed:
        """The calibration's estimate for the band of draft probability that p falls in, in a hint state."""
        return self.by_confidence[hint][bisect_right(self.CONFIDENCE_EDGES, p)]

    # ------------------------------------------------------------------ controller protocol

    def plan(self, context_len: int = 0, confidence: bool = False,
             hint: Sequence[int] = ()) -> tuple[int, Callable[[int, float, int], bool] | None]:
        """(k, keep) for the next step: draft up to k tokens, stopping early where keep(j, p, token) is false.

        ``confidence``: the drafter reports its probability per token. Then, once costs are known and
        speculation pays, k is k_max and :meth:`keep_drafting` decides the length token by token; else
        (or for a probe, or plain decoding) keep is None and k is :meth:`choose`'s. ``hint``: what prompt
        lookup would propose here (the continuation of the context's last n-gram where it occurred
        before), up to k_max tokens; a drafted token that agrees with it is judged apart from one that
        departs from it.
        """
        k = self.choose(context_len)
        self._step = None
        self._hint = tuple(hint)
        self._hint_states = []
        if not confidence or not self.speculating:
            return k, None
        acc, costs = self._best_inputs  # speculating: choose() priced this step with best_k (~25 us not spent twice)
        v = costs or [0.0] * (self.k_max + 1)
        self._step = (self.best_rate, self.draft_cost, acc, v, self.calibration_mean(acc[0]))
        self._survive = 1.0
        return self.k_max, self.keep_drafting

    def verify_costs(self) -> list[float]:
        """[verify(1) .. verify(k_max + 1)] at the current context (index m - 1), never falling with m (see
        :meth:`_monotone`); zeros before any pass is measured."""
        return self._monotone(self._seen()) or [0.0] * (self.k_max + 1)

    def _monotone(self, seen: list[tuple[int, float]]) -> list[float] | None:
        """verify(1) .. verify(k_max + 1) from the sizes ``seen``, made never to fall with m (more positions never
        cost less) from above: a size priced above a larger size takes the larger's figure. Timing noise only ever
        adds (another program, the collector, a page fault), so of two sizes that disagree the lower is the better
        supported, and a size made seldom keeps whatever its few steps met: on the demo pair a 3-position pass
        stayed priced at 7.4-8.4 ms beside 5.1-5.9 for 4-5 positions, and k=auto, which raised the larger sizes to
        it, drafted one token a step at 0.79 of k=3's speed. None: nothing measured."""
        if not seen:
            return None
        out = [self.verify_cost(m, seen) for m in range(1, self.k_max + 2)]
        for i in range(len(out) - 2, -1, -1):
            out[i] = min(out[i], out[i + 1])
        return out

    def keep_drafting(self, j: int, p: float, token: int | None = None) -> bool:
        """After the j-th drafted token (draft probability p): is a (j+1)-th worth its cost?"""
        if self._step is None:
            return False
        rate, c, acc, v, mean = self._step
        hint = self.HINT_NONE  # no hint here (or no token to compare), or the draft already left it
        if token is not None and len(self._hint) >= j and (j == 1 or self._hint_states[-1] == self.HINT_AGREE):
            hint = self.HINT_AGREE if token == self._hint[j - 1] else self.HINT_DEPART
        self._hint_states.append(hint)
        self._survive /= 1.0 + math.exp(-self._token_logit(acc[j - 1], p, mean, hint))
        if j >= self.k_max:
            return False
        # drafting on to any length j' > j adds S_j a_{j+1} .. a_{j'} expected tokens (summed over the lengths
        # passed) for (j' - j) c_draft + verify(j' + 1) - verify(j + 1) seconds; go on if some j' adds them at
        # no less than the best fixed-k rate. Looking past j + 1 matters where verify costs come in steps (q4's
        # int4 kernel: 2-4 positions cost nearly what 2 does, 5 as much as 8), which a slope averages away.
        gain, survive = 0.0, self._survive
        for nxt in range(j + 1, self.k_max + 1):
            survive *= acc[nxt - 1]
            gain += survive
            if gain >= rate * ((nxt - j) * c + v[nxt] - v[j]):
                return True
        return False

    def _token_logit(self, a_j: float, p: float, mean: float, hint: int) -> float:
        """Log-odds that a drafted token passes: the position's acceptance a_j in this stretch of text, moved by what
        the hint and its draft probability p say relative to an average draft token (``mean``: the calibration's). p
        alone pools easy and hard text: a flat draft repeating a passage gives p < 0.1 to tokens that all pass."""
        return _logit(a_j) + _logit(self.confidence_acceptance(p, mean, hint)) - _logit(mean)

    def choose(self, context_len: int = 0) -> int:
        """k for the next step; ``context_len``: tokens in the sequence so far (costs are predicted there)."""
        self.steps += 1
        self.context = context_len
        self.speculating = False  # k comes from the model (not a first step, plain decoding or a probe)
        if self.draft_cost is None:
            k = self.k_init  # nothing measured yet: draft, to learn the costs
        elif not self.verify[1].seen:
            k = 0  # plain steps, to learn what plain decoding costs here (observe: from the PLAIN_SETTLE-th on)
        else:
            # in a plain streak nothing but plain passes is learnt: the choice is looked at again every
            # REPLAN_PLAIN steps (best_k takes ~65 us, 2% of a 3 ms plain step)
            replan = self.plain_streak == 0 or self.plain_streak % self.REPLAN_PLAIN == 0
            if replan and self._unjudged:
                self._revert(self._unjudged)
            k = self.best_k() if replan else 0
            if k == 0:
                if self.history and self.history[-1] > 0:
                    self._stretches += 1  # a plain stretch starts
                self._drafting_run = 0
                self.plain_streak += 1
                self._unjudged += 1
                if self.plain_streak >= self.probe_every:
                    self._revert(self._unjudged)
                    self.plain_streak = 0
                    self.probe_every = min(self.probe_max, self.probe_every * 2)
                    k = self.probe_k
            else:
                self.speculating = True
                self.plain_streak = 0
                self._unjudged = 0
                self._drafting_run += 1
                if self._drafting_run >= self.PROBE_RESET_RUN:
                    self.probe_every = self.probe_min  # drafting pays again: probes start over when it stops
                if self.steps % self.explore_every == 0:
                    k = min(self.k_max, k + self.explore_step)
        self.history.append(k)
        return k

    def observe_verify(self, drafted: int, verify_s: float, context_len: int = 0, accepted: int | None = None,
                       other_s: float = 0.0, phrases: bool = False) -> None:
        """A step whose tokens came from elsewhere (prompt lookup beside a draft model): its verify cost and, when
        given, how many of its tokens passed (lookup's own per-position acceptance, for :meth:`free_length`; ``phrases``:
        the tokens were the target's phrase table's, judged apart)."""
        if other_s > 0:
            self.other.add(other_s)
        self._learn(self.verify[min(drafted + 1, len(self.verify) - 1)], context_len, verify_s)
        self._since_draft += 1  # a lookup step: the draft model did not run
        if accepted is not None:
            self._judge(self.phrase_acc if phrases else self.lookup_acc, drafted, accepted)

    def _judge(self, table: list[_Decayed], drafted: int, accepted: int) -> None:
        """Per-position acceptance: positions 1..accepted passed, the next one failed (if drafted)."""
        for j in range(1, min(drafted, self.k_max) + 1):
            if j > accepted + 1:
                break  # positions after the first rejection were never judged
            table[j].add(1.0 if j <= accepted else 0.0)

    def free_length(self, available: int, phrases: bool = False) -> int:
        """How many of ``available`` free tokens (prompt lookup's continuation: no drafting cost) to verify: the
        length with the best expected tokens per verify second, by lookup's own acceptance per position (shrunk
        toward the previous position's, from a prior of 0.8). Where verify costs come in steps (q4: 5 positions
        cost as much as 8) a long continuation is cut to the step below unless its tokens nearly always pass. The target's
        phrases (``phrases``) have their own table, from a prior of PHRASE_PRIOR (their tokens passed ~0.5 on q4
        SmolLM2's hand-written prompts, where a repeated passage's pass ~0.8)."""
        v = self.verify_costs() if self.verify[1].seen else None
        if v is None or not v[0]:
            return available
        o = self.step_overhead
        table = self.phrase_acc if phrases else self.lookup_acc
        best, best_rate, e, run, prior = 0, 1.0 / (v[0] + o), 1.0, 1.0, self.PHRASE_PRIOR if phrases else 0.8
        for n in range(1, min(available, self.k_max) + 1):
            prior = table[n].shrunk(prior, self.PSEUDO_TRIALS)
            run *= prior
            e += run
            if e / (v[n] + o) >= best_rate:
                best, best_rate = n, e / (v[n] + o)
        return best

    def observe(self, k: int, drafted: int, accepted: int, draft_s: float, verify_s: float,
                context_len: int = 0, confidences: tuple[float, ...] = (), setup_s: float = 0.0,
                other_s: float = 0.0) -> None:
        """The step's outcome; ``context_len`` as given to :meth:`choose` for this step; ``confidences``:
        the draft's probability of each drafted token, when the drafter reported them; ``setup_s``: seconds of
        ``draft_s`` the draft spent catching up on tokens it had not seen (Proposal.setup_s); ``other_s``: the decode
        loop's own seconds between the last pass and this step's draft (0: not measured)."""
        if other_s > 0:
            self.other.add(other_s)
        m = min(drafted + 1, len(self.verify) - 1)
        # A step whose draft first caught up (the prompt, or a stretch decoded plainly) costs what drafting costs
        # only once, when it resumes: q4 SmolLM2's draft read 2.4 ms a drafted token in such steps against 0.43 in
        # a drafted stretch, and the target's pass after it 3.8-4.0 ms against 3.05 (the draft's reads pushed its
        # weights out of the CPU's cache). Learnt as drafting's costs, they kept k=auto decoding plainly where
        # k=1 was 7% faster; its acceptance is learnt, its costs are not.
        cold = drafted > 0 and setup_s > 0
        # Plain steps soon after a drafted one are not what plain decoding costs: the draft's weights have pushed
        # some of the target's out of the CPU's cache, and it takes the target a few passes to get them back (q4
        # SmolLM2 on a 2-core Xeon: 4.8, 4.1, 3.5, 3.0 ms for the first plain passes after a draft step, 2.8 in a
        # plain streak; learnt from those, k=auto kept drafting at 0.8x of plain). A plain pass is learnt from
        # plain steps PLAIN_SETTLE or more steps after the draft last ran (until then k=auto decodes plainly).
        self._since_draft = 0 if drafted > 0 else self._since_draft + 1
        if (drafted > 0 and not cold) or self._since_draft >= self.PLAIN_SETTLE:
            self._learn(self.verify[m], context_len, verify_s)
        if drafted <= 0:
            return
        if not cold:
            self._learn(self.draft, context_len, draft_s / drafted, float(drafted), moves=False)
        hints = self._hint_states if len(self._hint_states) == len(confidences) else [self.HINT_NONE] * len(confidences)
        for j, p in enumerate(confidences[: accepted + 1]):  # tokens after the first rejection were never judged
            passed = 1.0 if j < accepted else 0.0
            self._band(p, hints[j]).add(passed)
            self.by_hint[hints[j]].add(passed)
            self.confidence_judged.add(passed)
        self._judge(self.acc, drafted, accepted)
        self._judge(self.acc_long[self.state], drafted, accepted)
        self._judge(self.acc_reply[self.state], drafted, accepted)
        self.state = 1 if accepted == drafted else 0

    def _revert(self, steps: int | None) -> None:
        """Move every a_j toward this reply's acceptance so far, ``steps`` plain steps' worth (None: all the way, a new
        reply): halfway in REVERT_HALF_LIFE plain steps in the reply's first plain stretch, twice that in each next
        one (up to REVERT_MAX). The reply's acceptance is the long-run one (acc_long) worth REPLY_PRIOR judged steps
        with this reply's judged steps added; a_j goes to it at the weight a new reply starts with (NEW_REPLY_TRIALS).

        Decoding plainly judges nothing, so a_j stayed at what the last drafted steps left: a reply's first few
        tokens or an unlucky run of rejections, the three to five steps a 0.45-0.5 acceptance loses by chance, kept
        it plain until the next probe, 32 plain steps on, and a failed probe doubled that. On SmolLM2 as q8 with its
        draft (the bench's hand-written chat prompts, 2-core AMD EPYC) k=auto ran 1.04x of plain where k=1 ran 1.21x,
        decoding most steps of four replies plainly. The text a few dozen tokens on is another stretch: what the last
        one taught fades, and a reply whose acceptance pays drafts again; one the draft keeps failing on (thirty
        rejections move the reply's acceptance ~0.25) stays plain. The half-life doubles as probes' intervals do:
        where the text changed under a long-run acceptance learnt elsewhere (0.9, then 0.02 in one long reply) the
        draft is tried a few times, not every dozen steps."""
        half_life = min(self.REVERT_MAX, self.REVERT_HALF_LIFE * 2.0 ** max(0, self._stretches - 1))
        f = 0.0 if steps is None else 0.5 ** (steps / half_life)
        for table, long, reply in zip(self.acc_by_state, self.acc_long, self.acc_reply):
            for a, b, r in zip(table, long, reply):
                if b.w <= 1e-9:
                    a.w, a.s = a.w * f, a.s * f
                    continue
                prior = min(1.0, self.REPLY_PRIOR / b.w)
                mean = (b.s * prior + r.s) / (b.w * prior + r.w)
                w = (1.0 - f) * min(b.w, self.NEW_REPLY_TRIALS)
                a.w, a.s = a.w * f + w, a.s * f + w * mean
        self._unjudged = 0

    def learn_costs_from(self, other: "AdaptiveK", draft: bool = True) -> None:
        """Start from ``other``'s cost model (what a :class:`Lesson` taught it): what passes cost on this machine,
        and with ``draft`` what a drafted token costs; nothing of its acceptance, which belonged to its text."""
        self.verify = copy.deepcopy(other.verify)
        self.other = copy.deepcopy(other.other)
        self.log_speed = other.log_speed
        if draft:
            self.draft = copy.deepcopy(other.draft)

    def reset_acceptance(self, keep: float = 0.25) -> None:
        """A new prompt: keep the cost model (a property of the machine) and the draft's calibration, mostly
        forget what the text's repetition was worth, and start the acceptance a_j over from the draft's acceptance
        over many replies (worth NEW_REPLY_TRIALS judged steps), with the probes' interval at its shortest.

        Not from the last reply's: a reply's acceptance says little about the next prompt's. Kept at a quarter
        of its weight, a poor reply (a rewriting task the draft loses on) kept the next ones plain: in a chat bench
        on q4 SmolLM2 (2-core AMD EPYC) k=auto decoded three replies plainly after one, where k=2 ran 1.4-2.0x of
        plain on them, and probes then came every 32-256 plain steps, too late for a 96-token reply. ``keep`` 0 forgets
        every acceptance (a Lesson's text is nobody's)."""
        text = [self.by_hint[h] for h in (self.HINT_AGREE, self.HINT_DEPART)]
        text += self.by_confidence[self.HINT_AGREE] + self.by_confidence[self.HINT_DEPART]
        for a in text + self.lookup_acc + self.phrase_acc:
            a.w *= keep
            a.s *= keep
        if keep <= 0:
            self.acc_long = self._long_tables()
        self.acc_reply = self._acc_tables(math.inf)
        self._revert(None)
        self.state = 0
        self.plain_streak = 0
        self._stretches = 0
        self.probe_every = self.probe_min
        # a new prompt's first passes run slow too (4.8, 4.7, 4.2 ms where the reply settles at 2.8 on q4 SmolLM2,
        # drafted or not: the prefill and whatever ran between replies had the cache): not plain decoding's cost
        self._since_draft = 0


class Lesson:
    """A fixed k per step from ``schedule`` (0: plain decoding; plain after its end), each step observed by ``ctl``:
    Engine.warm_up runs one so that k=auto knows what a pass over 1, 2, 3 ... positions and a drafted token cost on
    this machine before the first reply. Untaught, a fresh controller drafts k_init tokens, then decodes plainly to
    learn plain decoding's cost, then decides: the app's first replies after a load ran 0.96x of plain decoding
    where a controller that knew the costs ran 1.03x (q4 SmolLM2 with its draft, 64-token chat replies, 2-core
    Xeon). What it learns of acceptance is dropped (:meth:`AdaptiveK.learn_costs_from` copies costs only): the
    warm-up's text is nobody's."""

    reads_hints = False

    def __init__(self, ctl: AdaptiveK, schedule: Sequence[int], finished: threading.Event | None = None) -> None:
        self.ctl = ctl
        self.k_max = ctl.k_max
        self.schedule = list(schedule)
        self.steps = 0
        self.finished = finished  # set once the schedule's last step is observed (the decode loop's cancel)
        ctl.reset_acceptance(0.0)  # and its first plain passes (a new prompt's, slow) are not plain decoding's cost

    @property
    def done(self) -> bool:
        return self.steps >= len(self.schedule)

    def plan(self, context_len: int = 0, confidence: bool = False, hint: Sequence[int] = ()) -> tuple[int, None]:
        k = self.schedule[self.steps] if self.steps < len(self.schedule) else 0
        self.steps += 1
        return k, None

    def observe(self, *args, **kwargs) -> None:
        self.ctl.observe(*args, **kwargs)
        self._ended()

    def observe_verify(self, *args, **kwargs) -> None:
        self.ctl.observe_verify(*args, **kwargs)
        self._ended()

    def _ended(self) -> None:
        if self.done and self.finished is not None:
            self.finished.set()
