"""A memory budget a generation keeps to: checked after the prefill and after every step.

On a GPU an allocation past the memory raises ``torch.cuda.OutOfMemoryError``; on a CPU nothing does:
the system swaps, then its out-of-memory killer ends the process, session and all. A budget turns both
into the same thing: the generation stops with :class:`~specdesk.core.errors.OutOfMemory` (one line that
says what was used and what the budget was), and the caller frees the generation's buffers
(``Engine.release_buffers``). Core reads nothing itself: the caller passes the reading (``specdesk.hw``
has one per device) and the limit (the app uses the memory available when the reply started, less
the planner's margin).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specdesk.core.errors import OutOfMemory
from specdesk.core.events import DoneEvent, Event


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


@dataclass(frozen=True)
class MemoryBudget:
    limit_bytes: int
    read: Callable[[], int | None]  # bytes this process holds now (RSS, or the GPU memory torch reserved)
    what: str = "RAM"  # what is measured, for the message: "RAM" or "GPU memory"

    def check(self, tokens: int = 0) -> None:
        """Raise OutOfMemory when the reading is over the limit (a reading of None passes)."""
        used = self.read()
        if used is not None and used > self.limit_bytes:
            after = f" after {tokens} new tokens" if tokens else ""
            raise OutOfMemory(f"out of memory{after}: specdesk holds {_gib(used)} of {self.what}, over the "
                              f"{_gib(self.limit_bytes)} this reply could use")


def guarded(events: Iterator[Event], budget: MemoryBudget) -> Iterator[Event]:
    """``events`` (a decode loop's), checking ``budget`` after each one but the last."""
    tokens = 0
    try:
        for ev in events:
            yield ev
            if isinstance(ev, DoneEvent):
                return
            tokens += len(getattr(ev, "token_ids", ()))
            budget.check(tokens)
    finally:
        events.close()  # stop the loop where it is (its buffers are released by the engine)
