"""How many tokens to draft each step. ``FixedK`` here; the adaptive controller lives in adaptive.py."""

from __future__ import annotations


class FixedK:
    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self) -> int:
        return self.k

    def observe(self, k: int, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        pass
