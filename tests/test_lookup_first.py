"""Drafter "model+lookup": prompt lookup's continuation where the context repeats, the draft model elsewhere.
Greedy output token-identical to the target alone with both kinds of proposal in one generation; lookup steps
teach an adaptive k only their verify cost (the sampled law: test_sampling_exact's model+lookup case)."""

from __future__ import annotations

import pytest

import specdesk
from specdesk.core.drafters import LookupFirstDrafter

EDIT = ("def area(width, height):\n    \"\"\"The area of a rectangle.\"\"\"\n    return width * height\n\n\n"
        "def area_v2(width, height):\n")
FREE = "# A docstring follows\n"


def _proposal_sources(monkeypatch, drafted_only: bool = False) -> list[bool]:
    """Each model+lookup proposal from now on: whether it was prompt lookup's (``drafted_only``: 1+ tokens only)."""
    sources: list[bool] = []
    propose = LookupFirstDrafter.propose

    def spy(self, *a, **kw):
        out = propose(self, *a, **kw)
        if len(out) or not drafted_only:
            sources.append(out.free)
        return out

    monkeypatch.setattr(LookupFirstDrafter, "propose", spy)
    return sources


@pytest.fixture(scope="module")
def demo():
    return specdesk.load("demo-target", device="cpu"), specdesk.load("demo-target", drafter="none", device="cpu")


def test_a_draft_model_drafts_with_prompt_lookup_beside_it_unless_told_otherwise(demo):
    """The default with a draft (greedy chat on q4 SmolLM2 with its distilled draft: 1.34x of plain against the draft
    alone's 1.21x, side by side); prompt lookup alone without one; an explicit choice stands."""
    from specdesk.core.pairing import resolve_drafter

    spec, plain = demo
    assert spec.drafter == "model+lookup" and plain.drafter == "none"
    assert resolve_drafter("t", "d", None) == ("model+lookup", "d")
    assert resolve_drafter("demo-target", None, None) == ("model+lookup", "demo-draft")
    assert resolve_drafter("t", None, None) == ("ngram", None)
    assert resolve_drafter("t", "d", "model") == ("model", "d")
    from specdesk.core.pairing import may_take_own_draft  # which requests look for the target's own distilled draft

    assert may_take_own_draft("t", None, None) and may_take_own_draft("t", None, "model+lookup")
    assert not may_take_own_draft("t", "d", None) and not may_take_own_draft("t", None, "ngram")
    assert not may_take_own_draft("t", None, "none") and not may_take_own_draft("demo-target", None, None)
    r = spec.generate(EDIT, max_new_tokens=24, k=4)  # the engine's own drafter: lookup's steps among the model's
    assert r.stats.drafted and any(s.lookup for s in r.steps)


def test_greedy_output_is_the_targets_with_both_kinds_of_proposal(demo, monkeypatch):
    spec, plain = demo
    sources = _proposal_sources(monkeypatch, drafted_only=True)
    for prompt in (EDIT, FREE):
        want = plain.generate(prompt, max_new_tokens=48).token_ids
        for k in (2, 4, "auto"):
            got = spec.generate(prompt, max_new_tokens=48, k=k, drafter="model+lookup")
            assert got.token_ids == want, (prompt, k)
    assert True in sources and False in sources  # lookup's and the model's proposals both verified


def test_each_step_says_whether_its_tokens_were_lookups(demo, monkeypatch):
    """StepEvent.lookup: the window's payoff monitor prices such a step as prompt lookup's, not the draft model's."""
    from specdesk.core.events import StepEvent

    spec, _ = demo
    sources = _proposal_sources(monkeypatch)  # an empty proposal is no lookup's (free is False)
    steps = [ev for ev in spec.stream(EDIT, max_new_tokens=48, k=4, drafter="model+lookup")
             if isinstance(ev, StepEvent)]
    assert [ev.lookup for ev in steps] == sources and any(sources) and not all(sources)
    model = [ev for ev in spec.stream(EDIT, max_new_tokens=48, k=4, drafter="model") if isinstance(ev, StepEvent)]
    assert model and not any(ev.lookup for ev in model)


def test_lookup_steps_teach_adaptive_k_only_their_verify_cost(demo, monkeypatch):
    from specdesk.core.adaptive import AdaptiveK

    spec, _ = demo
    calls: list[tuple[str, int]] = []
    sources = _proposal_sources(monkeypatch)
    observe, verify = AdaptiveK.observe, AdaptiveK.observe_verify

    def spy_observe(self, k, drafted, *a, **kw):
        calls.append(("model", drafted))
        return observe(self, k, drafted, *a, **kw)

    def spy_verify(self, drafted, *a, **kw):
        calls.append(("lookup", drafted))
        return verify(self, drafted, *a, **kw)

    monkeypatch.setattr(AdaptiveK, "observe", spy_observe)
    monkeypatch.setattr(AdaptiveK, "observe_verify", spy_verify)
    spec.generate(EDIT, max_new_tokens=48, k="auto", drafter="model+lookup")
    assert ("model+lookup", "greedy") in spec._adaptive  # its own controller, apart from the draft model's
    assert [kind == "lookup" for kind, _ in calls] == sources

    class AlwaysFour(AdaptiveK):  # k=auto's own plan follows measured costs (it may not draft at all on a fast
        def plan(self, context_len=0, confidence=False, hint=()):  # machine); this one always lets lookup in
            return 4, None

    calls.clear()
    sources.clear()
    spec.generate(EDIT, max_new_tokens=48, k="auto", drafter="model+lookup", controller=AlwaysFour())
    assert [kind == "lookup" for kind, _ in calls] == sources and any(sources) and not all(sources)


def test_where_k_auto_decodes_plainly_lookups_continuations_are_still_verified(demo, monkeypatch):
    """k=auto decodes plainly where the draft model does not pay (SmolLM2 q4 on 2 Xeon cores), but prompt lookup's
    tokens cost no draft: a step the controller gives the model nothing still verifies the continuation, as many of
    its tokens as pay (free_length), never past the reply's budget, and the model never runs."""
    from specdesk.core.adaptive import AdaptiveK
    from specdesk.core.drafters import ModelDrafter

    spec, plain = demo

    class Plain(AdaptiveK):  # a controller sure that the draft never pays
        def plan(self, context_len=0, confidence=False, hint=()):
            return 0, None

    model_calls: list[int] = []
    model_propose = ModelDrafter.propose

    def spy(self, ids, k, *a, **kw):
        model_calls.append(k)
        return model_propose(self, ids, k, *a, **kw)

    monkeypatch.setattr(ModelDrafter, "propose", spy)
    want = plain.generate(EDIT, max_new_tokens=48).token_ids
    got = spec.generate(EDIT, max_new_tokens=48, k="auto", drafter="model+lookup", controller=Plain())
    assert got.token_ids == want
    assert got.stats.drafted > 0 and got.stats.target_forwards < len(want)  # lookup's tokens verified and kept
    assert all(k == 0 for k in model_calls)  # the draft model was asked for nothing
    assert spec._drafter("model")._pending is not None  # ... and never read the prompt
