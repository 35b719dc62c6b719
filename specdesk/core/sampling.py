"""Turning logits into the distribution a token is drawn from.

The same processing is applied to the draft's and the target's logits, in the order Hugging Face's
logits warpers use (temperature, then top-k, then top-p), so that speculative sampling reproduces
exactly the distribution a user configured for the target alone.
"""

from __future__ import annotations

import torch

from specdesk.core import kernels
from specdesk.core.samplingconfig import SamplingConfig

__all__ = ["SamplingConfig", "process_logits"]  # SamplingConfig lives in samplingconfig (no torch) and is re-exported


def process_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p. logits: (..., V) -> probs (..., V), float32."""
    if cfg.top_k == 0 and cfg.top_p >= 1.0:  # temperature alone: one kernel call for a q4 model's logits
        fast = kernels.softmax(logits, cfg.temperature)
    else:  # with top-k / top-p too: one call (torch's sort and scatter cost ~1.7 ms a SmolLM2 row)
        fast = kernels.process(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    if fast is not None:
        return fast
    x = logits.float() / cfg.temperature
    vocab = x.shape[-1]
    if 0 < cfg.top_k < vocab:
        kth = torch.topk(x, cfg.top_k, dim=-1).values[..., -1:]  # (..., 1)
        x = x.masked_fill(x < kth, float("-inf"))  # ties with the k-th value are kept, as in HF
    if cfg.top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=False)
        cum = sorted_x.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cum <= (1.0 - cfg.top_p)
        remove_sorted[..., -1] = False  # always keep the most likely token
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        x = x.masked_fill(remove, float("-inf"))
    return x.softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row. probs: (..., V), each row's mass positive, not necessarily 1 -> (...,) int64.

    By the inverse of the cumulative mass: the first token whose cumulative mass exceeds u * total, u ~ U[0, 1), so
    token i is drawn with probability p_i / total and a token with no mass never. ~39 us for SmolLM2's 49,152
    tokens on 2 Intel Xeon cores, where torch.multinomial took ~0.9 ms (a tenth of a decoding step); float32 rows on
    a CPU go through rows.c's sd_sample_f32 (the same rule and the same draws from ``generator``, ~10 us).
    """
    flat = probs.reshape(-1, probs.shape[-1])
    u = torch.rand(flat.shape[0], 1, generator=generator, device=flat.device, dtype=flat.dtype)
    fast = kernels.sample_rows(flat, u.view(-1))  # None but for float32 rows on a CPU with the kernels
    if fast is not None:
        return fast.reshape(probs.shape[:-1])
    return _walk(flat, u).reshape(probs.shape[:-1])


def draw_one(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """:func:`sample` for one row (V,), as an int: the same uniform draw and the same walk, without the tensors
    around them where rows.c takes the row (each torch call right after a pass costs several times its own work)."""
    return draw_at(probs, torch.rand(1, 1, generator=generator, device=probs.device, dtype=probs.dtype))


def draw_at(probs: torch.Tensor, u: torch.Tensor) -> int:
    """:func:`draw_one`'s draw from one row (V,) at a uniform already drawn, ``u`` (1, 1)."""
    at = kernels.sample_one(probs, float(u))
    return at if at is not None else int(_walk(probs.reshape(1, -1), u)[0, 0])



def _walk(flat: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF walk in torch: rows (N, V), uniforms (N, 1) -> (N, 1) int64."""
    cum = flat.cumsum(-1)  # (N, V)
    total = cum[:, -1:]
    u = u * total
    # u * total may round up to the total itself: held just under it, u then falls to the last token with mass
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cum, u, right=True)


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g
