"""The target model's side of the loop: prefill once, verify k+1 tokens per step, roll back.

It runs the target through fastdraft.LeanDecoder when the architecture allows (the same numbers as
transformers' forward at a third less time per call on the demo pair; tests hold it to greedy parity
with ``generate``), else through transformers with a preallocated cache.
"""

from __future__ import annotations

import torch

from specdesk.core.fastdraft import LeanDecoder, unsupported_reason
from specdesk.core.kvcache import cache_nbytes, new_cache

PREFILL_CHUNK = 512


class TargetRunner:
    def __init__(self, model, vocab: int, lean: bool = True) -> None:
        self.model = model
        self.vocab = vocab  # the tokenizer's vocabulary: logits past it are padding rows
        self.device = next(model.parameters()).device
        self.lean_reason = unsupported_reason(model) if lean else "disabled"
        self.cache = None
        self._decoder: LeanDecoder | None = None

    @property
    def uses_lean_path(self) -> bool:
        return self.lean_reason is None

    @torch.inference_mode()
    def prefill(self, ids: list[int], capacity: int) -> None:
        """Fill the KV cache with ``ids`` (all committed tokens but the last)."""
        self.cache = self._decoder = None  # free the last generation's buffers before allocating new ones
        if self.uses_lean_path:
            self._decoder = LeanDecoder(self.model, capacity)
        else:
            self.cache = new_cache(self.model.config, capacity)
        for i in range(0, len(ids), PREFILL_CHUNK):
            chunk = torch.tensor(ids[i:i + PREFILL_CHUNK], device=self.device)
            if self._decoder is not None:
                self._decoder.forward(chunk)
            else:
                self.model(input_ids=chunk[None], cache=self.cache, use_cache=True, logits_to_keep=1)

    @torch.inference_mode()
    def verify(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: (m,) = last committed token + drafts -> logits (m, vocab) for the next position of each."""
        if self._decoder is not None:
            return self._decoder.forward(tokens, every=True)[:, : self.vocab]
        out = self.model(input_ids=tokens[None], cache=self.cache, use_cache=True)
        return out.logits[0, :, : self.vocab]

    def rollback(self, n: int) -> None:
        """Forget the last n cached positions (rejected drafts)."""
        if n <= 0:
            return
        if self._decoder is not None:
            self._decoder.crop(self._decoder.length - n)
        else:
            self.cache.crop(-n)

    @property
    def cache_len(self) -> int:
        if self._decoder is not None:
            return self._decoder.length
        return self.cache.get_seq_length() if self.cache is not None else 0

    def kv_reserved_bytes(self) -> int:
        """Bytes of the preallocated key and value buffers (the whole capacity)."""
        if self._decoder is not None:
            return sum(L[n].numel() * L[n].element_size() for L in self._decoder.layers for n in ("k", "v"))
        if self.cache is None:
            return 0
        return sum(t.numel() * t.element_size() for layer in self.cache.layers if getattr(layer, "key_buf", None)
                   is not None for t in (layer.key_buf, layer.value_buf))

    def kv_bytes(self) -> int:
        """Bytes of keys and values held for the committed positions."""
        if self._decoder is not None:
            return self._decoder.kv_bytes()
        return cache_nbytes(self.cache) if self.cache is not None else 0
