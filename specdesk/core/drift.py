"""Acceptance drifting down over a conversation.

A draft is tuned on some text; as a conversation wanders away from it (a long context, a new topic, a
language or format the draft saw little of) its guesses pass less often. Production deployments of
speculative decoding alert when a tuned pair's acceptance falls under 0.60. This tracker compares a
conversation's latest replies with its first ones, for one drafter and setting at a time (acceptance
depends on k: a longer draft passes a smaller share of its tokens, so a change of k or drafter starts a
new baseline), and raises the alarm when the latest are under the floor and have fallen from the first.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

DRIFT_FLOOR = 0.60
WINDOW_TOKENS = 64  # drafted tokens each window spans (whole replies, at least one)
MIN_DROP = 0.05  # the latest must be this far under the first: a pair that starts low is not drifting


@dataclass(frozen=True)
class Drift:
    first: float  # acceptance over the conversation's first replies
    recent: float  # over its latest replies
    replies: int  # replies tracked under the current setting
    floor: float

    @property
    def alarm(self) -> bool:
        return self.recent < self.floor and self.recent <= self.first - MIN_DROP


class AcceptanceDrift:
    def __init__(self, floor: float = DRIFT_FLOOR, window_tokens: int = WINDOW_TOKENS) -> None:
        self.floor = floor
        self.window = window_tokens
        self.key: Hashable = None
        self.replies: list[tuple[int, int]] = []  # (drafted, accepted) per reply

    def reset(self) -> None:
        """A new conversation."""
        self.key = None
        self.replies = []

    def add_reply(self, key: Hashable, drafted: int, accepted: int) -> Drift | None:
        """One reply's totals under setting ``key`` (e.g. drafter, k, greedy or not); the drift so far, or None
        while the conversation is too short to have a first and a latest window apart."""
        if key != self.key:
            self.key, self.replies = key, []
        if drafted > 0:
            self.replies.append((drafted, accepted))
        return self.status()

    def status(self) -> Drift | None:
        first = _window(self.replies, self.window)
        recent = _window(self.replies[::-1], self.window)
        if first is None or recent is None or first[0] + recent[0] > len(self.replies):
            return None  # the two windows would share replies
        return Drift(first=first[1], recent=recent[1], replies=len(self.replies), floor=self.floor)


def _window(replies: list[tuple[int, int]], tokens: int) -> tuple[int, float] | None:
    """(replies used, acceptance) over the fewest leading replies that hold ``tokens`` drafted tokens."""
    drafted = accepted = 0
    for i, (d, a) in enumerate(replies):
        drafted += d
        accepted += a
        if drafted >= tokens:
            return i + 1, accepted / drafted
    return None
