"""Few-row products (core/fewrows.py): ``w @ x.T`` computes what F.linear does, the lean decoder gives the same
logits and greedy output either way, and the measured choice is kept per model (or set by SPECDESK_FEW_ROWS)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import specdesk
from specdesk.core import fewrows
from specdesk.core.fastdraft import LeanDecoder
from tests.conftest import PROMPTS


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("bias", [False, True])
def test_the_product_form_is_f_linear(n, bias):
    g = torch.Generator().manual_seed(n)
    x, w = torch.randn(n, 96, generator=g), torch.randn(300, 96, generator=g)
    b = torch.randn(300, generator=g) if bias else None
    got = fewrows.mm_linear(x, w, b)
    assert got.shape == (n, 300) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, w, b), atol=1e-4, rtol=1e-5)
    assert fewrows.linear(x[0], w, b, rows=8).shape == (300,)  # 1-D inputs keep F.linear


@pytest.fixture(scope="module")
def tiny_model(tiny_target):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_target).eval()


def test_the_decoder_gives_the_same_logits_both_ways(tiny_model):
    ids = torch.arange(3, 40)
    out = {}
    for rows in (0, 8):
        dec = LeanDecoder(tiny_model, 64, few_rows=rows)
        assert dec.few_rows == rows
        first = dec.forward(ids[:30])  # a prefill longer than 8 rows: F.linear either way
        steps = [dec.forward(ids[30 + i:31 + i]) for i in range(3)]  # one row at a time
        verify = dec.forward(ids[33:38], every=True)  # five rows, as a k=4 verify pass
        out[rows] = (first, torch.stack(steps), verify)
    for a, b in zip(out[0], out[8]):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_greedy_output_with_every_small_product_in_the_product_form(tiny_target, tiny_draft, monkeypatch):
    from tests.test_parity import reference

    monkeypatch.setenv("SPECDESK_FEW_ROWS", "8")
    engine = specdesk.load(str(tiny_target), str(tiny_draft), device="cpu")
    for p in PROMPTS:
        got = engine.generate(p, max_new_tokens=32, k=4)
        assert engine._runner.seq.decoder.few_rows == 8
        assert got.token_ids == reference(engine.target.model, engine.encode(p), 32)[: len(got.token_ids)], p


def test_the_choice_is_measured_once_per_model_and_can_be_set(tiny_model, monkeypatch):
    monkeypatch.delenv("SPECDESK_FEW_ROWS", raising=False)
    tiny_model.__dict__.pop(fewrows.ATTR, None)
    assert LeanDecoder(tiny_model, 4).few_rows == 0 and fewrows.ATTR not in tiny_model.__dict__  # too short to time
    rows = LeanDecoder(tiny_model, 64).few_rows
    assert rows in (0,) + fewrows.TRIED and tiny_model.__dict__[fewrows.ATTR] == rows
    tiny_model.__dict__[fewrows.ATTR] = 3  # kept: a new decoder of the same model does not measure again
    assert LeanDecoder(tiny_model, 64).few_rows == 3
    monkeypatch.setenv("SPECDESK_FEW_ROWS", "0")
    assert LeanDecoder(tiny_model, 64).few_rows == 0
    monkeypatch.setenv("SPECDESK_FEW_ROWS", "lots")  # not a number: ignored, the measured value stands
    assert LeanDecoder(tiny_model, 64).few_rows == 3


def test_the_timing_runs_on_a_model_with_fewer_tokens_than_the_rows_it_times(models_dir, monkeypatch):
    """fewrows times passes of up to 8 rows with ids 1..8: a model of 8 tokens took id 8 out of its vocabulary (the
    sampling tests' tiny model, whenever the timings went on to 8 rows; here they always do)."""
    from tests.conftest import make_llama

    monkeypatch.setattr(fewrows, "MIN_GAIN", float("inf"))  # the product form always "faster": every size timed
    from transformers import AutoModelForCausalLM

    path = make_llama(models_dir / "eight-tokens", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=32,
                      vocab_rows=8, tokenizer="none", eos=None)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    dec = LeanDecoder(model, 64, few_rows=0)
    assert fewrows._measure(dec) == max(fewrows.TRIED)
