"""The law of ``verify_sampled`` itself, computed exactly by enumerating its random draws.

``verify_sampled`` draws one uniform per drafted token and then one categorical token (``acceptance.Draws``).
The outcome depends on each uniform only through which side of its acceptance probability it falls, so the
uniforms are enumerated as the intervals between this call's acceptance probabilities (with each interval's
length as its probability), and the categorical draw as every token (with its probability in the distribution
the rule passes). That covers the cumulative product (accepted prefix), the index of the first rejection, the
residual distribution and the bonus token, in the implementation's own code.

A small "world" of conditional distributions (target and draft, for every prefix of up to k tokens, after
temperature / top-k / top-p) stands in for the models. For every draft sequence (weighted by the draft's law;
prompt lookup: one fixed sequence, a point mass), the tokens verify emits are completed to k + 1 tokens by the
target's own law; the result must be the target's joint law of k + 1 tokens, to 1e-12.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
import torch

from specdesk.core import kernels
from specdesk.core.acceptance import accept_probability, one_hot, verify_sampled
from specdesk.core.sampling import SamplingConfig, process_logits

V = 5


class FixedDraws:
    """verify_sampled's draws, fixed: these uniforms, then token ``pick`` (the distribution passed is recorded)."""

    def __init__(self, u: torch.Tensor, pick: int) -> None:
        self.u, self.pick, self.dist = u, pick, None

    def uniform(self, n: int, device) -> torch.Tensor:
        assert n == self.u.shape[0]
        return self.u

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        self.dist = probs
        return torch.tensor([self.pick])


def verify_law(p_target: torch.Tensor, p_draft: torch.Tensor | None, tokens: torch.Tensor,
               draft_ids: torch.Tensor | None = None, draft_pos: torch.Tensor | None = None) -> dict:
    """{emitted tokens: probability} of one verify_sampled call, exactly (``draft_ids``, ``draft_pos``: p_draft over a
    reduced head's tokens, passed on)."""
    k = tokens.shape[0]
    law: dict[tuple, float] = defaultdict(float)
    if k == 0:
        branches = [(torch.zeros(0, dtype=torch.float64), 1.0)]
    else:
        pd = p_draft if p_draft is not None else one_hot(tokens, p_target.shape[-1]).double()
        a = accept_probability(p_target[:k], pd, tokens, draft_pos).tolist()
        cuts = sorted({0.0, 1.0, *a})
        intervals = [((lo + hi) / 2, hi - lo) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]
        branches = []
        for combo in itertools.product(intervals, repeat=k):
            u = torch.tensor([mid for mid, _ in combo], dtype=torch.float64)
            weight = 1.0
            for _, length in combo:
                weight *= length
            branches.append((u, weight))
    for u, weight in branches:
        for pick in range(p_target.shape[-1]):
            draws = FixedDraws(u, pick)
            n, emitted = verify_sampled(p_target, p_draft, tokens, None, draws=draws, draft_ids=draft_ids,
                                        draft_pos=draft_pos)
            mass = weight * float(draws.dist[pick])
            if mass > 0:
                law[tuple(emitted)] += mass
                assert emitted[:n] == tokens[:n].tolist()
    return law


def make_world(seed: int, cfg: SamplingConfig, depth: int):
    """Conditional distributions of a target and a draft for every prefix of length <= depth (float64)."""
    g = torch.Generator().manual_seed(seed)
    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(V), repeat=length):
            lt = torch.randn(V, generator=g, dtype=torch.float64) * 2
            ld = lt + torch.randn(V, generator=g, dtype=torch.float64) * 1.5  # a draft that half agrees
            for table, logits in ((target, lt), (draft, ld)):
                p = process_logits(logits, cfg).double()  # float32 from the real processing, renormalised in
                table[prefix] = p / p.sum()  # float64 so the law can be checked to 1e-12
    return target, draft


def target_law(target: dict, length: int) -> dict:
    law = {}
    for seq in itertools.product(range(V), repeat=length):
        p = 1.0
        for j in range(length):
            p *= float(target[seq[:j]][seq[j]])
        law[seq] = p
    return law


def completed_law(target: dict, draft: dict | None, k: int, lookup: tuple[int, ...] = ()) -> dict:
    """Law of the first k + 1 tokens: one verify step over drafted tokens, the rest from the target's own law."""
    law: dict[tuple, float] = defaultdict(float)
    drafts = [(tuple(lookup), 1.0)] if draft is None else []
    if draft is not None:
        for d in itertools.product(range(V), repeat=k):
            w = 1.0
            for j in range(k):
                w *= float(draft[d[:j]][d[j]])
            if w > 0:
                drafts.append((d, w))
    for d, w in drafts:
        p_target = torch.stack([target[d[:j]] for j in range(k + 1)])  # (k+1, V): after each drafted prefix
        p_draft = torch.stack([draft[d[:j]] for j in range(k)]) if draft is not None and k else None
        for emitted, mass in verify_law(p_target, p_draft, torch.tensor(d, dtype=torch.long)).items():
            for rest in itertools.product(range(V), repeat=k + 1 - len(emitted)):
                seq = emitted + rest
                p = w * mass
                for j in range(len(emitted), k + 1):
                    p *= float(target[seq[:j]][seq[j]])
                law[seq] += p
    return law


CONFIGS = [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=3),
           SamplingConfig(temperature=1.3, top_p=0.8), SamplingConfig(temperature=0.9, top_k=4, top_p=0.7)]


@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["t1", "topk", "topp", "topk-topp"])
def test_verify_sampled_with_a_draft_gives_the_target_law(cfg, k):
    target, draft = make_world(seed=10 + k, cfg=cfg, depth=k)
    want = target_law(target, k + 1)
    got = completed_law(target, draft, k)
    assert abs(sum(got.values()) - 1.0) < 1e-12
    assert max(abs(got.get(s, 0.0) - p) for s, p in want.items()) < 1e-12


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("cfg", CONFIGS[1:], ids=["topk", "topp", "topk-topp"])
def test_verify_sampled_with_prompt_lookup_point_masses_gives_the_target_law(cfg, k):
    target, _ = make_world(seed=20 + k, cfg=cfg, depth=k)
    want = target_law(target, k + 1)
    for lookup in ((0,) * k, tuple(range(k)), tuple(V - 1 - j for j in range(k))):  # likely, mixed, unlikely
        got = completed_law(target, None, k, lookup)
        assert max(abs(got.get(s, 0.0) - p) for s, p in want.items()) < 1e-12, lookup


def test_the_enumeration_has_teeth():
    """Keeping every drafted token (uniforms all 0) is not the target's law: the check above would see it."""
    cfg = SamplingConfig(temperature=1.0)
    target, draft = make_world(seed=3, cfg=cfg, depth=2)
    d = (1, 2)
    p_target = torch.stack([target[d[:j]] for j in range(3)])
    p_draft = torch.stack([draft[d[:j]] for j in range(2)])
    honest = verify_law(p_target, p_draft, torch.tensor(d))
    assert 0 < honest.get((1, 2, 0), 0) + honest.get((1, 2, 1), 0) < 1  # some mass on full acceptance, not all
    n, _ = verify_sampled(p_target, p_draft, torch.tensor(d), None, draws=FixedDraws(torch.zeros(2, dtype=torch.float64), 0))
    assert n == 2  # u = 0 accepts everything the draft could propose: a biased rule the law test rejects


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_reduced_heads_probabilities_passed_as_they_are_give_the_same_law(k):
    """A draft whose head holds some tokens only (0 elsewhere) passes its (k, H) probabilities with each token's
    column instead of widening them to the vocabulary: verify_sampled's law is the widened one's, outcome for
    outcome, and the target's."""
    head = torch.tensor([3, 0, 1])  # the head's token ids, in the head's own order
    cfg = CONFIGS[0]
    target, draft = make_world(seed=60 + k, cfg=cfg, depth=k)
    for prefix, p in draft.items():
        q = torch.zeros(V, dtype=torch.float64)
        q[head] = p[head]
        draft[prefix] = q / q.sum()
    checked = 0
    for d in itertools.product(head.tolist(), repeat=k):
        p_target = torch.stack([target[d[:j]] for j in range(k + 1)])
        wide = torch.stack([draft[d[:j]] for j in range(k)])  # (k, V)
        pos = torch.tensor([head.tolist().index(t) for t in d])
        law_wide = verify_law(p_target, wide, torch.tensor(d))
        law_reduced = verify_law(p_target, wide[:, head], torch.tensor(d), draft_ids=head, draft_pos=pos)
        assert law_wide.keys() == law_reduced.keys()
        assert max(abs(law_wide[e] - law_reduced[e]) for e in law_wide) < 1e-15
        checked += 1
    assert checked == 3 ** k


def _drafted(kind: str, case: int, p_t: torch.Tensor, rng: torch.Generator) -> tuple:
    """(p_draft, tokens, draft_ids, draft_pos) for k = len(p_t) - 1 drafted tokens against the target's rows ``p_t``:
    a draft over the whole vocabulary ("wide"), a reduced head over a third of it, or point masses; every third
    case a draft within 0.1% of the target (ratios near 1), every fourth point-mass case the target's likeliest tokens."""
    k, v = p_t.shape[0] - 1, p_t.shape[-1]
    none = torch.empty(0, dtype=torch.long)
    if kind == "point":
        if case % 4 == 0 and k:
            return None, p_t[:k].argmax(-1), None, None
        return None, torch.randint(3, v, (k,), generator=rng), None, None
    ids = None if kind == "wide" else torch.randperm(v, generator=rng)[: v // 3].sort().values
    cols = v if ids is None else ids.numel()
    p_d = torch.softmax(torch.randn(k, cols, generator=rng) * 2, -1)
    if case % 3 == 0:
        near = p_t[:k] if ids is None else p_t[:k, ids]
        # (a floor: where top-k / top-p leave the target no mass on a reduced head's tokens, a row still sums to 1)
        p_d = (near * (1 + 1e-3 * torch.randn(k, cols, generator=rng))).clamp_min(1e-12)
        p_d = (p_d / p_d.sum(-1, keepdim=True)).contiguous()
    pos = torch.multinomial(p_d, 1, generator=rng)[:, 0] if k else none
    return (p_d, pos, None, None) if ids is None else (p_d, ids[pos], ids, pos)


def _as_general_form(fast, p_t, p_draft, tokens, ids, pos, seed: int) -> int:
    """``fast(generator)`` against the general form (verify_sampled with its Draws) on the same rows and a generator
    seeded alike: the same outcome, and the generators left in the same state. Returns the tokens kept."""
    from specdesk.core.acceptance import Draws

    g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    got = fast(g1)
    want = verify_sampled(p_t, p_draft, tokens, g2, draws=Draws(g2), draft_ids=ids, draft_pos=pos)
    assert got == want, (seed, got, want)
    assert torch.equal(torch.rand(3, generator=g1), torch.rand(3, generator=g2))
    return got[0]


@pytest.mark.skipif(not kernels.available(), reason="the float32 CPU form runs with specdesk's own kernels")
@pytest.mark.parametrize("kind", ["wide", "reduced", "point"])
def test_the_cpu_form_gives_the_general_forms_outcome_draw_for_draw(kind):
    """verify_sampled on float32 CPU rows (no Draws given) reads the probabilities where they lie and compares in
    Python; with the same generator state it must give the general form's outcome and leave the generator where
    the general form does, accepts, rejections and bonus tokens alike (ratios near 1 included)."""
    rng = torch.Generator().manual_seed(7)
    seen = set()
    for case in range(300):
        v = 50 if case % 2 else 700
        k = case % 5
        p_t = torch.softmax(torch.randn(k + 1, v, generator=rng) * 2, -1)
        p_t[:, :3] = 0.0  # tokens with no mass
        p_t /= p_t.sum(-1, keepdim=True)
        p_d, tokens, ids, pos = _drafted(kind, case, p_t, rng)
        n = _as_general_form(lambda g: verify_sampled(p_t, p_d, tokens, g, draft_ids=ids, draft_pos=pos),
                             p_t, p_d, tokens, ids, pos, seed=1000 + case)
        seen.add((k, n == k))
    # every k with a rejection, and full accepts
    assert {(k, False) for k in range(1, 5)} | {(0, True), (1, True)} <= seen


@pytest.mark.skipif(not kernels.available(), reason="the one-call form runs with specdesk's own kernels")
@pytest.mark.parametrize("kind", ["wide", "reduced", "point"])
def test_from_the_logits_in_one_call_gives_the_general_forms_outcome_draw_for_draw(kind):
    """verify_sampled_logits (the target's bfloat16 logits, rows.c's sd_verify_sampled: each row's distribution at a
    temperature, with top-k and top-p, only when reached, the acceptance test in float32, the residual and the draw)
    gives what the general form gives on process_logits' distributions with the same generator state, and leaves the
    generator where it does: accepts, rejections, bonus tokens, ratios near 1; with float32 logits the draws made
    ahead go to the general form and the float32 CPU form."""
    from specdesk.core.acceptance import verify_sampled_logits
    from specdesk.core.sampling import SamplingConfig, process_logits

    rng = torch.Generator().manual_seed(11)
    seen = set()
    for case in range(300):
        v = 64 if case % 2 else 700
        k = case % 5
        cfg = SamplingConfig(temperature=(0.7, 1.0, 1.6)[case % 3], top_k=(0, 0, 5, 20)[case % 4],
                             top_p=0.8 if case % 5 == 2 else 1.0)
        logits = (torch.randn(k + 1, v, generator=rng) * 2).bfloat16()
        if case % 7 == 3:  # float32 logits: process_logits, then verify_sampled's CPU form with the draws made ahead
            logits = logits.float()
        p_t = process_logits(logits, cfg)
        p_d, tokens, ids, pos = _drafted(kind, case, p_t, rng)
        n = _as_general_form(lambda g: verify_sampled_logits(logits, cfg, p_d, tokens, g, draft_ids=ids,
                                                             draft_pos=pos), p_t, p_d, tokens, ids, pos, seed=2000 + case)
        seen.add((k, n == k))
    assert {(k, False) for k in range(1, 5)} | {(0, True), (1, True)} <= seen


@pytest.mark.skipif(not kernels.available(), reason="the one-call form runs with specdesk's own kernels")
def test_the_one_call_forms_acceptance_test_is_float32s_at_the_boundary():
    """sd_verify_sampled rejects a drafted token whose uniform equals min(1, pt / pd) in float32 exactly and accepts
    it one float32 step above that: the draft's probability is set so that the quotient is the uniform the generator
    will give."""
    from specdesk.core.acceptance import verify_sampled_logits
    from specdesk.core.sampling import SamplingConfig, process_logits

    cfg = SamplingConfig(temperature=0.8)
    logits = (torch.randn(2, 40, generator=torch.Generator().manual_seed(5)) * 2).bfloat16()
    pt = process_logits(logits, cfg)[0]
    tok = int(pt.argmax())
    ids = torch.tensor(sorted(set(range(0, 40, 3)) | {tok}))  # the reduced head's tokens; tok among them
    col = int((ids == tok).nonzero())
    done = {}
    for seed in range(40):
        u = float(torch.rand(1, generator=torch.Generator().manual_seed(seed)))
        pd = torch.tensor([pt[tok] / u], dtype=torch.float32)
        for _ in range(8):  # the float32 pd whose float32 quotient pt / pd is u exactly
            q = float(pt[tok] / pd)
            if q == u:
                break
            pd = torch.nextafter(pd, torch.tensor([0.0 if q < u else 2.0]))
        if float(pt[tok] / pd) != u or u >= 1.0:
            continue
        for at_u in (True, False):
            row = torch.full((1, ids.numel()), 1e-3)
            row[0, col] = pd if at_u else torch.nextafter(pd, torch.tensor([0.0]))  # quotient u, or a step above
            got = verify_sampled_logits(logits, cfg, row, torch.tensor([tok]), torch.Generator().manual_seed(seed),
                                        draft_ids=ids, draft_pos=torch.tensor([col]))
            done[(seed, at_u)] = got[0]
    assert len(done) >= 20
    assert all(n == (0 if at_u else 1) for (_, at_u), n in done.items())


def test_the_cpu_forms_acceptance_test_is_torchs_float32_one_at_the_boundary():
    """A uniform exactly at min(1, pt / pd) (float32) is rejected and one float32 step under it accepted, as torch's
    float32 quotient and comparison decide, for quotients that double arithmetic alone would round otherwise."""
    from specdesk.core.acceptance import _accepts

    g = torch.Generator().manual_seed(3)
    pt = torch.rand(2000, generator=g) ** 3
    pd = torch.rand(2000, generator=g) ** 3
    pd[:5] = 0.0  # guarded by tiny
    a = torch.clamp(pt / pd.clamp_min(torch.finfo(torch.float32).tiny), max=1.0)
    below = torch.nextafter(a, torch.zeros_like(a))
    off = 0
    for i in range(2000):
        x, y = float(pt[i]), float(pd[i])
        assert _accepts(float(a[i]), x, y) == bool(a[i] < a[i]) is False
        assert _accepts(float(below[i]), x, y) == bool(below[i] < a[i])
        off += float(a[i]) != min(1.0, x / max(y, 1e-38))  # where double's quotient is not float32's
    assert off > 500
