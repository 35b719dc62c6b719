"""The acceptance rule of speculative decoding.

Sources: Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding" (2023);
Chen et al., "Accelerating Large Language Model Decoding with Speculative Sampling" (2023).

A drafted token x is kept with probability min(1, p_target(x) / p_draft(x)); at the first rejection
the target's token is drawn from normalize(max(0, p_target - p_draft)); when all k are kept, a bonus
token is drawn from the target's distribution after the last draft token. The emitted token then has
exactly the distribution p_target. A drafter without a distribution (prompt lookup) proposes a point
mass: p_draft = one-hot(x). Greedy decoding is the limit where both distributions are one-hot.
"""

from __future__ import annotations

import ctypes

import torch

from specdesk.core import kernels
from specdesk.core.sampling import SamplingConfig, draw_at, draw_one, process_logits, sample


def accept_probability(p_target: torch.Tensor, p_draft: torch.Tensor, tokens: torch.Tensor,
                       draft_pos: torch.Tensor | None = None) -> torch.Tensor:
    """min(1, p_target(x) / p_draft(x)) per drafted token. p_*: (k, V), tokens: (k,) -> (k,). ``draft_pos``: where
    p_draft is a reduced head's (k, H), each token's column in it (see :func:`verify_sampled`)."""
    pt = p_target.gather(-1, tokens[:, None]).squeeze(-1)
    pd = p_draft.gather(-1, (tokens if draft_pos is None else draft_pos)[:, None]).squeeze(-1)
    # pd > 0 for any token the draft actually sampled; the clamp only guards against 0/0.
    return torch.clamp(pt / pd.clamp_min(torch.finfo(pd.dtype).tiny), max=1.0)


def residual_distribution(p_target: torch.Tensor, p_draft: torch.Tensor,
                          draft_ids: torch.Tensor | None = None) -> torch.Tensor:
    """normalize(max(0, p_target - p_draft)), the distribution drawn from after a rejection. (..., V); with
    ``draft_ids`` one row: p_draft (H,) holds the draft's probabilities of tokens draft_ids (H,), 0 elsewhere."""
    if draft_ids is None:
        fast = kernels.residual(p_target, p_draft, None) if p_target.dim() == 1 else None  # one row: one call
        if fast is not None:
            return fast
        r = (p_target - p_draft).clamp_min(0.0)
    else:  # p_target - p_draft where the draft has mass (the same float subtraction), p_target elsewhere
        fast = kernels.residual(p_target, p_draft, draft_ids)  # float32 on a CPU: one call (rows.c)
        if fast is not None:
            return fast
        r = p_target.clone().index_add_(-1, draft_ids, p_draft, alpha=-1.0).clamp_min(0.0)
    total = r.sum(dim=-1, keepdim=True)
    # A rejection implies p_target(x) < p_draft(x) somewhere, so total > 0; fall back to p_target
    # only when rounding made the two distributions identical.
    return torch.where(total > 0, r / total.clamp_min(torch.finfo(r.dtype).tiny), p_target)


def point_residual(p_target: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """residual_distribution for a point mass at ``token`` (1,): the target's row (V,) without that token,
    normalized. Through the reduced-head form (the token as a one-token head with probability 1): the numbers
    one_hot's wide form gives, in one kernel call on a CPU."""
    return residual_distribution(p_target, torch.ones(1, dtype=p_target.dtype, device=p_target.device), token)


def one_hot(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """Point-mass distributions for drafters that have none. tokens: (k,) -> (k, V) float32."""
    out = torch.zeros(tokens.shape[0], vocab, dtype=torch.float32, device=tokens.device)
    return out.scatter_(1, tokens[:, None], 1.0)


def verify_greedy(target_argmax: torch.Tensor | list[int], draft_tokens: torch.Tensor | list[int]) -> tuple[int, list[int]]:
    """(accepted, emitted tokens) under greedy decoding.

    target_argmax: (k+1,) the target's argmax after the last committed token and after each draft token;
    draft_tokens: (k,). The draft's tokens are kept while they equal the target's choice, so the
    emitted tokens (kept drafts, then the target's correction or bonus) are target_argmax[:n+1].
    Tensors or lists of ints; on a CPU both are compared as Python ints (a handful of tensor calls cost ~0.1 ms
    right after a pass, ~10x the comparison itself).
    """
    if isinstance(target_argmax, torch.Tensor):
        if target_argmax.device.type != "cpu" and isinstance(draft_tokens, torch.Tensor) and draft_tokens.numel():
            # on an accelerator: one device transfer for both
            k = draft_tokens.shape[0]
            matches = (target_argmax[:k] == draft_tokens).int().cumprod(dim=0)  # 1 up to the first mismatch
            values = torch.cat([matches.sum().view(1), target_argmax]).tolist()
            n = values[0]
            return n, values[1:n + 2]
        target_argmax = target_argmax.tolist()
    if isinstance(draft_tokens, torch.Tensor):
        draft_tokens = draft_tokens.tolist()
    n = 0
    for want, got in zip(target_argmax, draft_tokens):
        if want != got:
            break
        n += 1
    return n, list(target_argmax[:n + 1])


class Draws:
    """The random draws of :func:`verify_sampled`, from a torch generator.

    The rule's only randomness: one uniform per drafted token, then one categorical draw. Kept behind this
    small interface so a test can enumerate every outcome with its exact probability instead of sampling.
    """

    def __init__(self, generator: torch.Generator | None) -> None:
        self.generator = generator

    def uniform(self, n: int, device: torch.device) -> torch.Tensor:
        """(n,) independent draws from U[0, 1)."""
        return torch.rand(n, generator=self.generator, device=device)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        """(1,) int64: one index drawn with probabilities ``probs`` (V,)."""
        return sample(probs, self.generator).view(1)


class DrawnAhead(Draws):
    """A CPU generator's draws for one verification of ``k`` drafted tokens, taken before the target's pass in the
    order the rule uses them (k uniforms, then the categorical draw's uniform): the numbers the generator gives
    afterwards too, as nothing else draws between a proposal and its verification. Right after a pass each torch
    call costs ~30 us where it costs ~1 alone (the pass streams the caches); before it, these are cheap."""

    def __init__(self, generator: torch.Generator | None, k: int) -> None:
        super().__init__(generator)
        self.u = torch.rand(k, generator=generator) if k else torch.empty(0)
        self.u_next = torch.rand(1, 1, generator=generator, dtype=torch.float32)  # draw_one's and sample's

    def uniform(self, n: int, device: torch.device) -> torch.Tensor:
        return self.u

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        return torch.tensor([draw_at(probs, self.u_next)])


def verify_sampled(p_target: torch.Tensor, p_draft: torch.Tensor | None, draft_tokens: torch.Tensor,
                   generator: torch.Generator | None, draws: Draws | None = None, draft_ids: torch.Tensor | None = None,
                   draft_pos: torch.Tensor | None = None) -> tuple[int, list[int]]:
    """(accepted, emitted tokens) under speculative sampling.

    p_target: (k+1, V) processed target distributions; p_draft: (k, V) processed draft distributions,
    or None for a point-mass proposal; draft_tokens: (k,). ``draws`` replaces the generator's draws.
    A draft with a reduced head (its tokens ``draft_ids`` (H,), probability 0 for every other) may pass p_draft as
    (k, H) over those tokens, with ``draft_pos`` (k,) each drafted token's column: the same rule on the same numbers,
    without widening each row to the vocabulary (~60 us a step for SmolLM2's 8,192-token head).
    """
    if (draws is None or type(draws) is DrawnAhead) and _plain_cpu(p_target, p_draft):
        return _verify_sampled_cpu(p_target, p_draft, draft_tokens, generator, draft_ids, draft_pos, draws)
    draws = draws or Draws(generator)
    k = draft_tokens.shape[0]
    if k == 0:
        return 0, [int(draws.categorical(p_target[0]))]
    point = p_draft is None
    if point:
        p_draft = one_hot(draft_tokens, p_target.shape[-1])
    u = draws.uniform(k, p_target.device)
    passed = u < accept_probability(p_target[:k], p_draft, draft_tokens, draft_pos)
    keep = passed.int().cumprod(dim=0)  # 1 up to the first reject
    n = int(keep.sum())
    if n == k:
        dist = p_target[k]  # every draft token kept: bonus token from the target
    elif point:
        dist = point_residual(p_target[n], draft_tokens[n:n + 1])
    else:
        dist = residual_distribution(p_target[n], p_draft[n], draft_ids)
    nxt = draws.categorical(dist)
    return n, torch.cat([draft_tokens[:n], nxt]).tolist()


_TINY = torch.finfo(torch.float32).tiny


def _plain_cpu(p_target: torch.Tensor, p_draft: torch.Tensor | None) -> bool:
    """Whether verify_sampled's float32 CPU form applies: contiguous float32 rows on a CPU where the kernels build."""
    ok = p_target.dtype == torch.float32 and p_target.device.type == "cpu" and p_target.is_contiguous()
    if p_draft is not None:
        ok = ok and p_draft.dtype == torch.float32 and p_draft.device.type == "cpu" and p_draft.is_contiguous()
    return ok and kernels.available()


def _f32(x: float) -> float:
    """x rounded to float32 (round to nearest even): the value torch's float32 operation gives."""
    return ctypes.c_float(x).value


def _accepts(u: float, pt: float, pd: float) -> bool:
    """u < min(1, pt / max(pd, tiny)) as torch computes it in float32 (accept_probability, then the comparison)."""
    return u < min(1.0, _f32(pt / max(pd, _TINY)))


def _verify_sampled_cpu(p_target: torch.Tensor, p_draft: torch.Tensor | None, draft_tokens: torch.Tensor,
                        generator: torch.Generator | None, draft_ids: torch.Tensor | None,
                        draft_pos: torch.Tensor | None, ahead: DrawnAhead | None = None) -> tuple[int, list[int]]:
    """verify_sampled's rule on float32 CPU rows with the probabilities read where they lie: the same draws from
    ``generator`` in the same order (Draws.uniform's, then one categorical draw as sampling.sample makes it) and the
    same float32 numbers, so the same outcome, with ~5 tensor calls instead of ~25 (~0.3 ms of a sampled step right
    after a pass on a 2-core CPU). min(1, pt / pd) is float32's quotient: a quotient of two float32 values rounded to
    double, then to float32, is the correctly rounded float32 one (53 >= 2 * 24 + 2 bits)."""
    k = draft_tokens.shape[0]
    v = p_target.shape[-1]
    if k == 0:
        return 0, [draw_at(p_target[0], ahead.u_next) if ahead else draw_one(p_target[0], generator)]
    tokens = draft_tokens.tolist()
    cols = tokens if draft_pos is None else draft_pos.tolist()
    u = (ahead.u if ahead else torch.rand(k, generator=generator, device=p_target.device)).tolist()
    base = p_target.data_ptr()
    n = 0
    for i in range(k):
        pt = ctypes.c_float.from_address(base + 4 * (i * v + tokens[i])).value
        if p_draft is None:  # a point mass
            pd = 1.0
        else:
            pd = ctypes.c_float.from_address(p_draft.data_ptr() + 4 * (i * p_draft.shape[-1] + cols[i])).value
        if not _accepts(u[i], pt, pd):
            break
        n += 1
    if n == k:
        dist = p_target[k]  # every draft token kept: bonus token from the target
    elif p_draft is None:
        dist = point_residual(p_target[n], draft_tokens[n:n + 1])
    else:
        dist = residual_distribution(p_target[n], p_draft[n], draft_ids)
    return n, tokens[:n] + [draw_at(dist, ahead.u_next) if ahead else draw_one(dist, generator)]


def verify_sampled_logits(logits: torch.Tensor, sampling: SamplingConfig, p_draft: torch.Tensor | None,
                          draft_tokens: torch.Tensor, generator: torch.Generator | None,
                          draft_ids: torch.Tensor | None = None,
                          draft_pos: torch.Tensor | None = None) -> tuple[int, list[int]]:
    """``verify_sampled(process_logits(logits, sampling), ...)`` from the target's logits (k+1, V): a
    :class:`SampledCheck` made and decided at once."""
    if logits.device.type != "cpu":
        return verify_sampled(process_logits(logits, sampling), p_draft, draft_tokens, generator,
                              draft_ids=draft_ids, draft_pos=draft_pos)
    return SampledCheck(sampling, p_draft, draft_tokens, generator, logits.shape[-1], draft_ids,
                        draft_pos).decide(logits)


class SampledCheck:
    """A sampled verification on a CPU in two halves: made before the target's pass (the generator's draws,
    :class:`DrawnAhead`, and the kernel call's arguments), decided on the pass's logits (k+1, V) after it. What
    ``verify_sampled(process_logits(logits, sampling), ...)`` gives, draw for draw. On bfloat16 logits (temperature,
    top-k, top-p) the decision is one call of rows.c's sd_verify_sampled: the same float32 probabilities and
    comparisons, without the (k+1, V) distributions made first (a row after the first rejection is never computed)
    or the tensor calls around them (a k=0 or k=1 verification after a pass on a 2-core AMD EPYC: 0.24 ms, ~0.05
    of it the kernel); else process_logits and verify_sampled with the draws made ahead.
    ``scratch``: (2, V) float32 to reuse across steps (the row drawn from, the residual), or None. ``draft_tokens``
    and ``draft_pos`` as tensors or as ints (the decode loop's: no tensor made for the kernel's call)."""

    def __init__(self, sampling: SamplingConfig, p_draft: torch.Tensor | None, draft_tokens: torch.Tensor | list[int],
                 generator: torch.Generator | None, vocab: int, draft_ids: torch.Tensor | None = None,
                 draft_pos: torch.Tensor | list[int] | None = None, scratch: torch.Tensor | None = None) -> None:
        self.sampling, self.p_draft = sampling, p_draft
        self.draft_ids, self.scratch = draft_ids, scratch
        self.tokens = draft_tokens if isinstance(draft_tokens, list) else draft_tokens.tolist()
        self._pos = draft_pos if draft_pos is None or isinstance(draft_pos, list) else draft_pos.tolist()
        k = len(self.tokens)
        self.draws = DrawnAhead(generator, k)
        self._call = None
        lib = kernels.library() if sampling.one_call else None
        fits = (p_draft is None or (p_draft.dtype == torch.float32 and p_draft.is_contiguous())) and (
            draft_ids is None or (draft_ids.dtype == torch.int64 and draft_ids.is_contiguous())) and (
            p_draft is None or draft_ids is not None or p_draft.shape[-1] == vocab)  # a wide draft's rows: whole rows
        if lib is None or not fits:
            return
        if scratch is None or scratch.shape != (2, vocab) or scratch.dtype != torch.float32:
            self.scratch = scratch = torch.empty(2, vocab, dtype=torch.float32)
        cols = self.tokens if self._pos is None else self._pos
        self._next = ctypes.c_int64()
        self._call = (lib.sd_verify_sampled, k, vocab, 1.0 / sampling.temperature, sampling.top_k, sampling.top_p,
                      (ctypes.c_int64 * (k + 1))(*self.tokens), None if p_draft is None else p_draft.data_ptr(),
                      0 if p_draft is None else p_draft.shape[-1], (ctypes.c_int64 * (k + 1))(*cols),
                      None if draft_ids is None else draft_ids.data_ptr(),
                      (ctypes.c_float * (k + 1))(*self.draws.u.tolist()), float(self.draws.u_next),
                      scratch.data_ptr(), scratch.data_ptr() + 4 * vocab, ctypes.byref(self._next))

    def decide(self, logits: torch.Tensor) -> tuple[int, list[int]]:
        """(accepted, emitted tokens) for the target's logits (k+1, V), as verify_sampled gives them."""
        call = self._call
        if call is None or logits.dtype != torch.bfloat16 or not logits.is_contiguous() or call[2] != logits.shape[-1]:
            return verify_sampled(process_logits(logits, self.sampling), self.p_draft,
                                  torch.tensor(self.tokens, dtype=torch.long), None, self.draws,
                                  draft_ids=self.draft_ids,
                                  draft_pos=None if self._pos is None else torch.tensor(self._pos, dtype=torch.long))
        n = call[0](logits.data_ptr(), *call[1:])
        if n < 0:
            raise MemoryError("out of memory in the sampling kernel")
        return n, self.tokens[:n] + [self._next.value]
