"""How many tokens to draft each step. ``FixedK`` here; the adaptive controller lives in adaptive.py."""

from __future__ import annotations

from collections.abc import Sequence


class FixedK:
    def __init__(self, k: int) -> None:
        self.k = k

    def plan(self, context_len: int = 0, confidence: bool = False, hint: Sequence[int] = ()) -> tuple[int, None]:
        """(k, keep): a fixed k drafts k tokens whatever the draft's confidence (or the lookup ``hint``)."""
        return self.k, None

    def choose(self, context_len: int = 0) -> int:
        return self.k

    def observe(self, k: int, drafted: int, accepted: int, draft_s: float, verify_s: float,
                context_len: int = 0, confidences: tuple[float, ...] = (), setup_s: float = 0.0,
                other_s: float = 0.0) -> None:
        pass

    def observe_verify(self, drafted: int, verify_s: float, context_len: int = 0, accepted: int | None = None,
                       other_s: float = 0.0, phrases: bool = False) -> None:
        pass
