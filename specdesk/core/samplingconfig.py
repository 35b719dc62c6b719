"""What a user asks of sampling: temperature, top-k, top-p (no torch here: the command line's parser and the
settings read it before any model loads; core/sampling applies it to logits)."""

from __future__ import annotations

from dataclasses import dataclass

from specdesk.core.errors import BadSetting


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 means greedy (argmax); top_k 0 and top_p 1.0 mean "off"."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.temperature <= 100.0):
            raise BadSetting(f"temperature must be between 0 and 100, got {self.temperature}")
        if self.top_k < 0:
            raise BadSetting(f"top-k must be 0 (off) or positive, got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise BadSetting(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def one_call(self) -> bool:
        """Sampling whose draws and verification rows.c makes in one call each on a CPU (any temperature, top-k and
        top-p: the drafter's chain, acceptance.SampledCheck); greedy decoding reads argmaxes instead."""
        return not self.greedy
