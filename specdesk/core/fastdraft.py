"""A lean forward pass for Llama-family draft models.

The draft runs k times per step, one token at a time, so its fixed per-call cost decides whether
speculation pays. transformers' generic forward spends most of a small model's time outside the
matrix products (mask building, rotary tables, cache bookkeeping). This module runs the same
architecture (Llama, Mistral, Qwen2: RMSNorm, rotary attention with GQA, SwiGLU MLP) with a
preallocated KV buffer, rotary tables computed once, and fused QKV / gate-up products.

Only the draft uses it: the draft's numbers never change the output (the target decides), only the
acceptance rate, and tests check its logits against transformers' to 1e-4 anyway.
Models it cannot run exactly (quantized layers, sliding windows, other activations) fall back to the
transformers forward; :func:`unsupported_reason` says why.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED_TYPES = {"llama", "mistral", "qwen2"}
FUSE_LIMIT_BYTES = 512 * 2**20  # fusing copies the linear weights; only worth it (and cheap) for small drafts


def unsupported_reason(model) -> str | None:
    cfg = model.config
    if cfg.model_type not in SUPPORTED_TYPES:
        return f"architecture {cfg.model_type!r} has no lean path"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r}"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True) and cfg.model_type != "qwen2":
        return "sliding-window attention"
    if cfg.model_type == "qwen2" and getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) == "dynamic":
        return "dynamic rotary scaling"
    for layer in model.model.layers:
        for lin in (layer.self_attn.q_proj, layer.mlp.down_proj):
            if type(lin) is not torch.nn.Linear:
                return f"quantized or custom linear layers ({type(lin).__name__})"
        if layer.mlp.gate_proj.bias is not None:
            return "MLP biases"
    if type(model.lm_head) is not torch.nn.Linear:
        return "custom output layer"
    return None


class LeanDecoder:
    """One draft sequence: feed tokens, get the next-token logits of the last one, crop on rejection."""

    def __init__(self, model, capacity: int) -> None:
        cfg = model.config
        inner = model.model
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.scale = self.head_dim ** -0.5
        self.eps = cfg.rms_norm_eps
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.capacity = capacity
        self.length = 0
        device, dtype = self.embed.device, self.embed.dtype
        fuse = sum(p.numel() * p.element_size() for p in inner.layers.parameters()) <= FUSE_LIMIT_BYTES
        self.layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            qkv = [att.q_proj, att.k_proj, att.v_proj]
            gu = [mlp.gate_proj, mlp.up_proj]
            entry = {
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "o": att.o_proj.weight, "o_b": att.o_proj.bias, "down": mlp.down_proj.weight,
                "k": torch.zeros(1, self.n_kv, capacity, self.head_dim, device=device, dtype=dtype),
                "v": torch.zeros(1, self.n_kv, capacity, self.head_dim, device=device, dtype=dtype),
            }
            if fuse:
                entry["qkv"] = [torch.cat([m.weight for m in qkv]).detach()]
                biases = [m.bias for m in qkv]
                entry["qkv_b"] = [torch.cat(biases).detach() if biases[0] is not None else None]
                entry["gu"] = [torch.cat([m.weight for m in gu]).detach()]
            else:
                entry["qkv"] = [m.weight for m in qkv]
                entry["qkv_b"] = [m.bias for m in qkv]
                entry["gu"] = [m.weight for m in gu]
            self.layers.append(entry)
        # Rotary tables for every position of this generation, from the model's own rotary module.
        pos = torch.arange(capacity, device=device)[None]
        cos, sin = inner.rotary_emb(self.embed[:1][None], pos)  # (1, capacity, head_dim) each
        self.cos, self.sin = cos[0].to(dtype), sin[0].to(dtype)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    @staticmethod
    def _linear_many(x: torch.Tensor, weights: list, biases: list | None = None) -> torch.Tensor:
        if len(weights) == 1:
            return F.linear(x, weights[0], biases[0] if biases else None)
        outs = [F.linear(x, w, b) for w, b in zip(weights, biases or [None] * len(weights))]
        return torch.cat(outs, dim=-1)

    def _rotate(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = self.head_dim // 2
        rot = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * cos + rot * sin

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (n,) int64 on the model's device -> logits of the last position, (V,)."""
        n = ids.shape[0]
        p0 = self.length
        end = p0 + n
        if end > self.capacity:
            raise RuntimeError("draft context longer than its preallocated buffer")
        x = self.embed[ids]  # (n, hidden)
        cos, sin = self.cos[p0:end], self.sin[p0:end]  # (n, head_dim)
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        mask = None
        if n > 1:
            mask = torch.ones(n, end, dtype=torch.bool, device=ids.device).tril(diagonal=p0)
        for L in self.layers:
            h = self._norm(x, L["ln1"])
            qkv = self._linear_many(h, L["qkv"], L["qkv_b"])  # (n, (hq + 2 hk) * hd)
            q, k, v = qkv.split([hq * hd, hk * hd, hk * hd], dim=-1)
            q = self._rotate(q.view(n, hq, hd).transpose(0, 1), cos, sin)  # (hq, n, hd)
            k = self._rotate(k.view(n, hk, hd).transpose(0, 1), cos, sin)  # (hk, n, hd)
            L["k"][0, :, p0:end] = k
            L["v"][0, :, p0:end] = v.view(n, hk, hd).transpose(0, 1)
            keys, values = L["k"][:, :, :end], L["v"][:, :, :end]  # (1, hk, end, hd)
            att = F.scaled_dot_product_attention(q[None], keys, values, attn_mask=mask, scale=self.scale,
                                                 enable_gqa=hq != hk)  # (1, hq, n, hd)
            x = x + F.linear(att[0].transpose(0, 1).reshape(n, hq * hd), L["o"], L["o_b"])
            h = self._norm(x, L["ln2"])
            gate, up = self._linear_many(h, L["gu"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, L["down"])
        self.length = end
        return F.linear(self._norm(x[-1], self.final_norm), self.lm_head)

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)
