"""The target model's side of the loop: prefill once, verify k+1 tokens per step, roll back."""

from __future__ import annotations

import torch

from specdesk.core.kvcache import cache_nbytes, new_cache

PREFILL_CHUNK = 512


class TargetRunner:
    def __init__(self, model, vocab: int) -> None:
        self.model = model
        self.vocab = vocab  # the tokenizer's vocabulary: logits past it are padding rows
        self.device = next(model.parameters()).device
        self.cache = None

    @torch.inference_mode()
    def prefill(self, ids: list[int], capacity: int) -> None:
        """Fill the KV cache with ``ids`` (all committed tokens but the last)."""
        self.cache = new_cache(self.model.config, capacity)
        for i in range(0, len(ids), PREFILL_CHUNK):
            chunk = torch.tensor(ids[i:i + PREFILL_CHUNK], device=self.device)[None]
            self.model(input_ids=chunk, cache=self.cache, use_cache=True, logits_to_keep=1)

    @torch.inference_mode()
    def verify(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: (m,) = last committed token + drafts -> logits (m, vocab) for the next position of each."""
        out = self.model(input_ids=tokens[None], cache=self.cache, use_cache=True)
        return out.logits[0, :, : self.vocab]

    def rollback(self, n: int) -> None:
        """Forget the last n cached positions (rejected drafts)."""
        if n > 0:
            self.cache.crop(-n)

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length() if self.cache is not None else 0

    def kv_bytes(self) -> int:
        return cache_nbytes(self.cache) if self.cache is not None else 0
