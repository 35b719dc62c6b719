"""A chat's next turn skips what the last generation read: the KV caches are kept between generations, and a
prompt that starts with the last prompt and reply (the conversation so far) reads only the rest.

On specdesk's own kernels (a q4 model on the CPU) every position is computed alone, so the kept keys and values
are bit for bit what a new prefill writes: checked here buffer by buffer, with the output, against an engine that
reads every prompt whole."""

from __future__ import annotations

import pytest
import torch

import specdesk
from specdesk.core.errors import OutOfMemory
from specdesk.core.membudget import MemoryBudget
from tests.conftest import PROMPTS, make_llama


@pytest.fixture(scope="module")
def q4_models(models_dir):
    target = make_llama(models_dir / "pc-target", hidden=128, layers=2, heads=2, kv_heads=1, intermediate=96, seed=25)
    draft = make_llama(models_dir / "pc-draft", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, seed=26)
    return str(target), str(draft)


def kv(seq) -> list[torch.Tensor]:
    dec = seq.decoder
    return [L[name][:, :, :dec.length] for L in dec.layers for name in ("k", "v")]


def same_bits(a, b) -> bool:
    return a.decoder.length == b.decoder.length and all(torch.equal(x, y) for x, y in zip(kv(a), kv(b)))


def common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_the_next_turn_reads_only_what_is_new_and_gets_the_bits_of_a_whole_prefill(q4_models):
    engine = specdesk.load(*q4_models, device="cpu", target_quant="q4", draft_quant="q4")
    whole = specdesk.load(*q4_models, device="cpu", target_quant="q4", draft_quant="q4")
    whole.reuse_cache = False
    assert engine.reuse_cache and not whole.reuse_cache
    first = engine.encode(PROMPTS[1])
    r1 = engine.generate(first, k=4, max_new_tokens=30)
    assert r1.stats.cached_prompt_tokens == 0 and r1.stop_reason == "max_new_tokens"
    # the next turn: the conversation so far (prompt and reply) and more; its buffers must grow (copied over)
    second = first + list(r1.token_ids) + engine.encode(PROMPTS[3])
    for kw in (dict(k=4), dict(k="auto"), dict(drafter="none"), dict(k=3, tree=(3, 2)), dict(drafter="ngram", k=3)):
        if kw.get("drafter") != "none":  # each run starts from the cache the first reply left
            engine.generate(first, k=4, max_new_tokens=30)
        got = engine.generate(second, max_new_tokens=40, **kw)
        want = whole.generate(second, max_new_tokens=40, **kw)
        assert got.stats.cached_prompt_tokens >= len(first) + len(r1.token_ids) - 1 if "drafter" not in kw else True
        assert want.stats.cached_prompt_tokens == 0
        assert got.token_ids == want.token_ids, kw
        assert same_bits(engine._runner.seq, whole._runner.seq), kw  # every kept and new position, bit for bit
    # a prompt the cache holds whole (the window's plain comparison of the reply just made): nothing read again
    again = engine.generate(second, drafter="none", max_new_tokens=40)
    assert again.stats.cached_prompt_tokens == len(second) - 1 and again.token_ids == want.token_ids
    # the draft model's cache is kept too, and holds what a draft reading everything holds
    engine.generate(first, k=4, max_new_tokens=30)
    got = engine.generate(second, k=4, max_new_tokens=40)
    want = whole.generate(second, k=4, max_new_tokens=40)
    assert got.token_ids == want.token_ids
    assert same_bits(engine._model_drafter.seq, whole._model_drafter.seq)
    # another prompt: only the tokens it shares with the last sequence are kept
    other = engine.encode(PROMPTS[0])
    r = engine.generate(other, k=4, max_new_tokens=10)
    assert r.stats.cached_prompt_tokens == common(other[:-1], second + list(got.token_ids))
    assert r.token_ids == whole.generate(other, k=4, max_new_tokens=10).token_ids
    assert same_bits(engine._runner.seq, whole._runner.seq)


def test_on_torchs_kernels_the_kept_cache_is_a_prefills_up_to_float_rounding(tiny_target, tiny_draft):
    # float32 on the CPU: batched products in a prefill, one row at a time in decoding steps
    engine = specdesk.load(str(tiny_target), str(tiny_draft), device="cpu")
    whole = specdesk.load(str(tiny_target), str(tiny_draft), device="cpu")
    whole.reuse_cache = False
    first = engine.encode(PROMPTS[0])
    r1 = engine.generate(first, k=4, max_new_tokens=24)
    second = first + list(r1.token_ids) + engine.encode(PROMPTS[2])
    got = engine.generate(second, k=4, max_new_tokens=24)
    whole.generate(second, k=4, max_new_tokens=24)
    assert got.stats.cached_prompt_tokens >= len(first) + len(r1.token_ids) - 1
    for a, b in ((engine._runner.seq, whole._runner.seq), (engine._model_drafter.seq, whole._model_drafter.seq)):
        assert a.decoder.length == b.decoder.length
        for x, y in zip(kv(a), kv(b)):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def test_a_broken_generation_leaves_nothing_to_reuse(q4_models):
    engine = specdesk.load(*q4_models, device="cpu", target_quant="q4", draft_quant="q4")
    ids = engine.encode(PROMPTS[2])
    r = engine.generate(ids, k=4, max_new_tokens=20)
    over = MemoryBudget(limit_bytes=0, read=lambda: 1)
    with pytest.raises(OutOfMemory):
        for _ in engine.stream(ids + list(r.token_ids), k=4, max_new_tokens=20, memory_budget=over):
            pass
    # the broken generation had read its prompt; what its cache holds past it is unknown: read everything again
    again = engine.generate(ids + list(r.token_ids), k=4, max_new_tokens=20)
    assert again.stats.cached_prompt_tokens == 0
    after = engine.generate(ids + list(r.token_ids), drafter="none", max_new_tokens=20)
    assert after.stats.cached_prompt_tokens == len(ids) + len(r.token_ids) - 1
    assert after.token_ids == again.token_ids
    engine.release_buffers()  # what the app does after an out-of-memory: nothing kept either
    assert engine.generate(ids, drafter="none", max_new_tokens=5).stats.cached_prompt_tokens == 0
