"""Step-level figures from a server's Prometheus counters: what the app plots for a remote engine.

Two scrapes of ``/metrics`` a moment apart give rates over that interval, the way PromQL's ``rate()``
does (vLLM's ``SpecDecodingProm`` docstring gives the formulas):

    tokens/s              = d(generation tokens) / dt
    acceptance rate       = d(accepted draft tokens) / d(draft tokens)
    mean accepted length  = 1 + d(accepted draft tokens) / d(drafts)      (counts the bonus token, as vLLM does)
    acceptance at pos i   = d(accepted at position i) / d(drafts)

Names are read for three servers (checked against vLLM v0.32.0's docs and ``vllm/v1/metrics/loggers.py``,
``vllm/v1/spec_decode/metrics.py``; llama.cpp's server: ``llamacpp:tokens_predicted_total``,
``llamacpp:requests_processing``, ``llamacpp:requests_deferred``, ``llamacpp:kv_cache_usage_ratio``, and
its draft counters under either vLLM's shape or the names seen scraped from llama-server builds by other
projects' code (``n_drafted_total``/``n_drafted_accepted_total``, ``n_draft_total``/``n_draft_accepted_total``,
``n_accepted_total``: llama.cpp has renamed them between builds, and stock builds may export none); specdesk's
own ``specdesk:`` names are vLLM's):
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdesk.core.remote.promtext import Sample, by_label, value

PREFIXES = ("vllm:", "specdesk:", "llamacpp:")

# family -> metric names after the prefix, first found wins
FAMILIES = {
    "generation_tokens": ("generation_tokens_total", "tokens_predicted_total"),
    "prompt_tokens": ("prompt_tokens_total",),
    "drafts": ("spec_decode_num_drafts_total", "n_draft_verif_steps_total"),
    "draft_tokens": ("spec_decode_num_draft_tokens_total", "n_draft_tokens_total", "n_draft_total",
                     "n_drafted_total"),
    "accepted": ("spec_decode_num_accepted_tokens_total", "n_draft_accepted_total", "n_drafted_accepted_total",
                 "n_accepted_total"),
    "running": ("num_requests_running", "requests_processing"),
    "waiting": ("num_requests_waiting", "requests_deferred"),
    "kv_usage": ("kv_cache_usage_perc", "gpu_cache_usage_perc", "kv_cache_usage_ratio"),
    "memory": ("memory_used_bytes",),
}
PER_POSITION = ("spec_decode_num_accepted_tokens_per_pos_total",)


@dataclass(frozen=True)
class Counters:
    """One scrape, reduced to the families above (None where the server does not report one)."""

    time: float
    prefix: str | None
    values: dict = field(default_factory=dict)
    per_position: dict = field(default_factory=dict)  # {position: accepted count}

    def get(self, family: str) -> float | None:
        return self.values.get(family)


def detect_prefix(samples: list[Sample]) -> str | None:
    """vllm:, specdesk: or llamacpp: (the one with most samples), or None for another server."""
    counts = {p: sum(1 for s in samples if s.name.startswith(p)) for p in PREFIXES}
    best = max(counts, key=counts.get)
    return best if counts[best] else None


def read_counters(samples: list[Sample], t: float) -> Counters:
    prefix = detect_prefix(samples)
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    if prefix is not None:
        for family, names in FAMILIES.items():
            for name in names:
                v = value(samples, prefix + name)
                if v is not None:
                    values[family] = v
                    break
        for name in PER_POSITION:
            for pos, v in by_label(samples, prefix + name, "position").items():
                if pos.isdigit():
                    per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + v
    rss = value(samples, "process_resident_memory_bytes")
    if "memory" not in values and rss is not None:
        values["memory"] = rss
    return Counters(time=t, prefix=prefix, values=values, per_position=per_pos)


@dataclass(frozen=True)
class ServerFigures:
    """Figures over one interval between scrapes; None where the server does not report what they need."""

    seconds: float
    prefix: str | None
    generated: float | None = None
    tokens_per_second: float | None = None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    acceptance_rate: float | None = None
    mean_accepted_length: float | None = None
    per_position: tuple[float, ...] = ()  # acceptance at each draft position, over the interval
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    memory_bytes: float | None = None


def _delta(a: Counters, b: Counters, family: str) -> float | None:
    x, y = a.get(family), b.get(family)
    if x is None or y is None:
        return None
    return max(0.0, y - x)  # a restarted server resets its counters: no negative rates


def figures(before: Counters, after: Counters) -> ServerFigures:
    dt = max(after.time - before.time, 1e-9)
    gen = _delta(before, after, "generation_tokens")
    drafts = _delta(before, after, "drafts")
    dtoks = _delta(before, after, "draft_tokens")
    acc = _delta(before, after, "accepted")
    per_pos: tuple[float, ...] = ()
    if drafts and after.per_position:
        n = max(after.per_position) + 1
        per_pos = tuple(max(0.0, after.per_position.get(i, 0.0) - before.per_position.get(i, 0.0)) / drafts
                        for i in range(n))
    return ServerFigures(
        seconds=dt, prefix=after.prefix, generated=gen,
        tokens_per_second=gen / dt if gen is not None else None,
        drafts=drafts, draft_tokens=dtoks, accepted=acc,
        acceptance_rate=acc / dtoks if (acc is not None and dtoks) else None,
        mean_accepted_length=1 + acc / drafts if (acc is not None and drafts) else None,
        per_position=per_pos, running=after.get("running"), waiting=after.get("waiting"),
        kv_usage=after.get("kv_usage"), memory_bytes=after.get("memory"))
