"""A Hugging Face KV cache that preallocates and rolls back in O(1).

transformers' ``DynamicLayer`` appends with ``torch.cat``: every step copies the whole cache, so a
step costs more as the context grows. ``PreallocatedLayer`` writes new keys and values into a buffer
sized for the whole generation (prompt + max new tokens + k + 1) and hands attention a view of the
filled part, which holds the same numbers ``torch.cat`` would produce. Rolling back rejected draft
positions only moves the fill mark.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer backed by a (B, H, capacity, D) buffer; grows by doubling if ever needed."""

    def __init__(self, capacity: int = 256, **kwargs) -> None:
        super().__init__(**kwargs)
        self.capacity = max(1, capacity)
        self.length = 0
        self.key_buf: torch.Tensor | None = None
        self.value_buf: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.device = key_states.device
        self.key_buf = key_states.new_empty((b, h, self.capacity, d))
        self.value_buf = value_states.new_empty((b, value_states.shape[1], self.capacity, value_states.shape[-1]))
        self.length = 0
        self.is_initialized = True

    def _grow(self, needed: int) -> None:
        new_cap = max(needed, 2 * self.capacity)
        for name in ("key_buf", "value_buf"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:2], new_cap, old.shape[-1]))
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)
        self.capacity = new_cap

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        end = self.length + n
        if end > self.capacity:
            self._grow(end)
        self.key_buf[:, :, self.length:end] = key_states
        self.value_buf[:, :, self.length:end] = value_states
        self.length = end
        self.keys = self.key_buf[:, :, :end]  # (B, H, len, D) views: what attention reads
        self.values = self.value_buf[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` positions (HF's convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of positions to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self.length = max(0, self.length + tokens_to_remove)
        self.keys = self.key_buf[:, :, : self.length]
        self.values = self.value_buf[:, :, : self.length]

    def reset(self) -> None:
        self.length = 0
        self.key_buf = self.value_buf = None
        self.keys = self.values = None
        self.is_initialized = False

    def nbytes(self) -> int:
        """Bytes of the filled part (what a planner predicts for this length)."""
        if not self.is_initialized:
            return 0
        return sum(t[:, :, : self.length].numel() * t.element_size() for t in (self.key_buf, self.value_buf))


def new_cache(config, capacity: int) -> DynamicCache:
    """A cache for ``config`` whose full-attention layers are preallocated for ``capacity`` positions.

    Other layer kinds (sliding-window, linear attention) keep transformers' own implementation.
    """
    cache = DynamicCache(config=config)
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer:
            cache.layers[i] = PreallocatedLayer(capacity=capacity)
    if has_sliding_layers(cache):
        # A full sliding-window layer keeps window - 1 positions and refuses to roll back ("crop ... the sliding
        # window size was already reached") unless it records the past: then it keeps what an update appends until
        # the next crop, which trims it back (ModelSequence.crop runs after every step).
        cache.activate_past_recording()
    if not cache.layers:  # configs without layer types: layers appear lazily, make them ours
        cache.layer_class_to_replicate = lambda: PreallocatedLayer(capacity=capacity)
    return cache


def has_sliding_layers(cache: DynamicCache) -> bool:
    return any(getattr(layer, "is_sliding", False) for layer in cache.layers)


def cache_length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def cache_nbytes(cache: DynamicCache) -> int:
    """Bytes of keys and values currently held (filled part only)."""
    total = 0
    for layer in cache.layers:
        if isinstance(layer, PreallocatedLayer):
            total += layer.nbytes()
        elif getattr(layer, "is_initialized", False) and layer.keys is not None:
            total += layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
    return total
