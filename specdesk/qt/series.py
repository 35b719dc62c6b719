"""Ring buffers and the per-step metrics the plots draw. Plain Python + numpy: no Qt here.

Events arrive as fast as the engine makes them; these buffers take each in O(1) and the plots read
them on a slow timer (pyqtgraph's scrollingPlots habit), so drawing never slows decoding down.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

ROLLING_STEPS = 8  # window of the rolling tokens/s and acceptance rate


class Ring:
    """A fixed-capacity float buffer; ``values()`` returns the kept points oldest first."""

    def __init__(self, capacity: int = 4096) -> None:
        self._buf = np.full(capacity, np.nan)
        self._n = 0

    def append(self, value: float | None) -> None:
        self._buf[self._n % len(self._buf)] = math.nan if value is None else value
        self._n += 1

    def values(self) -> np.ndarray:
        cap = len(self._buf)
        if self._n <= cap:
            return self._buf[: self._n].copy()
        i = self._n % cap
        return np.concatenate([self._buf[i:], self._buf[:i]])

    def clear(self) -> None:
        self._n = 0

    def __len__(self) -> int:
        return min(self._n, len(self._buf))

    @property
    def last(self) -> float | None:
        return None if self._n == 0 else float(self._buf[(self._n - 1) % len(self._buf)])


class StepSeries:
    """Time series of one generation, fed with step values (from a StepEvent or a session-log line)."""

    def __init__(self, capacity: int = 4096) -> None:
        self.t = Ring(capacity)
        self.tps_rolling = Ring(capacity)
        self.tps_cumulative = Ring(capacity)
        self.acc_rolling = Ring(capacity)
        self.acc_cumulative = Ring(capacity)
        self.hist: list[int] = []  # hist[n]: steps that kept n draft tokens
        self.steps = self.tokens = self.drafted = self.accepted = 0
        self.max_k = 0
        self._window: deque[tuple[int, float, int, int]] = deque(maxlen=ROLLING_STEPS)

    def clear(self) -> None:
        self.__init__(len(self.t._buf))

    def add(self, *, elapsed_s: float, step_s: float, tokens: int, drafted: int, accepted: int, k: int) -> None:
        self.steps += 1
        self.tokens += tokens
        self.drafted += drafted
        self.accepted += accepted
        self.max_k = max(self.max_k, k, drafted)
        while len(self.hist) <= max(self.max_k, accepted):
            self.hist.append(0)
        self.hist[accepted] += 1
        self._window.append((tokens, step_s, drafted, accepted))
        w_tokens = sum(w[0] for w in self._window)
        w_time = sum(w[1] for w in self._window)
        w_drafted = sum(w[2] for w in self._window)
        w_accepted = sum(w[3] for w in self._window)
        self.t.append(elapsed_s)
        self.tps_rolling.append(w_tokens / w_time if w_time > 0 else None)
        self.tps_cumulative.append(self.tokens / elapsed_s if elapsed_s > 0 else None)
        self.acc_rolling.append(w_accepted / w_drafted if w_drafted else None)
        self.acc_cumulative.append(self.accepted / self.drafted if self.drafted else None)

    def add_step(self, step) -> None:
        """A StepEvent or a step dict of a session log."""
        get = step.get if isinstance(step, dict) else lambda name, default=None: getattr(step, name, default)
        self.add(elapsed_s=float(get("elapsed_s", 0.0)), step_s=float(get("step_s", 0.0)),
                 tokens=len(get("token_ids", ()) or ()), drafted=int(get("drafted", 0)),
                 accepted=int(get("accepted", 0)), k=int(get("k", 0)))

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        return self.tokens / self.steps if self.steps else None


class MemorySeries:
    """Memory over time: this process's use and what is free, in bytes; None readings become gaps."""

    def __init__(self, capacity: int = 1200) -> None:
        self.t = Ring(capacity)
        self.used = Ring(capacity)
        self.free = Ring(capacity)
        self.used_label = "this process"
        self.free_label = "free"

    def add(self, t: float, used: int | None, free: int | None) -> None:
        self.t.append(t)
        self.used.append(used)
        self.free.append(free)

    def clear(self) -> None:
        for r in (self.t, self.used, self.free):
            r.clear()

    def __len__(self) -> int:
        return len(self.t)
