"""One model's sequence in the decode loop: prefill, feed tokens, crop rejected positions.

The target (k+1 positions per verify) and a draft model (one token at a time) both keep a KV cache
across steps and roll it back past the first rejected draft. Where fastdraft.LeanDecoder can run the
model it does (a preallocated buffer, far less per-call overhead); else transformers' forward runs with
kvcache.new_cache (preallocated too, O(1) crop). :attr:`ModelSequence.lean_reason` says which and why.
"""

from __future__ import annotations

import torch

from specdesk.core.fastdraft import LeanDecoder, sliding_window, unsupported_reason
from specdesk.core.kvcache import cache_nbytes, has_sliding_layers, new_cache

PREFILL_CHUNK = 512


class ModelSequence:
    def __init__(self, model, lean: bool = True) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.lean_reason = unsupported_reason(model) if lean else "disabled"
        self.window = sliding_window(model)
        self.decoder: LeanDecoder | None = None
        self.cache = None
        self.sliding = False  # the transformers cache has sliding-window layers (crop after every step)
        self.keep_hidden = False  # keep every position's final hidden state (an EAGLE drafter reads them)

    @property
    def uses_lean_path(self) -> bool:
        """Whether sequences run on the lean decoder (with a sliding window: those shorter than it)."""
        return self.lean_reason is None

    def runs_lean(self, capacity: int) -> bool:
        """Whether a sequence of ``capacity`` positions runs on the lean decoder."""
        # capacity < window: every key within reach, and the lean buffer no larger than transformers' sliding
        # cache (window - 1 positions), so the planner's figures hold either way
        return self.uses_lean_path and (self.window is None or capacity < self.window)

    def start(self, ids: list[int], capacity: int) -> None:
        """A new sequence of at most ``capacity`` positions, prefilled with ``ids`` in chunks."""
        self.release()  # free the last sequence's buffers before allocating new ones
        if self.runs_lean(capacity):
            self.decoder = LeanDecoder(self.model, capacity, keep_hidden=self.keep_hidden)
        else:
            self.cache = new_cache(self.model.config, capacity)
            self.sliding = has_sliding_layers(self.cache)
        for i in range(0, len(ids), PREFILL_CHUNK):
            self.feed(torch.tensor(ids[i:i + PREFILL_CHUNK], device=self.device))

    def release(self) -> None:
        """Drop the sequence's buffers (the next :meth:`start` allocates new ones)."""
        self.decoder = self.cache = None

    @torch.inference_mode()
    def feed(self, ids: torch.Tensor, every: bool = False) -> torch.Tensor:
        """ids: (n,) -> next-token logits of the last position (V,), or of every position (n, V)."""
        if self.decoder is not None:
            return self.decoder.forward(ids, every)
        out = self.model(input_ids=ids[None], cache=self.cache, use_cache=True, logits_to_keep=0 if every else 1)
        return out.logits[0] if every else out.logits[0, -1]

    @property
    def length(self) -> int:
        if self.decoder is not None:
            return self.decoder.length
        return self.cache.get_seq_length() if self.cache is not None else 0

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions."""
        if self.decoder is not None:
            self.decoder.crop(length)
        elif self.cache is not None and (length < self.length or self.sliding):
            self.cache.crop(min(0, length - self.length))  # sliding-window layers also trim back to their window

    def kv_bytes(self) -> int:
        """Bytes of keys and values held for the positions fed so far."""
        if self.decoder is not None:
            return self.decoder.kv_bytes()
        return cache_nbytes(self.cache) if self.cache is not None else 0

    def kv_reserved_bytes(self) -> int:
        """Bytes of the preallocated key and value buffers (the whole capacity)."""
        if self.decoder is not None:
            return self.decoder.kv_reserved_bytes()
        if self.cache is None:
            return 0
        return sum(t.numel() * t.element_size() for layer in self.cache.layers
                   if getattr(layer, "key_buf", None) is not None for t in (layer.key_buf, layer.value_buf))
