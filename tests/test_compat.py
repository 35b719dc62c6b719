"""Draft compatibility: refused with the first mismatching token named; padded embeddings are fine."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import specdesk
from specdesk.core.errors import IncompatibleDraft
from tests.conftest import PROMPTS, make_llama


def test_swapped_token_ids_are_refused_with_the_first_mismatch(tiny_target, tiny_draft, tmp_path):
    bad = tmp_path / "bad-draft"
    shutil.copytree(tiny_draft, bad)
    data = json.loads((bad / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    a, b = by_id[300], by_id[301]
    vocab[a], vocab[b] = 301, 300
    (bad / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(IncompatibleDraft) as err:
        specdesk.load(str(tiny_target), str(bad), device="cpu")
    msg = str(err.value)
    assert "token id 300" in msg and repr(a) in msg and repr(b) in msg
    assert "\n" not in msg


def test_different_eos_is_refused(tiny_target, tiny_draft, tmp_path):
    bad = tmp_path / "eos-draft"
    shutil.copytree(tiny_draft, bad)
    cfg = json.loads((bad / "tokenizer_config.json").read_text())
    data = json.loads((bad / "tokenizer.json").read_text())
    other = next(t for t, i in data["model"]["vocab"].items() if i == 5)
    cfg["eos_token"] = other
    (bad / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(IncompatibleDraft, match="end-of-sequence"):
        specdesk.load(str(tiny_target), str(bad), device="cpu")


def test_padded_embedding_rows_never_leak(models_dir, tiny_draft):
    """Like Qwen2.5-0.5B (151936 rows) and -7B (152064 rows): extra rows past the tokenizer are padding."""
    target = make_llama(models_dir / "padded-target", hidden=64, layers=2, seed=3, vocab_rows=4096 + 64)
    engine = specdesk.load(str(target), str(tiny_draft), device="cpu")
    assert engine.target.vocab == 4096 and engine.target.embedding_rows == 4160
    # Make the padding rows the most likely by far: a tool comparing all rows would emit them.
    hook = engine.target.model.lm_head.register_forward_hook(
        lambda mod, inp, out: out.index_add(-1, torch.arange(4096, 4160), torch.full(out.shape[:-1] + (64,), 1e4)))
    try:
        for drafter in ("model", "ngram", "none"):
            for temperature in (0.0, 1.0):
                r = engine.generate(PROMPTS[0], max_new_tokens=20, drafter=drafter, temperature=temperature, seed=0)
                assert r.token_ids and max(r.token_ids) < 4096
    finally:
        hook.remove()
