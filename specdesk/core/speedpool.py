"""A speed-up measured on runs pooled side by side: the app's "Compare with plain decoding".

One run of a short reply is a noisy figure: on a 2-core CPU a 20-token reply of q4 SmolLM2 decodes in ~70 ms, and
plain decoding timed against plain decoding read 0.86-1.07x in the app's window (its own drawing, timers and the
host's other work fall on a few of those milliseconds, and the reply itself paid for drawing its text as it came).
So a reply shorter than ``pool_s`` is compared on new runs only: plain decoding and the reply again (same settings,
same seed), alternating, until each side has decoded for ``pool_s`` seconds or run ``max_runs`` times; each side's
figure is its pooled tokens over its pooled seconds. A reply of ``pool_s`` or longer is compared with one plain run,
unless that gives a speed-up no decoding of the reply can have: above its tokens per target pass (a speculative pass
costs at least a plain one), with a margin for noise. The machine's speed changed between the two (a busy neighbour
during one of them: the app once showed 7.38x for a reply of 1.03 tokens a pass), so both sides are measured again,
alternating, at least ``REMEASURE_RUNS`` runs each.
"""

from __future__ import annotations

from dataclasses import dataclass

POOL_S = 1.0  # seconds of decoding each side pools before the comparison ends ...
MAX_RUNS = 8  # ... or this many runs each
PLAUSIBLE_MARGIN = 1.15  # a speed-up up to this times the reply's tokens per pass is believed
REMEASURE_RUNS = 2


@dataclass
class SpeedPool:
    """A comparison's runs: ``reply_tokens`` decoded in ``reply_s`` by the reply; then what :meth:`next_run` asks."""

    reply_tokens: int
    reply_s: float
    pool_s: float = POOL_S
    max_runs: int = MAX_RUNS
    spec_tokens: int = 0
    spec_s: float = 0.0
    plain_tokens: int = 0
    plain_s: float = 0.0
    spec_runs: int = 0
    plain_runs: int = 0
    tokens_per_pass: float | None = None  # the reply's mean tokens per target pass: the most its speed-up can be
    remeasured: bool = False  # a first comparison was not believable: both sides measured again

    def __post_init__(self) -> None:
        if self.reply_s >= self.pool_s:  # long enough to stand as the speculative side
            self.spec_tokens, self.spec_s, self.spec_runs = self.reply_tokens, self.reply_s, 1

    @property
    def pooled(self) -> bool:
        """Whether the speculative side is runs of the reply again (a short reply), not the reply."""
        return self.remeasured or self.reply_s < self.pool_s

    def implausible(self) -> bool:
        """Whether the speed-up so far is above what the reply's tokens per pass allow (with a margin)."""
        r = self.speedup
        return r is not None and self.tokens_per_pass is not None and r > self.tokens_per_pass * PLAUSIBLE_MARGIN

    def add(self, plain: bool, tokens: int, seconds: float) -> None:
        """One more run's decoded tokens and decode seconds."""
        if plain:
            self.plain_tokens += tokens
            self.plain_s += seconds
            self.plain_runs += 1
        else:
            self.spec_tokens += tokens
            self.spec_s += seconds
            self.spec_runs += 1

    def next_run(self) -> str | None:
        """"plain", "spec" (the reply's settings again) or None: the comparison is done. Plain runs first, the sides
        alternate (each meets the same stretches of a shared machine's speed) and end with as many runs each."""
        if not self.pooled:
            if self.plain_runs == 0:
                return "plain"
            if not self.implausible():
                return None
            self.remeasured = True  # both sides again, alternating, side by side in time
            self.spec_tokens = self.plain_tokens = self.spec_runs = self.plain_runs = 0
            self.spec_s = self.plain_s = 0.0
        if self.plain_runs > self.spec_runs:
            return "spec"
        short = self.plain_s < self.pool_s or self.spec_s < self.pool_s \
            or (self.remeasured and self.plain_runs < REMEASURE_RUNS)
        return "plain" if short and self.plain_runs < self.max_runs else None

    @property
    def spec_tps(self) -> float | None:
        return self.spec_tokens / self.spec_s if self.spec_s > 0 else None

    @property
    def plain_tps(self) -> float | None:
        return self.plain_tokens / self.plain_s if self.plain_s > 0 else None

    @property
    def speedup(self) -> float | None:
        s, p = self.spec_tps, self.plain_tps
        return s / p if s and p else None
