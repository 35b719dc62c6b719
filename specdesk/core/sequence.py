"""One model's sequence in the decode loop: prefill, feed tokens, crop rejected positions.

The target (k+1 positions per verify) and a draft model (one token at a time) both keep a KV cache
across steps and roll it back past the first rejected draft. Where fastdraft.LeanDecoder can run the
model it does (a preallocated buffer, far less per-call overhead); else transformers' forward runs with
kvcache.new_cache (preallocated too, O(1) crop). :attr:`ModelSequence.lean_reason` says which and why.

Between generations the lean buffer is kept: a chat's next turn sends the whole conversation again, and the part
the last generation already read (its prompt and reply, up to the first token that differs) is not read again
(:meth:`ModelSequence.remember`, then :meth:`ModelSequence.start`). On specdesk's own CPU kernels every position
is computed alone whatever else its pass holds, so the kept keys and values are bit for bit what a new prefill
would write; elsewhere they are the same up to float rounding (a prefill's batched products against a decode
step's), as in any engine that caches prompts.
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
        self.reuse = True  # start() may keep what the last sequence read (see remember)
        self.cached: list[int] | None = None  # the tokens the lean buffer holds, when remember() said so

    @property
    def uses_lean_path(self) -> bool:
        """Whether sequences run on the lean decoder (with a sliding window: those shorter than it)."""
        return self.lean_reason is None

    def runs_lean(self, capacity: int) -> bool:
        """Whether a sequence of ``capacity`` positions runs on the lean decoder."""
        # capacity < window: every key within reach, and the lean buffer no larger than transformers' sliding
        # cache (window - 1 positions), so the planner's figures hold either way
        return self.uses_lean_path and (self.window is None or capacity < self.window)

    def start(self, ids: list[int], capacity: int) -> int:
        """A new sequence of at most ``capacity`` positions, prefilled with ``ids`` in chunks. Returns how many of
        ``ids`` were not read again: the longest common prefix with what the last sequence remembered."""
        kept = self._keep(ids, capacity)
        if not kept:
            self.release()  # free the last sequence's buffers before allocating new ones
            if self.runs_lean(capacity):
                self.decoder = LeanDecoder(self.model, capacity, keep_hidden=self.keep_hidden)
            else:
                self.cache = new_cache(self.model.config, capacity)
                self.sliding = has_sliding_layers(self.cache)
        for i in range(kept, len(ids), PREFILL_CHUNK):
            self.feed(torch.tensor(ids[i:i + PREFILL_CHUNK], device=self.device))
        return kept

    def _keep(self, ids: list[int], capacity: int) -> int:
        """Keep the remembered prefix ``ids`` starts with (in a buffer of ``capacity`` positions); its length, or 0
        when nothing is kept."""
        n = self.kept_length(ids) if self.runs_lean(capacity) else 0
        self.cached = None  # from here until remember(), the buffer's contents are in flux
        if n == 0:
            return 0
        if capacity == self.decoder.capacity:
            self.decoder.crop(n)
            return n
        # buffers of exactly this generation's size, as the planner counts them (a kept larger one would hold memory
        # a short reply after a long one does not need); copying the kept positions costs ~10 ms per 50 MB
        old, self.decoder = self.decoder, None
        try:
            self.decoder = LeanDecoder(self.model, capacity, keep_hidden=self.keep_hidden)
        except (torch.OutOfMemoryError, MemoryError):  # old and new buffers do not fit together: read it all again
            return 0
        self.decoder.take(old, n)
        return n

    def kept_length(self, ids: list[int]) -> int:
        """How many of ``ids`` the next :meth:`start` would keep: the prefix they share with what was remembered."""
        if not (self.reuse and self.cached and self.decoder is not None):
            return 0
        n = 0
        for a, b in zip(ids, self.cached):
            if a != b:
                break
            n += 1
        return n

    def remember(self, ids: list[int]) -> None:
        """The generation is over and ``ids`` is its committed sequence, whose first positions the cache holds (the
        decode loop's invariant): keep them for the next :meth:`start` to skip."""
        if self.reuse and self.decoder is not None:
            n = min(self.decoder.length, len(ids))
            self.decoder.crop(n)
            self.cached = list(ids[:n])

    def release(self) -> None:
        """Drop the sequence's buffers (the next :meth:`start` allocates new ones)."""
        self.decoder = self.cache = None
        self.cached = None

    @torch.inference_mode()
    def feed(self, ids: torch.Tensor, every: bool = False) -> torch.Tensor:
        """ids: (n,) -> next-token logits of the last position (V,), or of every position (n, V)."""
        if self.decoder is not None:
            return self.decoder.forward(ids, every)
        out = self.model(input_ids=ids[None], cache=self.cache, use_cache=True, logits_to_keep=0 if every else 1)
        return out.logits[0] if every else out.logits[0, -1]

    @torch.inference_mode()
    def feed_ids(self, ids: list[int], every: bool = False, reuse: bool = False) -> torch.Tensor:
        """As :meth:`feed` for token ids given as ints (the decode loop's steps; see LeanDecoder.forward_ids, and its
        ``reuse``: the logits may be a buffer the next call overwrites)."""
        if self.decoder is not None:
            return self.decoder.forward_ids(ids, every, reuse)
        return self.feed(torch.tensor(ids, dtype=torch.long, device=self.device), every)

    @torch.inference_mode()
    def feed_ids_top(self, ids: list[int], every: bool = False, prob: bool = False,
                     limit: int | None = None) -> tuple[list[int], list[float] | None]:
        """What greedy decoding reads of :meth:`feed_ids`' logits: each row's argmax over its first ``limit`` logits
        and, with ``prob``, its probability under softmax (LeanDecoder.top_ids)."""
        if self.decoder is not None:
            return self.decoder.top_ids(ids, every, prob, limit)
        from specdesk.core import kernels

        logits = self.feed_ids(ids, every)
        return kernels.tops(logits[..., :limit] if limit is not None else logits, prob)

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
