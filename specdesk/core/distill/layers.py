"""Pieces of a Llama-family decoder layer run by hand, shared by the batched generator (batchgen.py) and the EAGLE
trainer's unrolled drafting (eagle.py): the attention's shape and its rotated projections."""

from __future__ import annotations

import torch


def head_shape(cfg) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim) of a Llama-family config."""
    nh = cfg.num_attention_heads
    nkv = getattr(cfg, "num_key_value_heads", None) or nh
    return nh, nkv, getattr(cfg, "head_dim", None) or cfg.hidden_size // nh


def _rotate_half(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def rotary_qkv(att, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, shape: tuple[int, int, int]):
    """h (B, n, hidden), the layer's normed input; cos/sin broadcasting to (B, 1, n, hd) -> q (B, nh, n, hd) and
    k, v (B, nkv, n, hd), q and k rotated."""
    nh, nkv, hd = shape
    B, n, _ = h.shape
    q = att.q_proj(h).view(B, n, nh, hd).transpose(1, 2)
    k = att.k_proj(h).view(B, n, nkv, hd).transpose(1, 2)
    v = att.v_proj(h).view(B, n, nkv, hd).transpose(1, 2)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v
