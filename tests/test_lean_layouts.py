"""The lean decoder takes attention's output in whatever memory layout the kernel returns it.

Found on an H200: in float32, CUDA's scaled_dot_product_attention returned its (1, heads, rows, head_dim) output in a
rows-major layout, and the grouped-query path's ``.view`` failed in the first prefill. On a CPU the output is always
contiguous, so this test hands the decoder the same values in the layout CUDA used."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdesk.core.fastdraft import LeanDecoder


@pytest.fixture(scope="module")
def tiny_model(tiny_target):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_target).eval()


def test_a_rows_major_attention_output_gives_the_same_logits(tiny_model, monkeypatch):
    assert tiny_model.config.num_attention_heads != tiny_model.config.num_key_value_heads  # the grouped path
    ids = torch.arange(3, 40)
    plain = LeanDecoder(tiny_model, 64, few_rows=0)
    want = [plain.forward(ids[:30], every=True), plain.forward(ids[30:35], every=True), plain.forward(ids[35:36])]

    real, layouts = F.scaled_dot_product_attention, []

    def rows_major(*args, **kwargs):
        out = real(*args, **kwargs)  # (1, heads, rows, head_dim)
        strided = out.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, rows outermost
        layouts.append(strided.is_contiguous())
        return strided

    monkeypatch.setattr(F, "scaled_dot_product_attention", rows_major)
    dec = LeanDecoder(tiny_model, 64, few_rows=0)
    got = [dec.forward(ids[:30], every=True), dec.forward(ids[30:35], every=True), dec.forward(ids[35:36])]
    assert layouts and not all(layouts)  # the decoder really was handed non-contiguous outputs
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("few_rows", [None, 0])  # None: measured (the decoder times itself), 0: set
def test_a_dropped_decoder_is_freed_at_once_not_at_the_next_garbage_collection(tiny_model, few_rows):
    """Each generation starts a new decoder; a small model's holds fused copies of its weights. Its layers'
    closures once held the decoder itself (a reference cycle), so every dropped one lived on until the garbage
    collector's next full pass."""
    import gc
    import weakref

    dec = LeanDecoder(tiny_model, 64, few_rows=few_rows)
    assert dec.fused  # the fused copies are what a cycle would keep
    dec.forward(torch.arange(3, 20), every=True)
    gone = weakref.ref(dec)
    gc.disable()
    try:
        del dec
        assert gone() is None
    finally:
        gc.enable()
