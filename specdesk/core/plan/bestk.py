"""The best k measured for a pair, read from its session logs.

Every generation specdesk records (the app, ``specdesk generate --log``, ``specdesk serve``) has its
settings and per-step timings. Grouping a pair's greedy-or-sampled generations by their fixed k and
dividing tokens by decode seconds ranks the k values on this machine; generations with k "auto" give
the mean k the adaptive controller chose, used only when no fixed k was measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specdesk.core.sessionlog import read_log

MAX_LOGS = 200  # newest files read; older ones are history
MIN_TOKENS = 32  # a k needs at least this many generated tokens to be ranked


@dataclass(frozen=True)
class BestK:
    k: int | None
    source: str  # one line: how it was chosen
    tokens_per_second: dict  # {k: tokens/s} over the pair's fixed-k generations

    def to_dict(self) -> dict:
        return {"k": self.k, "source": self.source, "tokens_per_second": {str(k): v for k, v in
                                                                          self.tokens_per_second.items()}}


def _same(path_a, path_b) -> bool:
    if not path_a or not path_b:
        return False
    try:
        return os.path.realpath(str(path_a)) == os.path.realpath(str(path_b))
    except OSError:
        return False


def best_k(target_path: str | os.PathLike, drafter: str, draft_path: str | os.PathLike | None,
           logs_dir: str | os.PathLike) -> BestK:
    folder = Path(logs_dir)
    files = sorted(folder.glob("*.jsonl"), key=lambda f: f.stat().st_mtime, reverse=True)[:MAX_LOGS] \
        if folder.is_dir() else []
    tokens: dict[int, int] = {}
    seconds: dict[int, float] = {}
    auto_k: list[float] = []
    used = 0
    for f in files:
        try:
            log = read_log(f)
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        h = log.header
        if not _same((h.get("target") or {}).get("path"), target_path):
            continue
        if drafter == "model" and not _same((h.get("draft") or {}).get("path"), draft_path):
            continue
        for g in log.generations:
            if g.info.get("drafter") != drafter or g.summary is None or g.summary.get("stop_reason") == "cancelled":
                continue
            st = g.summary.get("stats") or {}
            k = (g.info.get("settings") or {}).get("k")
            if k == "auto":
                ks = [s.get("k", 0) for s in g.steps if s.get("drafted")]
                if ks:
                    auto_k.append(sum(ks) / len(ks))
                continue
            if not isinstance(k, int) or k < 1 or not st.get("decode_seconds"):
                continue
            tokens[k] = tokens.get(k, 0) + int(st.get("new_tokens", 0))
            seconds[k] = seconds.get(k, 0.0) + float(st["decode_seconds"])
            used += 1
    rates = {k: tokens[k] / seconds[k] for k in sorted(tokens) if tokens[k] >= MIN_TOKENS and seconds[k] > 0}
    if rates:
        k = max(rates, key=rates.get)
        return BestK(k, f"the fastest k in this pair's session logs: {rates[k]:.1f} tokens/s at k={k} "
                        f"({used} generation{'s' if used != 1 else ''}, k measured: {', '.join(map(str, rates))})", rates)
    if auto_k:
        k = max(1, round(sum(auto_k) / len(auto_k)))
        return BestK(k, f"the mean k adaptive k chose in this pair's session logs ({len(auto_k)} generation"
                        f"{'s' if len(auto_k) != 1 else ''})", {})
    return BestK(None, "no session logs of this pair", {})
