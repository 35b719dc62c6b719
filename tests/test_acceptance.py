"""The accept/resample rule reproduces the processed target distribution exactly (analytically)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdesk.core.acceptance import (accept_probability, one_hot, residual_distribution, verify_greedy,
                                      verify_sampled)
from specdesk.core.sampling import SamplingConfig, process_logits

logit_lists = st.integers(2, 9).flatmap(
    lambda v: st.tuples(st.lists(st.floats(-6, 6), min_size=v, max_size=v),
                        st.lists(st.floats(-6, 6), min_size=v, max_size=v)))
configs = st.builds(SamplingConfig, temperature=st.floats(0.2, 3.0), top_k=st.integers(0, 9),
                    top_p=st.floats(0.05, 1.0))


def one_step_output_distribution(p_target: torch.Tensor, p_draft: torch.Tensor) -> torch.Tensor:
    """Exact law of the token emitted at a drafted position, using the implementation's own rule:
    sum over draft tokens x of p_draft(x) * [a(x) * delta_x + (1 - a(x)) * residual]."""
    vocab = p_target.shape[0]
    xs = torch.arange(vocab)
    a = accept_probability(p_target.expand(vocab, vocab), p_draft.expand(vocab, vocab), xs)  # (V,)
    r = residual_distribution(p_target, p_draft)  # (V,)
    keep = p_draft * a  # mass of emitting x itself, accepted
    reject = (p_draft * (1 - a)).sum()
    return keep + reject * r


@settings(max_examples=300, deadline=None)
@given(logit_lists, configs)
def test_one_step_reproduces_target_distribution(logits, cfg):
    lt, ld = (torch.tensor(x, dtype=torch.float64) for x in logits)
    p_t = process_logits(lt, cfg).double()
    p_d = process_logits(ld, cfg).double()
    out = one_step_output_distribution(p_t, p_d)
    assert torch.allclose(out, p_t, atol=1e-6), (out, p_t)


@settings(max_examples=200, deadline=None)
@given(logit_lists, configs, st.data())
def test_point_mass_proposal_reproduces_target_distribution(logits, cfg, data):
    """Prompt lookup proposes a token with no distribution: a point mass keeps the output exact."""
    lt, _ = (torch.tensor(x, dtype=torch.float64) for x in logits)
    p_t = process_logits(lt, cfg).double()
    x = data.draw(st.integers(0, p_t.shape[0] - 1))
    p_d = one_hot(torch.tensor([x]), p_t.shape[0])[0].double()
    out = one_step_output_distribution(p_t, p_d)
    assert torch.allclose(out, p_t, atol=1e-6)


def test_processing_matches_transformers_warpers():
    """Temperature, top-k, top-p in HF's order and semantics (ties at the k-th value kept)."""
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    torch.manual_seed(0)
    for _ in range(50):
        logits = torch.randn(1, 50) * 3
        cfg = SamplingConfig(temperature=0.7, top_k=int(torch.randint(0, 50, ())), top_p=float(torch.rand(())) * 0.9 + 0.1)
        x = TemperatureLogitsWarper(cfg.temperature)(None, logits.clone())
        if cfg.top_k:
            x = TopKLogitsWarper(cfg.top_k)(None, x)
        x = TopPLogitsWarper(cfg.top_p)(None, x)
        assert torch.allclose(process_logits(logits, cfg), x.softmax(-1), atol=1e-7)


def test_greedy_verify_counts_the_matching_prefix():
    target_argmax = torch.tensor([5, 6, 9, 1])
    assert verify_greedy(target_argmax, torch.tensor([5, 6, 7])) == (2, [5, 6, 9])
    assert verify_greedy(target_argmax, torch.tensor([5, 6, 9])) == (3, [5, 6, 9, 1])  # bonus token
    assert verify_greedy(target_argmax, torch.tensor([4, 6, 9])) == (0, [5])
    assert verify_greedy(target_argmax[:1], torch.tensor([], dtype=torch.long)) == (0, [5])


def test_sampled_verify_never_emits_a_zero_probability_token():
    g = torch.Generator().manual_seed(0)
    p_t = torch.tensor([[0.0, 0.5, 0.5, 0.0]] * 3)
    p_d = torch.tensor([[0.0, 0.0, 0.0, 1.0]] * 2)  # the draft always proposes an impossible token
    for _ in range(200):
        n, emitted = verify_sampled(p_t, p_d, torch.tensor([3, 3]), g)
        assert n == 0 and emitted[0] in (1, 2)


def test_the_sampler_draws_each_token_with_its_share_of_the_mass_and_never_one_without():
    """core/sampling.sample (inverse of the cumulative mass): frequencies over 40,000 draws per row within 4.5
    standard errors of p_i / total, for unnormalised rows with zero-mass tokens first, between and last."""
    from specdesk.core.sampling import sample

    g = torch.Generator().manual_seed(7)
    rows = torch.tensor([[0.0, 3.0, 0.0, 1.0, 0.5, 0.0], [0.2, 0.0, 0.0, 0.0, 0.0, 1e-3], [0.0, 0.0, 0.0, 0.0, 2.0, 0.0]])
    n = 40_000
    draws = sample(rows[None].expand(n, -1, -1), g)  # (n, 3): one draw per row
    assert draws.shape == (n, 3)
    for r in range(3):
        p = rows[r] / rows[r].sum()
        freq = torch.bincount(draws[:, r], minlength=6).double() / n
        assert torch.all(freq[p == 0] == 0), (r, freq)
        se = (p * (1 - p) / n).sqrt().double()
        assert torch.all((freq - p.double()).abs() <= 4.5 * se + 1e-9), (r, freq, p)
    assert sample(torch.tensor([0.0, 0.0, 1.0]), g).shape == ()  # one row in, one index out
