"""Whole generations at temperature > 0 follow the target's exact distribution (chi-square, fixed seeds).

A target and a different draft with an 8-token vocabulary; the exact joint law of the first k + 1 tokens
(k = 2..4, so every drafted position of the first step is verified) is computed from the target alone and
compared with 1,200-1,500 speculative generations. ``tests/test_verify_exact.py`` proves the rule's law exactly.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

import specdesk
from specdesk.core.sampling import SamplingConfig, process_logits
from tests.conftest import make_llama

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Models this small gain nothing from a second thread, and thousands of generations pay its hand-offs:
    42 s for this module on 1 thread against 54-82 s on 2 (quiet machine; OpenMP spinning or sleeping)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_vocab_tokenizer(dest):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="a"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(dest)


@pytest.fixture(scope="module")
def tiny_vocab_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("tinyvocab")
    paths = []
    for name, seed, hidden in (("t", 11, 32), ("d", 12, 16)):
        p = make_llama(root / name, hidden=hidden, layers=1, heads=2, kv_heads=1, intermediate=32, seed=seed,
                       vocab_rows=len(WORDS), init_std=0.3, tokenizer="none", eos=None)
        tiny_vocab_tokenizer(p)
        paths.append(p)
    return specdesk.load(str(paths[0]), str(paths[1]), device="cpu")


def exact_law(engine, prompt_ids, cfg, length: int) -> dict:
    """{first ``length`` tokens: probability} under the target alone, through the prefix tree (zero branches cut)."""
    model = engine.target.model
    law = {(): 1.0}
    with torch.inference_mode():
        for _ in range(length):
            prefixes = list(law)
            ids = torch.tensor([prompt_ids + list(p) for p in prefixes])  # (N, T): one batched forward per level
            probs = process_logits(model(input_ids=ids).logits[:, -1], cfg).double()  # (N, V)
            probs /= probs.sum(-1, keepdim=True)
            law = {p + (t,): law[p] * float(probs[i, t]) for i, p in enumerate(prefixes)
                   for t in range(len(WORDS)) if probs[i, t] > 0}
    return law


def exact_two_token_law(engine, prompt_ids, cfg):
    return exact_law(engine, prompt_ids, cfg, 2)


def chi_square_p(law: dict, counts: dict, n: int) -> float:
    """p-value of observed counts against the exact law; cells under 5 expected pooled into one."""
    cells = [c for c in law if law[c] * n >= 5]
    observed = [counts.get(c, 0) for c in cells] + [n - sum(counts.get(c, 0) for c in cells)]
    expected = [law[c] * n for c in cells] + [n - sum(law[c] * n for c in cells)]
    if expected[-1] < 1e-9:
        observed, expected = observed[:-1], expected[:-1]
    assert abs(sum(observed) - sum(expected)) < 1e-6
    assert len(cells) >= 8  # enough cells for the test to see the joint law
    return float(chisquare(observed, expected)[1])


@pytest.mark.parametrize("cfg,drafter,k,n", [
    (SamplingConfig(temperature=1.0, top_k=3), "model", 2, 1500),
    (SamplingConfig(temperature=0.8, top_k=4, top_p=0.9), "model", 3, 1500),
    (SamplingConfig(temperature=1.2, top_k=3), "model", 4, 1200),
    (SamplingConfig(temperature=1.3, top_k=3, top_p=0.95), "ngram", 4, 1500),
    (SamplingConfig(temperature=1.0, top_k=3), "model+lookup", 3, 1200),
], ids=["model-k2-topk", "model-k3-topk-topp", "model-k4-topk", "lookup-k4-topk-topp", "model+lookup-k3-topk"])
def test_first_k_plus_1_tokens_follow_the_target(tiny_vocab_pair, cfg, drafter, k, n):
    """max_new_tokens = k + 1, so the first step drafts k tokens and every drafted position is verified
    (accepted prefix, first rejection, residual, bonus); the joint law of all k + 1 tokens is the target's."""
    engine = tiny_vocab_pair
    prompt = [1, 2, 3, 1, 2, 3, 4, 1, 2]  # repeats, so prompt lookup proposes (its k tokens are point masses)
    law = exact_law(engine, prompt, cfg, k + 1)
    counts: dict = {}
    first_step_drafts = [0] * (k + 1)
    for seed in range(n):
        r = engine.generate(prompt, max_new_tokens=k + 1, temperature=cfg.temperature, top_k=cfg.top_k,
                            top_p=cfg.top_p, seed=seed, k=k, drafter=drafter)
        counts[tuple(r.token_ids)] = counts.get(tuple(r.token_ids), 0) + 1
        first_step_drafts[r.steps[0].drafted] += 1
    assert first_step_drafts[k] > n // 2  # k tokens really were drafted and verified at once
    p = chi_square_p(law, counts, n)
    assert p > 1e-3, (p, counts)


def test_proposals_from_the_targets_phrases_keep_its_law(tiny_vocab_pair):
    """Drafter "phrases": a table's continuation (point masses, as prompt lookup's) where the prompt repeats nothing."""
    from specdesk.core import phrases

    engine = tiny_vocab_pair
    prompt = [1, 2, 3, 4]
    engine.phrases = phrases.build([(prompt, [5, 6, 7, 0, 1])], min_count=1, min_share=0.0)
    try:
        cfg, k, n = SamplingConfig(temperature=1.0, top_k=3), 3, 1200
        law = exact_law(engine, prompt, cfg, k + 1)
        counts: dict = {}
        drafted = 0
        for seed in range(n):
            r = engine.generate(prompt, max_new_tokens=k + 1, temperature=1.0, top_k=3, seed=seed, k=k,
                                drafter="phrases")
            counts[tuple(r.token_ids)] = counts.get(tuple(r.token_ids), 0) + 1
            drafted += r.steps[0].drafted == k
    finally:
        engine.phrases = None
    assert drafted == n  # the table proposed 5 6 7 every time
    p = chi_square_p(law, counts, n)
    assert p > 1e-3, (p, counts)


def test_a_biased_sampler_would_fail(tiny_vocab_pair):
    """The check has teeth: taking the draft's proposals unconditionally is detected."""
    engine = tiny_vocab_pair
    cfg = SamplingConfig(temperature=1.0)
    law = exact_two_token_law(engine, [1, 2, 3, 1, 2], cfg)
    draft = engine.draft.model
    g = torch.Generator().manual_seed(0)
    counts = dict.fromkeys(law, 0)
    n = 2000
    with torch.inference_mode():
        for _ in range(n):
            ids = [1, 2, 3, 1, 2]
            for _ in range(2):
                p = process_logits(draft(input_ids=torch.tensor([ids])).logits[0, -1], cfg)
                ids.append(int(torch.multinomial(p, 1, generator=g)))
            counts[tuple(ids[-2:])] += 1
    assert chi_square_p(law, counts, n) < 1e-3


class _StopWhenUnsure:
    """Drafts up to 2 tokens but stops after a token the draft gave probability < 0.35 (its own choice,
    made after seeing the token): the length of a draft depends on what was drafted, as with k=auto."""

    def __init__(self) -> None:
        self.stopped = self.went_on = 0

    def plan(self, context_len=0, confidence=False, hint=()):
        return 2, (self.keep if confidence else None)

    def keep(self, j: int, p: float, token: int) -> bool:
        go = p >= 0.35
        self.stopped += not go
        self.went_on += go
        return go

    def observe(self, *args, **kwargs) -> None:
        pass


def test_stopping_a_draft_by_its_confidence_keeps_the_target_law(tiny_vocab_pair):
    """Three tokens per generation, so the first step may draft two; the first two tokens' law is the
    target's whether the second came from the draft (verified) or from the target after an early stop."""
    from specdesk.core.events import DoneEvent

    engine = tiny_vocab_pair
    cfg = SamplingConfig(temperature=1.0)
    prompt = [1, 2, 3, 1, 2]
    law = exact_two_token_law(engine, prompt, cfg)
    counts = dict.fromkeys(law, 0)
    ctl = _StopWhenUnsure()
    n = 2000
    for seed in range(n):
        done = [ev for ev in engine.stream(prompt, controller=ctl, max_new_tokens=3, temperature=1.0, seed=seed,
                                           k=2, drafter="model") if isinstance(ev, DoneEvent)][0]
        counts[tuple(done.token_ids[:2])] += 1
    assert ctl.stopped > n // 10 and ctl.went_on > n // 10  # both branches were taken often
    p = chi_square_p(law, counts, n)
    assert p > 1e-3, (p, counts)
