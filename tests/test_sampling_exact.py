"""Whole generations at temperature > 0 follow the target's exact distribution (chi-square, fixed seeds).

A target and a different draft with an 8-token vocabulary; the exact joint law of the first two
tokens is computed from the target alone and compared with 2,000 speculative generations.
"""

from __future__ import annotations


import pytest
import torch
from scipy.stats import chisquare

import specdesk
from specdesk.core.sampling import SamplingConfig, process_logits
from tests.conftest import make_llama

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]


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


def exact_two_token_law(engine, prompt_ids, cfg):
    model = engine.target.model
    with torch.inference_mode():
        p1 = process_logits(model(input_ids=torch.tensor([prompt_ids])).logits[0, -1], cfg)
        law = {}
        for t1 in range(len(WORDS)):
            p2 = process_logits(model(input_ids=torch.tensor([prompt_ids + [t1]])).logits[0, -1], cfg)
            for t2 in range(len(WORDS)):
                law[(t1, t2)] = float(p1[t1] * p2[t2])
    return law


@pytest.mark.parametrize("cfg,drafter,k", [
    (SamplingConfig(temperature=1.0), "model", 2),
    (SamplingConfig(temperature=0.7, top_k=5, top_p=0.9), "model", 3),
    (SamplingConfig(temperature=1.3), "ngram", 2),
])
def test_first_two_tokens_follow_the_target(tiny_vocab_pair, cfg, drafter, k):
    engine = tiny_vocab_pair
    prompt = [1, 2, 3, 1, 2]  # repeats, so prompt lookup also proposes
    law = exact_two_token_law(engine, prompt, cfg)
    counts = dict.fromkeys(law, 0)
    n = 2000
    drafted = 0
    for seed in range(n):
        r = engine.generate(prompt, max_new_tokens=2, temperature=cfg.temperature, top_k=cfg.top_k,
                            top_p=cfg.top_p, seed=seed, k=k, drafter=drafter)
        counts[tuple(r.token_ids)] += 1
        drafted += r.stats.drafted
    assert drafted > n // 2  # the rule was really exercised
    cells = [c for c in law if law[c] * n >= 5]  # chi-square needs expected counts >= 5; pool the rest
    observed = [counts[c] for c in cells] + [n - sum(counts[c] for c in cells)]
    expected = [law[c] * n for c in cells] + [n - sum(law[c] * n for c in cells)]
    if expected[-1] < 1e-9:
        observed, expected = observed[:-1], expected[:-1]
    assert abs(sum(observed) - sum(expected)) < 1e-6
    _, p = chisquare(observed, expected)
    assert p > 1e-3, (p, observed, expected)


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
    cells = [c for c in law if law[c] * n >= 5]
    observed = [counts[c] for c in cells] + [n - sum(counts[c] for c in cells)]
    expected = [law[c] * n for c in cells] + [n - sum(law[c] * n for c in cells)]
    _, p = chisquare(observed, expected)
    assert p < 1e-3


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
    cells = [c for c in law if law[c] * n >= 5]
    observed = [counts[c] for c in cells] + [n - sum(counts[c] for c in cells)]
    expected = [law[c] * n for c in cells] + [n - sum(law[c] * n for c in cells)]
    _, p = chisquare(observed, expected)
    assert p > 1e-3, (p, observed, expected)
