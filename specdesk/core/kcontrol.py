"""How many tokens to draft each step. ``FixedK`` here; the adaptive controller lives in adaptive.py."""

from __future__ import annotations


class FixedK:
    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self, context_len: int = 0) -> int:
        return self.k

    def observe(self, k: int, drafted: int, accepted: int, draft_s: float, verify_s: float,
                context_len: int = 0) -> None:
        pass
