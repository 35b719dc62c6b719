"""Adaptive k: picks the k that maximises expected tokens per second, falls back to plain decoding."""

from __future__ import annotations

import random

import pytest

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


def test_a_controller_whose_first_drafts_failed_by_chance_drafts_again():
    """Probes are how a controller that stopped drafting learns again: three failed first drafts put its estimate of
    the draft's acceptance at 0.08 where the draft's is 0.45 (k=1 1.12x of plain here, a probe's catch-up and the slow
    passes after it as q4 SmolLM2's on a 2-core Xeon). Probes every 32-256 plain steps of a reply bring it back to
    drafting within a few replies; spaced by their measured cost (~2.5 plain steps each: one every ~130 plain steps,
    tried in the twenty-first sitting) they never came within a 96-token reply, and every later reply stayed plain.
    The acceptance over many replies starts from a prior worth a few judged steps (LONG_PRIOR_TRIALS), so the next
    reply drafts at once; without it probes alone took ~6 replies."""
    rng = random.Random(5)
    ctl = AdaptiveK()
    ctl.reset_acceptance()
    for _ in range(3):
        k = ctl.choose(100)
        ctl.observe(k, k, 0, 0.0004 * k, 0.003 + 0.0005 * k, 100)
    drafted, since, last = [], 99, 0
    for r in range(20):
        ctl.reset_acceptance()
        n_drafted = 0
        for step in range(96):
            at = r * 96 + step
            k = ctl.choose(100 + step)
            n = 0
            while n < k and rng.random() < 0.45:
                n += 1
            setup = 0.0001 * (at - last) if k else 0.0
            verify = 0.003 + 0.0005 * k + (0.0005 if k == 0 and since < 4 else 0.0)
            ctl.observe(k, k, n, setup + 0.0004 * k, verify, 100 + step, setup_s=setup)
            since, last = (0, at) if k else (since + 1, last)
            n_drafted += k > 0
        drafted.append(n_drafted)
    assert sum(drafted[:6]) >= 120, drafted  # from the next reply on (without the prior: ~2 probes a reply for 6)
    assert sum(drafted[-8:]) >= 8 * 48, drafted  # and on most steps


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
    auto = tiny_engine.generate(PROMPTS[1], max_new_tokens=40, k="auto", drafter="model")
    assert auto.token_ids == plain.token_ids
    assert all(0 <= s.k <= 12 for s in auto.steps)
    greedy = tiny_engine._adaptive["model", "greedy"]
    assert greedy.draft_cost is not None  # learned costs persist in the engine
    steps = greedy.steps
    tiny_engine.generate(PROMPTS[1], max_new_tokens=12, k="auto", temperature=0.8, seed=3, drafter="model")
    assert greedy.steps == steps  # sampled decoding learns in a controller of its own
    assert tiny_engine._adaptive["model", "sampled"].steps > 0
    tiny_engine.generate(PROMPTS[1], max_new_tokens=12, k="auto", tree="3,2", drafter="model")
    assert greedy.steps == steps  # a tree's passes (chain and leaves) price a chain differently: its own controller
    assert tiny_engine._adaptive["model", "greedy, tree 3,2"].steps > 0


def test_best_k_is_the_argmax_of_rate():
    """best_k's one-pass loop picks what max over rate(k) picks (ties to the larger k), and plain decoding where that
    does not beat plain's rate by PLAIN_MARGIN (STAY_MARGIN after a drafted step)."""
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
            rate, want = max((ctl.rate(j, acc), j) for j in range(ctl.k_max + 1))
            margin = ctl.STAY_MARGIN if ctl.history[-1] > 0 else ctl.PLAIN_MARGIN  # see the hysteresis test
            if ctl.verify[1].seen and rate < (1 + margin) * ctl.rate(0, acc):
                want = 0
            assert ctl.best_k() == want


def test_cost_line_fits_context_growth_and_ignores_a_narrow_spread():
    from specdesk.core.adaptive import _DecayedLine

    wide = _DecayedLine(half_life=float("inf"), spread=128)
    for _ in range(20):
        for x in (100, 1000):
            wide.add(x, 0.010 + 1e-5 * x)
    # the slope is shrunk by spread^2 of pseudo-variance: 450^2 / (450^2 + 128^2) of the true 1e-5
    assert abs(wide.at(550) - 0.0155) < 1e-9  # at the samples' mean: their mean
    assert abs(wide.at(1000) - (0.0155 + 450 * 1e-5 * 450**2 / (450**2 + 128**2))) < 1e-9
    narrow = _DecayedLine(half_life=float("inf"), spread=128)
    for x in range(100, 140):  # one reply's own growth: a slope of noise, mostly ignored
        narrow.add(x, 0.010 + (1e-4 if x % 2 else -1e-4) + 1e-6 * x)
    assert abs(narrow.at(1200) - narrow.at(120)) < 0.001
    falling = _DecayedLine(half_life=float("inf"), spread=1)
    for x in (100, 1000):
        falling.add(x, 0.02 - 1e-5 * x)
    assert falling.at(5000) == falling.at(550)  # costs never fall with the context


def test_k_follows_the_context_length_when_costs_grow_with_it():
    """Draft 1.2 ms per token and verify ~10 ms at 100 tokens of context, 3.4 ms and ~11-13 ms at 1,200:
    with a = 0.6 the best k is 2 on short prompts and 1 on long ones. A controller that has seen both
    lengths predicts each one's costs; one cost per size (no context) would pick the same k for both."""
    def draft_c(L):
        return 1e-3 + 2e-6 * L

    def verify_c(m, L):
        return 10e-3 + 0.5e-3 * (m - 1) + L * (1e-6 + 1e-6 * (m - 1))

    rng = random.Random(7)
    ctl = AdaptiveK()
    for prompt in range(12):
        base = 100 if prompt % 2 else 1200
        ctl.reset_acceptance()
        for step in range(40):
            L = base + 2 * step
            k = ctl.choose(L)
            n = 0
            while n < k and rng.random() < 0.6:
                n += 1
            ctl.observe(k, k, n, k * draft_c(L) * rng.uniform(0.9, 1.1), verify_c(k + 1, L) * rng.uniform(0.9, 1.1), L)
    # the costs learnt at each length pick each length's k (at the true acceptance: the estimate's own noise,
    # from the last few steps' luck, is not what this is about)
    acc = [0.6] * ctl.k_max

    def best(context: int) -> int:
        ctl.context = context
        return max(range(ctl.k_max + 1), key=lambda k: ctl.rate(k, acc))
    ctl.context = 1200
    assert abs(ctl.draft_cost - draft_c(1200)) < 0.15 * draft_c(1200)
    assert best(1200) == 1
    ctl.context = 100
    assert abs(ctl.draft_cost - draft_c(100)) < 0.25 * draft_c(100)
    assert best(100) >= 2  # 2 (143 tok/s) and 3 (140) are within the cost estimates' noise


def _train_with_confidences(ctl: AdaptiveK, steps: int = 300, seed: int = 3) -> None:
    """Drafts whose tokens are either sure (p = 0.95, always accepted) or unsure (p = 0.05, accepted 20%);
    draft 1 ms per token, verify 10 ms + 1 ms per extra position."""
    rng = random.Random(seed)
    for _ in range(steps):
        k, keep = ctl.plan(200, confidence=True)
        ps, n, rejected = [], 0, False
        for j in range(1, k + 1):
            sure = rng.random() < 0.7
            p = 0.95 if sure else 0.05
            ps.append(p)
            if not rejected and (sure or rng.random() < 0.2):
                n += 1
            else:
                rejected = True
            if keep is not None and not keep(j, p):
                break
        m = len(ps)
        ctl.observe(k, m, n, 0.001 * m, 0.010 + 0.001 * m, 200, tuple(ps))


def test_drafting_by_confidence_learns_what_each_probability_is_worth():
    ctl = AdaptiveK()
    _train_with_confidences(ctl)
    assert ctl.confidence_acceptance(0.95) > 0.9
    assert 0.05 < ctl.confidence_acceptance(0.05) < 0.4
    k, keep = ctl.plan(200, confidence=True)
    assert k == ctl.k_max and keep is not None  # the draft's probabilities decide the length
    # a sure token: the next one is still worth drafting; an unsure one: the chance that everything so
    # far passes drops to ~0.2 and one more token no longer pays for its draft and verify time
    assert keep(1, 0.95) and keep(2, 0.95)
    assert not keep(3, 0.05)
    k, keep = ctl.plan(200, confidence=True)
    assert not keep(ctl.k_max, 0.99)  # never past k_max
    k, keep = ctl.plan(200, confidence=False)
    assert keep is None and k == ctl.history[-1]  # a drafter without probabilities gets the modelled k


def test_a_flat_draft_in_an_easy_stretch_drafts_longer():
    """p alone is pooled over all text seen: after mixed text, p = 0.05 means "passes 20% of the time". In a
    stretch the draft repeats (every token passes although the draft stays unsure, as the demo draft does when
    a reply loops), the position's own acceptance must outweigh that, so drafts grow; with the calibration
    alone every draft stopped after its first token for all 40 steps."""
    ctl = AdaptiveK()
    _train_with_confidences(ctl)
    ctl.reset_acceptance()  # a new prompt
    lengths = []
    for _ in range(40):
        k, keep = ctl.plan(200, confidence=True)
        m = 0
        for j in range(1, k + 1):
            m = j
            if keep is not None and not keep(j, 0.05):
                break
        ctl.observe(k, m, m, 0.001 * m, 0.010 + 0.001 * m, 200, (0.05,) * m)  # everything passes
        lengths.append(m)
    assert lengths[:5] == [1] * 5  # at first it trusts what p = 0.05 was worth so far
    assert min(lengths[-10:]) >= 3
    assert lengths == sorted(lengths)  # and it learns in one direction only


def test_drafting_by_confidence_is_not_used_for_probes_or_plain_steps():
    ctl = AdaptiveK()
    simulate(ctl, alpha=0.02, c_draft=0.004, v0=0.02, v1=0.002, steps=200)  # speculation does not pay
    plans = [ctl.plan(100, confidence=True) for _ in range(40)]
    assert all(keep is None for _, keep in plans)  # plain steps and short probes, never an open-ended draft
    assert any(k == 0 for k, _ in plans) and all(k <= ctl.probe_k for k, _ in plans)


def _train_with_hints(ctl: AdaptiveK, steps: int = 300, seed: int = 5) -> list[int]:
    """A flat draft (p = 0.05 for every token) in text that partly repeats itself: each drafted token either
    agrees with prompt lookup's hint (always accepted) or departs from it (accepted 10%). Returns the
    drafted lengths."""
    rng = random.Random(seed)
    hint = list(range(100, 100 + ctl.k_max))
    lengths = []
    for _ in range(steps):
        k, keep = ctl.plan(200, confidence=True, hint=hint)
        m, n, rejected, following = 0, 0, False, True
        for j in range(1, k + 1):
            m = j
            following = following and rng.random() < 0.7
            token = hint[j - 1] if following else 7
            if not rejected and (following or rng.random() < 0.1):
                n += 1
            else:
                rejected = True
            if keep is not None and not keep(j, 0.05, token):
                break
        ctl.observe(k, m, n, 0.001 * m, 0.010 + 0.001 * m, 200, (0.05,) * m)
        lengths.append(m)
    return lengths


def test_a_draft_that_follows_the_texts_own_repetition_is_trusted_and_one_that_leaves_it_is_not():
    ctl = AdaptiveK()
    _train_with_hints(ctl)
    agree = ctl.confidence_acceptance(0.05, hint=AdaptiveK.HINT_AGREE)
    depart = ctl.confidence_acceptance(0.05, hint=AdaptiveK.HINT_DEPART)
    assert agree > 0.85 and depart < 0.3
    hint = list(range(100, 100 + ctl.k_max))
    _, keep = ctl.plan(200, confidence=True, hint=hint)
    # the same flat p = 0.05 throughout: only the hint tells the tokens apart
    assert all(keep(j, 0.05, hint[j - 1]) for j in range(1, 5))
    assert not keep(5, 0.05, 7)  # the draft leaves the repetition: stop here
    # without a hint the same tokens are judged by p and position alone, and the draft stops sooner
    _, keep = ctl.plan(200, confidence=True)
    no_hint = next(j for j in range(1, ctl.k_max + 1) if not keep(j, 0.05, 100 + j - 1))
    assert no_hint < 5


def test_what_the_repetition_was_worth_is_mostly_forgotten_for_a_new_prompt():
    """Whether a reply repeats its prompt belongs to that reply; the draft's calibration by p (no hint) is the
    draft model's and is kept."""
    ctl = AdaptiveK()
    _train_with_hints(ctl)
    _train_with_confidences(ctl)
    agree_w = ctl.by_hint[AdaptiveK.HINT_AGREE].w
    none_w = ctl.by_hint[AdaptiveK.HINT_NONE].w
    assert agree_w > 1 and none_w > 1
    ctl.reset_acceptance()
    assert ctl.by_hint[AdaptiveK.HINT_AGREE].w == 0.25 * agree_w
    assert ctl.by_hint[AdaptiveK.HINT_NONE].w == none_w


def test_the_decode_loop_hands_the_controller_prompt_lookups_continuation_and_each_drafted_token(
        tiny_target, tiny_target_copy):
    """The hint at every step is exactly what prompt lookup would have proposed from the committed tokens, and
    keep() sees each drafted token itself: the accepted ones are the output's (a draft identical to the
    target, so every drafted token is accepted)."""
    import specdesk
    from specdesk.core.ngram import NgramIndex

    engine = specdesk.load(str(tiny_target), str(tiny_target_copy), drafter="model", device="cpu")

    class Recording:
        k_max = 12
        reads_hints = True

        def __init__(self):
            self.steps: list[tuple[int, tuple[int, ...], list[int]]] = []  # (context, hint, drafted tokens)

        def plan(self, context_len=0, confidence=False, hint=()):
            self.steps.append((context_len, tuple(hint), []))
            return 4, (self.keep if confidence else None)

        def keep(self, j: int, p: float, token: int) -> bool:
            self.steps[-1][2].append(token)
            return True

        def observe(self, k, drafted, accepted, *args, **kwargs):
            del self.steps[-1][2][accepted:]  # keep the accepted tokens only

    ctl = Recording()
    prompt = engine.encode(PROMPTS[2])
    out = engine.generate(prompt, max_new_tokens=40, k="auto", controller=ctl)
    assert out.token_ids == engine.generate(prompt, max_new_tokens=40, drafter="none").token_ids
    full = list(prompt) + list(out.token_ids)
    index = NgramIndex()
    for length, hint, accepted in ctl.steps:
        assert hint == tuple(index.lookup(full[:length], ctl.k_max))
        assert accepted == full[length:length + len(accepted)]
    assert any(hint for _, hint, _ in ctl.steps)  # this prompt repeats itself: lookup has something to say
    assert sum(len(a) for _, _, a in ctl.steps) == len(out.token_ids) - len(ctl.steps)  # one target token a step


def _stepped(m: int) -> float:
    """Verify seconds over m positions as q4's int4 kernel has them (rows in tiles of 4): SmolLM2's on 2 cores."""
    return {1: 0.0125, 2: 0.0155, 3: 0.017, 4: 0.0185}.get(m, 0.028 if m <= 8 else 0.039)


def _learn_stepped(ctl: AdaptiveK, alpha: float, c_draft: float = 0.0015, steps: int = 400) -> None:
    rng = random.Random(3)
    for i in range(steps):
        k = 1 + i % 9  # every size measured
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        ctl.choose(100)
        ctl.observe(k, k, n, k * c_draft, _stepped(k + 1), 100)
    for _ in range(AdaptiveK.PLAIN_SETTLE):  # plain steps soon after drafted ones teach nothing (the next test)
        ctl.observe(0, 0, 0, 0.0, _stepped(1), 100)


def test_plain_steps_cost_is_learnt_once_the_draft_has_not_run_for_a_few_steps():
    """Plain passes soon after a drafted step run where the draft's weights have pushed some of the target's out of
    the CPU's cache (4.8, 4.1, 3.5 ms where a plain streak runs at 2.8 on q4 SmolLM2): not what plain decoding
    costs; learnt from them, k=auto kept drafting at 0.8x of plain. It learns from the plain steps after those."""
    ctl = AdaptiveK()
    for i in range(40):
        ctl.choose(100)
        ctl.observe(1, 1, i % 2, 0.0005, 0.0040, 100)
    for ms in (4.8, 4.1, 3.5):  # no plain cost known: plain steps to learn it, the first ones not learnt
        assert ctl.choose(100) == 0
        ctl.observe(0, 0, 0, 0.0, ms / 1000, 100)
        assert not ctl.verify[1].seen
    assert ctl.choose(100) == 0
    ctl.observe(0, 0, 0, 0.0, 0.0029, 100)
    assert ctl.verify_cost(1) == pytest.approx(0.0029)
    assert ctl.best_k() == 0  # 1.5 tokens for 4.5 ms does not beat 1 for 2.9
    ctl.reset_acceptance()  # a new prompt: the draft has read it
    ctl.observe(0, 0, 0, 0.0, 0.0050, 100)
    assert ctl.verify_cost(1) == pytest.approx(0.0029)


def test_a_step_whose_draft_caught_up_teaches_acceptance_not_costs():
    """Where drafting resumes the draft first reads what it missed, and the target's next passes run slow (q4 SmolLM2:
    2.4 ms a drafted token and 3.9 ms a pass, against 0.43 and 3.05 in a drafted stretch): learnt as costs, k=auto
    never drafted where k=1 was 7% faster. Such a step's acceptance counts, its costs do not."""
    ctl = AdaptiveK()
    for i in range(40):
        ctl.choose(100)
        ctl.observe(1, 1, i % 2, 0.00045, 0.0031, 100)
    draft, verify2, acc = ctl.draft_cost, ctl.verify_cost(2), ctl.acceptance_at(1)
    for _ in range(8):
        ctl.observe(1, 1, 1, 0.0050, 0.0039, 100, setup_s=0.0045)
    assert ctl.draft_cost == pytest.approx(draft) and ctl.verify_cost(2) == pytest.approx(verify2)
    assert ctl.acceptance_at(1) > acc + 0.1
    ctl.observe(1, 1, 1, 0.0050, 0.0039, 100)  # the same step without a catch-up is a cost like any other
    assert ctl.draft_cost > draft and ctl.verify_cost(2) > verify2


def test_drafting_starts_on_a_clear_gain_and_goes_on_while_it_does_not_lose():
    """Hysteresis: from plain decoding, a predicted gain under PLAIN_MARGIN (here ~2%) is not worth resuming the draft
    (its catch-up and the cache it takes cost a few percent); once drafting, it goes on at the same prediction."""
    ctl = AdaptiveK()
    for i in range(60):  # acceptance 0.5 (after a pass and after a miss): k=1 gives 1.5 tokens for 0.4 + 3.9 ms
        ctl.choose(100)  # against 1 for 2.9 (+1.2%)
        ctl.observe(1, 1, int(i % 4 < 2), 0.0004, 0.0039, 100)
    for d in range(2, ctl.k_max + 1):  # longer passes cost 1 ms a position more (measured from prompt lookup's)
        ctl.observe_verify(d, 0.0029 + 0.001 * d, 100)
    for _ in range(ctl.PLAIN_SETTLE + 1):
        ctl.observe(0, 0, 0, 0.0, 0.0029, 100)
    assert 0 < ctl.rate(1, ctl.acceptances(1)) * 0.0029 - 1 < ctl.PLAIN_MARGIN
    ctl.history.append(1)  # the last step drafted
    assert ctl.best_k() > 0
    ctl.history.append(0)  # the last step was plain
    assert ctl.best_k() == 0


def test_the_draft_model_says_when_a_proposal_first_caught_up(tiny_engine):
    """Proposal.setup_s: the draft's first proposal of a reply reads the prompt, and one after plain steps reads the
    tokens decoded meanwhile; a proposal right after a drafted step reads only the 1-2 new ones."""
    from specdesk.core.kcontrol import FixedK

    plan = [2, 2, 2, 0, 0, 0, 0, 0, 2, 2]

    class Scripted(FixedK):
        def __init__(self):
            super().__init__(0)
            self.setups: list[float] = []

        def plan(self, context_len=0, confidence=False, hint=()):
            return plan[min(len(self.setups), len(plan) - 1)], None

        def observe(self, k, drafted, accepted, draft_s, verify_s, context_len=0, confidences=(), setup_s=0.0,
                    other_s=0.0):
            self.setups.append(setup_s if drafted else None)
            self.others.append(other_s)

    ctl = Scripted()
    ctl.others = []
    r = tiny_engine.generate("def fibonacci(n):\n    ", drafter="model", controller=ctl, max_new_tokens=30)
    assert len(ctl.setups) >= len(plan) and r.stats.drafted > 0
    s = ctl.setups
    assert s[0] > 0 and s[1] == 0 and s[2] == 0 and s[3:8] == [None] * 5 and s[8] > 0 and s[9] == 0
    # the loop's own time between a pass and the next draft: none before the first step, then measured
    assert ctl.others[0] == 0 and all(o > 0 for o in ctl.others[1:])
    assert sum(ctl.others) < r.stats.decode_seconds - r.stats.draft_seconds - r.stats.verify_seconds + 1e-9


def test_costs_not_measured_lately_move_with_the_machines_speed():
    """AdaptiveK.speed: a pass over m positions is learnt only in steps that make one. Here drafting 2 tokens pays
    (3.6 ms a pass over 3, 0.8 ms a drafted token, plain 3 ms); then another program holds the CPU while k=auto
    drafts (every cost x3), then the machine is quiet again and k=auto decodes plainly. Without the speed factor the
    drafted steps' costs stayed at the busy stretch's figures and plain decoding looked better for good; with it,
    the quiet plain passes bring every cost back down and drafting resumes."""
    def run(rate):
        ctl = AdaptiveK()
        ctl.SPEED_RATE = rate
        for _ in range(24):
            ctl.observe(0, 0, 0, 0.0, 3.0e-3, 100)
        accepted = [2, 0, 1, 2, 2, 1, 0, 2]
        for i in range(40):
            ctl.observe(2, 2, accepted[i % 8], 0.8e-3, 3.6e-3, 100)
        before = ctl.best_k()
        busy = []
        for i in range(40):
            ctl.observe(2, 2, accepted[i % 8], 2.4e-3, 10.8e-3, 100)
            busy.append(ctl.speed)
        for _ in range(40):
            ctl.observe(0, 0, 0, 0.0, 3.0e-3, 100)
        ctl.history.append(0)  # decoding plainly: resuming must clear PLAIN_MARGIN
        return before, ctl.best_k(), ctl, busy

    before, after, ctl, busy = run(AdaptiveK.SPEED_RATE)
    assert before > 0 and after > 0
    assert busy[-1] > 2.0  # the factor followed the busy stretch (its start also raised the lines a little) ...
    assert ctl.speed < 1.3 and ctl.verify_cost(3) < 1.5 * 3.6e-3  # ... and came back with the quiet plain passes
    before, after, ctl, _ = run(0.0)  # a factor held at 1: the costs of the busy stretch stay
    assert before > 0 and after == 0 and ctl.verify_cost(3) > 2 * 3.6e-3


def test_a_size_priced_above_a_larger_one_takes_the_larger_ones_figure():
    """Timing noise only adds, and a pass size made seldom keeps what its few steps met: here one slow 3-position
    pass (7.5 ms) beside 4- and 5-position passes at 5.1 and 5.6 ms. The 3-position cost is 5.1 ms for every use
    (verify_costs, best_k, step_cost), where raising the larger sizes to it priced every draft of 2-4 tokens as
    dear and (demo pair, editing) kept k=auto drafting one token a step."""
    ctl = AdaptiveK()
    for _ in range(20):
        ctl.observe(0, 0, 0, 0.0, 4.0e-3, 100)
    for i in range(30):
        ctl.observe(3, 3, [3, 2, 3, 1][i % 4], 1.5e-3, 5.1e-3, 100)
    for i in range(10):
        ctl.observe(4, 4, [4, 3, 4, 2][i % 4], 2.0e-3, 5.6e-3, 100)
    ctl.observe(2, 2, 2, 1.0e-3, 7.5e-3, 100)
    assert ctl.verify_cost(3) == pytest.approx(7.5e-3)  # the raw line keeps its one slow sample ...
    v = ctl.verify_costs()
    assert v[2] == pytest.approx(5.1e-3) and v[3] == pytest.approx(5.1e-3) and v[4] == pytest.approx(5.6e-3)
    assert ctl.step_cost(2) == pytest.approx(2 * ctl.draft_cost + 5.1e-3 + ctl.step_overhead)  # ... no use does
    assert all(a <= b for a, b in zip(v, v[1:])) and v[0] == pytest.approx(4.0e-3)
    assert ctl.best_k() >= 2


def test_the_loops_own_time_per_step_counts_for_drafting():
    """Every step costs the loop's own work besides the draft and the pass (``other_s``); a step that emits two
    tokens pays it once, so it makes drafting worth more against plain decoding: here k=1 predicted 1.03x of plain
    without it (under PLAIN_MARGIN: plain decoding) and 1.05x with 0.15 ms a step (drafting)."""
    def taught(other_s):
        ctl = AdaptiveK()
        for _ in range(20):
            ctl.observe(0, 0, 0, 0.0, 2.5e-3, 100, other_s=other_s)
        for i in range(24):
            ctl.observe(1, 1, i % 2, 0.45e-3, 3.57e-3, 100, other_s=other_s)
        for i in range(24):
            ctl.observe(2, 2, [2, 0, 1, 0][i % 4], 0.9e-3, 4.4e-3, 100, other_s=other_s)
        for i in range(24):
            ctl.observe(3, 3, [3, 0, 1, 0][i % 4], 1.35e-3, 5.0e-3, 100, other_s=other_s)
        ctl.context = 100
        return ctl

    without, with_loop = taught(0.0), taught(0.15e-3)
    assert without.step_cost(0) == pytest.approx(2.5e-3) and with_loop.step_cost(0) == pytest.approx(2.65e-3)
    assert with_loop.step_cost(1) == pytest.approx(without.step_cost(1) + 0.15e-3)
    assert without.rate(1) * without.step_cost(0) == pytest.approx(1.03, abs=0.005)
    assert with_loop.rate(1) * with_loop.step_cost(0) == pytest.approx(1.053, abs=0.005)
    assert without.choose(100) == 0 and with_loop.choose(100) == 1
    assert with_loop.best_rate == pytest.approx(with_loop.rate(1))  # the argmax prices steps the same way
    copy = AdaptiveK()
    copy.learn_costs_from(with_loop)  # warm_up's lesson hands it on
    assert copy.step_overhead == pytest.approx(0.15e-3)


def test_stepped_verify_costs_draft_up_to_the_step_and_not_past_it():
    """Costs that come in steps (2-4 positions ~ 2, 5 ~ 8): with tokens passing 3 times in 4, drafting 3 is the best
    fixed k (predicted 119 tokens/s, against 116 for 2 and 90 for 4), and drafting by confidence goes on to 3 and
    stops there. The least-squares slope it used before (~3.3 ms a position here, against the 1.5 ms that the 3rd and
    4th positions really cost) stopped every draft after its first token."""
    ctl = AdaptiveK()
    _learn_stepped(ctl, alpha=0.75)
    assert ctl.best_k() == 3
    k, keep = ctl.plan(100, confidence=True)
    assert keep is not None
    assert keep(1, 0.75) and keep(2, 0.75)  # on to 3 tokens: 4 positions, the same tile
    assert not keep(3, 0.75)  # a 4th token would need a pass over 5


def test_a_free_continuation_is_cut_where_verify_costs_step_up_unless_it_nearly_always_passes():
    ctl = AdaptiveK()
    _learn_stepped(ctl, alpha=0.75)
    assert ctl.free_length(8) == 3  # the prior (0.8 a token): 4 positions, the last that fit the first tile
    assert ctl.free_length(2) == 2
    rng = random.Random(0)
    for _ in range(60):  # lookup's continuations pass about a third of their tokens
        ctl.observe_verify(8, _stepped(9), 100, accepted=rng.choice([0, 0, 1, 2, 8]))
    assert 1 <= ctl.free_length(8) <= 3
    for _ in range(200):  # now every token passes
        ctl.observe_verify(8, _stepped(9), 100, accepted=8)
    assert ctl.free_length(8) == 7  # 8 positions fill the second tile; a 9th would start a third
    assert ctl.free_length(5) == 3  # 5 would take 6 positions: a second tile for 2 more tokens does not pay


def test_a_lesson_steps_through_its_schedule_then_decodes_plainly_and_says_when_it_is_done():
    import threading

    from specdesk.core.adaptive import Lesson

    ctl, done = AdaptiveK(), threading.Event()
    ctl.observe(2, 2, 2, 0.002, 0.01)  # acceptance from before the lesson is forgotten
    lesson = Lesson(ctl, (0, 1, 3), done)
    assert all(a.w == 0 for table in ctl.acc_by_state for a in table[2:])  # only the prior is left
    assert all(abs(table[1].s / table[1].w - ctl.prior_acceptance) < 1e-9 for table in ctl.acc_by_state)
    ks = []
    for _ in range(3):
        ks.append(lesson.plan(50, True, (7, 8))[0])
        assert not done.is_set()
        lesson.observe(ks[-1], ks[-1], 0, 0.001 * ks[-1], 0.01, 50)
    assert ks == [0, 1, 3] and lesson.done and done.is_set()
    assert lesson.plan(60)[0] == 0  # past the schedule: plain


def test_warm_up_teaches_k_auto_the_costs_not_the_acceptance_and_changes_no_output():
    """Engine.warm_up (the app runs it after a load) pays first-call costs, then a lesson (adaptive.Lesson: plain
    steps and k = 1 .. 4) teaches what passes over 1 .. 5 positions and a drafted token cost. Each greedy k=auto
    or sampled k=auto controller made after it starts from those costs (its first step is the model's choice, not
    k_init), from a copy (later replies do not change the lesson), with none of the lesson's acceptance; a tree's
    (whose passes verify leaves too) and prompt lookup's drafting (microseconds) learn their own. The tokens are the
    same as on an engine never warmed."""
    import specdesk
    from specdesk.core.settings import GenerationSettings

    cold, warm = (specdesk.load("demo-target", "demo-draft", drafter="model", device="cpu") for _ in range(2))
    warm.warm_up()
    taught = warm._costs
    assert all(taught.verify[m].seen for m in range(1, 6)) and taught.draft_cost is not None
    assert warm._adaptive == {}
    v1, d = taught.verify[1].at(40), taught.draft_cost
    before = [(line.w, line.sy) for line in taught.verify + [taught.draft]]
    a = cold.generate(PROMPTS[0], max_new_tokens=24, k="auto")
    b = warm.generate(PROMPTS[0], max_new_tokens=24, k="auto")
    assert a.token_ids == b.token_ids
    assert a.steps[0].k == AdaptiveK().k_init
    # it went on learning (on whichever lines its steps touched: on some CPUs the taught costs keep it plain) ...
    went = warm._adaptive[("model", "greedy")]
    assert sum(line.w for line in went.verify + [went.draft]) > sum(w for w, _ in before)
    assert [(line.w, line.sy) for line in taught.verify + [taught.draft]] == before  # ... on its own copy
    untaught, fresh = AdaptiveK(), AdaptiveK()
    fresh.learn_costs_from(taught)
    assert untaught.choose(20) == untaught.k_init and not untaught.speculating
    fresh.choose(20)
    assert fresh.speculating or fresh.plain_streak == 1  # its first step is the cost model's choice
    new = warm._controller(GenerationSettings(k="auto"), "model+lookup")
    assert new.verify[2].at(40) == taught.verify[2].at(40) and new.draft_cost == d
    assert all(x.w == 0 for table in new.acc_by_state for x in table)
    sampled = warm._controller(GenerationSettings(k="auto", temperature=0.7), "model")
    assert sampled.draft_cost == d and sampled.verify[2].at(40) == taught.verify[2].at(40)
    assert warm._controller(GenerationSettings(k="auto", tree="2"), "model").draft_cost is None
    ngram = warm._controller(GenerationSettings(k="auto"), "ngram")
    assert ngram.draft_cost is None and ngram.verify[1].at(40) == v1


def _reply(ctl: AdaptiveK, rng: random.Random, alpha: float, steps: int) -> list[int]:
    """One reply's steps at per-token acceptance ``alpha``, with q4 SmolLM2's costs on a 2-core AMD EPYC (a plain
    pass 3.7 ms, 4.2 for 2 positions, 4.5 for 3, +0.6 a position after; 0.4 ms a drafted token): k per step."""
    ctl.reset_acceptance()
    ks = []
    for step in range(steps):
        k = ctl.choose(100 + step)
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        verify = (3.7, 4.2, 4.5)[k] if k < 3 else 4.5 + 0.6 * (k - 2)
        ctl.observe(k, k, n, 0.0004 * k, verify / 1000, 100 + step)
        ks.append(k)
    return ks


def test_a_new_reply_starts_from_the_drafts_acceptance_over_many_replies_not_the_last_ones():
    """A reply the draft does poorly on (a rewriting task) says little about the next prompt. Kept at a quarter of
    its weight, such a reply kept the next replies plain in a chat bench (q4 SmolLM2, AMD EPYC: three replies where
    k=2 ran 1.4-2.0x of plain), probes then coming every 32-256 plain steps. A new reply starts from the draft's
    acceptance over many replies, and its probes from the shortest interval."""
    rng = random.Random(11)
    ctl = AdaptiveK()
    for _ in range(8):
        ks = _reply(ctl, rng, 0.6, 60)
    assert sum(k > 0 for k in ks[-30:]) >= 25  # at 0.6 the draft pays: k=auto drafts
    poor = _reply(ctl, rng, 0.1, 300)
    assert poor[-40:].count(0) >= 35  # at 0.1 it does not: plain but for a probe
    assert ctl.probe_every > ctl.probe_min  # long plain stretches probe ever more seldom
    nxt = _reply(ctl, rng, 0.6, 30)
    assert nxt[0] > 0  # the next prompt is drafted for at once
    assert sum(k > 0 for k in nxt) >= 25
    assert ctl.probe_every == ctl.probe_min


def test_a_reply_whose_first_drafts_failed_by_chance_drafts_again_within_it():
    """Decoding plainly judges nothing, so a_j stayed where a reply's first few drafts left it: four rejections in a
    row (a 0.45-0.5 acceptance's luck at a reply's start; three here) kept k=auto plain until a probe 32 steps on, and a failed
    probe doubled that (q8 SmolLM2 with its draft, the bench's hand-written chat prompts: k=auto 1.04x of plain where
    k=1 ran 1.21x). While plain, a_j goes back toward the reply's own acceptance (the long-run one worth REPLY_PRIOR
    judged steps, with this reply's judged steps), so drafting resumes within the reply; a reply the draft keeps
    failing on stays plain (the test above)."""
    def reply(ctl: AdaptiveK, rng: random.Random, alpha: float, steps: int, bad_start: int = 0) -> list[int]:
        # q8 SmolLM2's costs on a 2-core AMD EPYC: a pass 7.1 ms, +1.7 a further position; 0.5 ms a drafted token
        ctl.reset_acceptance()
        ks, drafted = [], 0
        for step in range(steps):
            k = ctl.choose(100 + step)
            n = 0
            while n < k and drafted >= bad_start and rng.random() < alpha:
                n += 1
            drafted += k > 0
            ctl.observe(k, k, n, 0.0005 * k, (7.1 + 1.7 * k) / 1000, 100 + step)
            ks.append(k)
        return ks

    runs = []
    for seed in range(6):
        rng = random.Random(seed)
        ctl = AdaptiveK()
        for _ in range(6):
            reply(ctl, rng, 0.5, 96)
        ks = reply(ctl, rng, 0.5, 96, bad_start=3)
        assert ks[:3].count(0) == 0  # it drafts from the start, and the first three drafts all fail
        runs.append(sum(k > 0 for k in ks[8:40]))
    # steps 8-40 (where the old controller decoded plainly until its probe): drafted on most of them
    assert sum(runs) >= 6 * 16, runs  # 121 of 192 (29, 2, 29, 24, 5, 32); without the return 46
