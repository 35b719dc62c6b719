"""Before a generation: will this prompt and reply fit in the memory left, by the planner's own count?

The planner (:func:`specdesk.core.plan.plan`) counts both models' weights and KV caches for the whole
context (prompt + max new tokens + k), the largest transient, and its margins (the CUDA context or the
CPU runtime, allocator headroom). When that total is over the budget (free memory plus what this
process holds, from ``specdesk.hw.memory.memory_budget``), the headroom is under the planner's margin
and the generation is likely to run out of memory: the check says so in one line, with the plan's
advice: a shorter reply that fits, and the best configurations that fit (a quantized target, a smaller
draft, prompt lookup).
"""

from __future__ import annotations

from dataclasses import dataclass

from pathlib import Path

from specdesk.core.errors import SpecdeskError
from specdesk.core.plan.params import analyze
from specdesk.core.plan.planner import Recommendation, human_bytes, plan
from specdesk.core.plan.quant import QuantSpec


@dataclass(frozen=True)
class GenerationFit:
    fits: bool
    total_bytes: int  # the planner's total for this prompt and reply, margins included
    budget_bytes: int
    budget_source: str
    device: str
    prompt_tokens: int
    max_new_tokens: int
    max_new_that_fit: int  # the longest reply that fits after this prompt (0: none)
    advice: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return "GPU memory" if self.device.startswith("cuda") else "RAM"

    @property
    def headroom_bytes(self) -> int:
        return self.budget_bytes - self.total_bytes

    def message(self) -> str:
        """One line (meaningful when not ``fits``)."""
        return f"This reply may not fit in {self.where}: {self.detail()}"

    def detail(self) -> str:
        """The figures behind the verdict."""
        return (f"the planner counts {human_bytes(self.total_bytes)} for {self.prompt_tokens} prompt + "
                f"{self.max_new_tokens} new tokens, margins included, and {human_bytes(self.budget_bytes)} is "
                f"available ({self.budget_source}).")


def _advice(rec: Recommendation, current: dict) -> str | None:
    """A recommendation as one short instruction, or None when it is the configuration already loaded."""
    parts = []
    if rec.target_quant != current["target_quant"]:
        parts.append(f"load the target as {rec.target_quant}")
    if rec.drafter != current["drafter"] or (rec.drafter == "model" and not _same(rec.draft, current["draft"])):
        parts.append({"model": f"use the draft {Path(str(rec.draft)).name}", "ngram": "use prompt lookup instead of a draft model",
                      "none": "decode without a draft"}[rec.drafter])
    elif rec.drafter == "model" and rec.draft_quant != current["draft_quant"]:
        parts.append(f"load the draft as {rec.draft_quant}")
    if not parts:
        return None
    ctx = "" if rec.full_context else f" (context up to {rec.context} tokens)"
    return f"{' and '.join(parts)}{ctx}: {human_bytes(rec.total_bytes)}"


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a == b
    try:
        return analyze(a).path == analyze(b).path
    except SpecdeskError:
        return a == b


def check_generation(target: str, draft: str | None = None, *, drafter: str, target_quant: str = "none",
                     draft_quant: str = "none", double_quant: bool = False, dtype: str = "auto", device: str = "cpu",
                     prompt_tokens: int, max_new_tokens: int, k: int | str, budget_bytes: int,
                     budget_source: str = "given", candidate_drafts: list[str] | None = None,
                     max_advice: int = 2, tree: tuple[int, ...] | str = ()) -> GenerationFit:
    """Does a generation of ``prompt_tokens`` + ``max_new_tokens`` fit ``budget_bytes`` with these models?

    Advice (a shorter reply, then up to ``max_advice`` configurations that fit) is worked out only when it
    does not fit; ``candidate_drafts`` as for :func:`~specdesk.core.plan.plan` (None asks model discovery).
    """
    context = prompt_tokens + max_new_tokens
    from specdesk.core.loading import resolve_quant

    target_quant = resolve_quant(target, target_quant, device, dtype)  # "auto" as the load makes it
    draft_quant = resolve_quant(draft, draft_quant, device, dtype)
    common = dict(drafter=drafter, target_quant=target_quant, draft_quant=draft_quant, double_quant=double_quant,
                  dtype=dtype, device=device, k=k, budget_bytes=budget_bytes, budget_source=budget_source,
                  use_history=False, tree=tree)
    p = plan(target, draft, context=context, recommend=False, **common)
    fit_new = max(0, p.max_context - prompt_tokens)
    if p.fits:
        return GenerationFit(True, p.total_bytes, p.budget_bytes, budget_source, device, prompt_tokens,
                             max_new_tokens, fit_new)
    advice: list[str] = []
    if fit_new >= 1:
        advice.append(f"a shorter reply: up to {fit_new} new tokens fit after this prompt")
    elif p.max_context > 0:
        advice.append("a shorter conversation: this prompt alone leaves no room (start a New chat)")
    rp = plan(target, draft, context=context, recommend=True, candidate_drafts=candidate_drafts,
              max_recommendations=10, **common)
    # a plan drafting with the target's phrases is prompt lookup's configuration (plus a table in host memory)
    current = {"target_quant": QuantSpec.parse(target_quant, double_quant).label,
               "drafter": "ngram" if p.drafter == "phrases" else p.drafter,
               "draft": draft, "draft_quant": QuantSpec.parse(draft_quant, double_quant).label}
    configs: list[str] = []
    for rec in rp.recommendations:
        line = _advice(rec, current)
        if line and line not in configs:
            configs.append(line)
        if len(configs) >= max_advice:
            break
    advice += configs
    return GenerationFit(False, p.total_bytes, p.budget_bytes, budget_source, device, prompt_tokens, max_new_tokens,
                         fit_new, tuple(advice))
