"""Stop strings: cut the output at the first one, and never show a piece of one.

Text that could still turn into a stop string (a suffix equal to the start of one) is held back
until the next piece decides it; held text is bounded by the longest stop string.
"""

from __future__ import annotations


class StopStrings:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.held = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """Add text; return what can be shown now. Sets ``stopped`` when a stop string appears."""
        if not self.stops:
            return piece
        buf = self.held + piece
        hits = [p for p in (buf.find(s) for s in self.stops) if p >= 0]
        if hits:
            self.stopped = True
            self.held = ""
            return buf[: min(hits)]
        hold = 0
        for s in self.stops:
            for h in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:h]):
                    hold = h
                    break
        self.held = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold]

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out
