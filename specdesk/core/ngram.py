"""An incremental n-gram index over a growing token sequence: what followed the context's last n-gram before.

Prompt lookup (Saxena, 2023) drafts with it; adaptive k reads it as a hint of how far a drafted run is
likely to pass (a reply repeating its prompt or itself tends to go on repeating).
"""

from __future__ import annotations


class NgramIndex:
    """For n from ``max_n`` down to ``min_n``, the last n tokens are looked up in a table of earlier
    n-grams -> the positions after their latest occurrences; the first hit's continuation (up to k
    tokens) is returned. Of an n-gram's recent occurrences (up to ``RECENT``), the latest one followed by
    at least k tokens wins, else the one followed by the most: in a repeating run the very latest
    occurrence ends just before the cursor and would offer a single token. The table is updated only
    with new tokens, so a lookup's work does not grow with the context.
    """

    RECENT = 8

    def __init__(self, max_n: int = 4, min_n: int = 2) -> None:
        if not (1 <= min_n <= max_n):
            raise ValueError("need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n
        self.reset()

    def reset(self) -> None:
        """A new sequence."""
        self._tables: dict[int, dict[tuple[int, ...], list[int]]] = {n: {} for n in range(self.min_n, self.max_n + 1)}
        self._indexed = 0

    def extend(self, ids: list[int]) -> None:
        """Index ``ids`` (which extend what was indexed before) up to their last token."""
        # Position j starts the continuation of the n-gram ids[j-n:j]; the current suffix (j = len)
        # has no continuation yet and is not indexed, so a lookup never finds itself.
        for j in range(max(1, self._indexed), len(ids)):
            for n, table in self._tables.items():
                if j >= n:
                    positions = table.setdefault(tuple(ids[j - n:j]), [])
                    positions.append(j)
                    if len(positions) > self.RECENT:
                        del positions[0]
        self._indexed = max(self._indexed, len(ids))

    def lookup(self, ids: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of ids' last n-gram ([] if none).

        ``ids`` must extend the sequence seen by earlier calls (since :meth:`reset`)."""
        if k <= 0:
            return []
        self.extend(ids)
        end = len(ids)
        for n in range(self.max_n, self.min_n - 1, -1):
            if end < n:
                continue
            positions = self._tables[n].get(tuple(ids[-n:]))
            if positions:
                pos = next((p for p in reversed(positions) if end - p >= k), positions[0])
                return ids[pos:pos + k]
        return []
