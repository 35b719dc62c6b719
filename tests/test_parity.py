"""Greedy speculative decoding is token-identical to the target decoding alone.

Reference: Hugging Face ``generate(do_sample=False)`` on the same target (same dtype, same device,
same quantization), which knows nothing of specdesk's caches, drafters or acceptance rule.
"""

from __future__ import annotations

import pytest
import torch

import specdesk
from tests.conftest import PROMPTS

N_NEW = 40


def reference(model, ids: list[int], n: int = N_NEW) -> list[int]:
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                             eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def references(tiny_engine):
    return {p: reference(tiny_engine.target.model, tiny_engine.encode(p)) for p in PROMPTS}


@pytest.mark.parametrize("drafter", ["model", "model+lookup", "ngram", "none"])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_parity_fp32(tiny_engine, references, drafter, k):
    for prompt in PROMPTS:
        got = tiny_engine.generate(prompt, max_new_tokens=N_NEW, k=k, drafter=drafter)
        # EOS may end ours early; the reference ran on regardless, so compare the common prefix length
        assert got.token_ids == references[prompt][: len(got.token_ids)], (drafter, k, prompt)
        assert len(got.token_ids) == N_NEW or got.stop_reason == "eos"
        if drafter == "none":
            assert got.stats.drafted == 0 and got.stats.target_forwards == len(got.token_ids)


def test_speculation_actually_happened(tiny_engine):
    """Parity would be trivial if nothing were accepted: check the draft did contribute on a repetitive prompt."""
    got = tiny_engine.generate(PROMPTS[2], max_new_tokens=N_NEW, k=4, drafter="ngram")
    assert got.stats.drafted > 0


def test_identical_draft_accepts_everything(tiny_target, tiny_target_copy):
    engine = specdesk.load(str(tiny_target), str(tiny_target_copy), device="cpu")
    for k in (1, 4, 8):
        got = engine.generate(PROMPTS[0], max_new_tokens=N_NEW, k=k)
        assert got.stats.acceptance_rate == 1.0
        assert got.stats.drafted > 0


@pytest.mark.parametrize("quant", ["nf4"])
def test_greedy_parity_bnb_4bit_target(tiny_target, tiny_draft, quant):
    engine = specdesk.load(str(tiny_target), str(tiny_draft), target_quant=quant, device="cpu")
    assert type(engine.target.model.model.layers[0].mlp.down_proj).__name__ == "Linear4bit"
    for prompt in PROMPTS[:3]:
        ids = engine.encode(prompt)
        ref = reference(engine.target.model, ids)
        for drafter, k in (("model", 4), ("ngram", 2), ("none", 1)):
            got = engine.generate(prompt, max_new_tokens=N_NEW, k=k, drafter=drafter)
            assert got.token_ids == ref[: len(got.token_ids)], (drafter, k, prompt)


def test_lean_draft_matches_transformers_logits(tiny_draft):
    """The draft's lean forward computes the same function as transformers (to float tolerance)."""
    from specdesk.core.fastdraft import LeanDecoder
    from specdesk.core.loading import load_model

    m = load_model(str(tiny_draft), device="cpu")
    ids = m.tokenizer(PROMPTS[1])["input_ids"]
    dec = LeanDecoder(m.model, capacity=256)
    with torch.inference_mode():
        ref = m.model(input_ids=torch.tensor([ids])).logits[0]  # (T, V)
    got_prefill = dec.forward(torch.tensor(ids[:-3]))
    assert torch.allclose(got_prefill, ref[len(ids) - 4], atol=1e-4)
    for j in range(len(ids) - 3, len(ids)):  # then one token at a time
        got = dec.forward(torch.tensor([ids[j]]))
        assert torch.allclose(got, ref[j], atol=1e-4)
    dec.crop(len(ids) - 1)  # roll back one position and recompute it
    assert torch.allclose(dec.forward(torch.tensor([ids[-1]])), ref[-1], atol=1e-4)


@pytest.mark.parametrize("quant", ["none", "nf4", "int8"])
def test_lean_target_matches_transformers_logits_at_every_position(tiny_target, quant):
    """The target's lean forward against transformers' with the same calls: prefill, verify 5, reject 2, verify them again.

    Plain weights or bitsandbytes modules. Same calls, because LLM.int8 picks its outlier columns over the
    rows of one call: its numbers depend on which positions are computed together, on any path.
    """
    from specdesk.core.loading import load_model
    from specdesk.core.target import TargetRunner

    m = load_model(str(tiny_target), quant=quant, device="cpu")
    ids = m.tokenizer(PROMPTS[1])["input_ids"]
    lean, ref = TargetRunner(m.model, m.vocab), TargetRunner(m.model, m.vocab, lean=False)
    assert lean.uses_lean_path and not ref.uses_lean_path
    outs = []
    for runner in (lean, ref):
        runner.prefill(ids[:-5], capacity=256)
        first = runner.verify(torch.tensor(ids[-5:]))  # (5, V)
        runner.rollback(2)
        outs.append((first, runner.verify(torch.tensor(ids[-2:]))))
    assert lean.seq.decoder.fused == (quant == "none")  # bitsandbytes layers run as modules, never copied
    for got, want in zip(outs[0], outs[1]):
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-4)
    if quant == "none":  # and a whole-sequence forward agrees too
        with torch.inference_mode():
            whole = m.model(input_ids=torch.tensor([ids])).logits[0, :, : m.vocab]  # (T, V)
        assert torch.allclose(outs[0][0], whole[-5:], atol=1e-4)


def test_transformers_target_path_keeps_parity(tiny_target, tiny_draft, references):
    """With the lean target path off, the target runs through transformers and our preallocated cache."""
    engine = specdesk.load(str(tiny_target), str(tiny_draft), device="cpu", lean_target=False)
    assert engine.describe()["lean_target"] is False
    for prompt in PROMPTS:
        for drafter, k in (("model", 4), ("ngram", 2), ("none", 1)):
            got = engine.generate(prompt, max_new_tokens=N_NEW, k=k, drafter=drafter)
            assert got.token_ids == references[prompt][: len(got.token_ids)], (drafter, k, prompt)


def test_engine_runs_the_target_on_the_lean_path(tiny_engine):
    assert tiny_engine.describe()["lean_target"] is True and tiny_engine.describe()["lean_draft"] is True
