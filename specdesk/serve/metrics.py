"""The server's counters and gauges, rendered in the Prometheus text format for ``GET /metrics``.

Names follow vLLM's (v0.32.0: ``vllm/v1/metrics/loggers.py``, ``vllm/v1/spec_decode/metrics.py``) under the
``specdesk:`` prefix, so dashboards and the app's remote mode read specdesk, vLLM and llama.cpp alike:

    specdesk:spec_decode_num_drafts_total                 steps that drafted at least one token
    specdesk:spec_decode_num_draft_tokens_total           draft tokens proposed
    specdesk:spec_decode_num_accepted_tokens_total        draft tokens accepted
    specdesk:spec_decode_num_accepted_tokens_per_pos_total{position="i"}
                                                          steps whose first i+1 draft tokens were all accepted
    specdesk:generation_tokens_total, specdesk:prompt_tokens_total
    specdesk:request_success_total{finished_reason}       finished requests (stop, length, abort)
    specdesk:request_errors_total{code}                   refused requests (HTTP status)
    specdesk:num_requests_running, specdesk:num_requests_waiting
    specdesk:kv_cache_usage_perc                          context held by the running request / the model's context
    specdesk:memory_used_bytes                            device memory in use (CUDA allocator, or this process's RSS)
    process_resident_memory_bytes

Counters move at every engine step, so a scrape during a long reply already shows its progress. Every
sample carries ``model_name`` (and vLLM's ``engine="0"``), as vLLM's do.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from specdesk.core.events import StepEvent

PREFIX = "specdesk:"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


class ServerMetrics:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos: dict[int, int] = defaultdict(int)
        self.generation_tokens = self.prompt_tokens = 0
        self.success: dict[str, int] = defaultdict(int)
        self.errors: dict[int, int] = defaultdict(int)
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self.max_k = 0

    # ---------------------------------------------------------------- updates (engine and handler threads)

    def step(self, ev: StepEvent, max_context: int) -> None:
        with self._lock:
            self.generation_tokens += len(ev.token_ids)
            if ev.drafted:
                self.drafts += 1
                self.draft_tokens += ev.drafted
                self.accepted += ev.accepted
                self.max_k = max(self.max_k, ev.drafted)
                for i in range(ev.accepted):
                    self.per_pos[i] += 1
            self.kv_usage = min(1.0, ev.context_len / max_context) if max_context else 0.0

    def started(self, prompt_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.running += 1

    def finished(self, reason: str) -> None:
        with self._lock:
            self.running = max(0, self.running - 1)
            self.success[reason] += 1
            self.kv_usage = 0.0

    def error(self, status: int) -> None:
        with self._lock:
            self.errors[status] += 1

    def set_waiting(self, n: int) -> None:
        with self._lock:
            self.waiting = n

    # ---------------------------------------------------------------- rendering

    def render(self, memory: dict | None = None) -> str:
        memory = memory or {}
        base = f'model_name="{_escape(self.model_name)}",engine="0"'
        lines: list[str] = []

        def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
            metric = name + ("_total" if kind == "counter" else "")
            for extra, v in samples:
                labels = base + ("," + extra if extra else "")
                lines.append(f"{metric}{{{labels}}} {_fmt(v)}")

        with self._lock:
            p = PREFIX
            family(p + "spec_decode_num_drafts", "counter", "Number of spec decoding drafts (steps that drafted).",
                   [("", self.drafts)])
            family(p + "spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", [("", self.draft_tokens)])
            family(p + "spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.",
                   [("", self.accepted)])
            positions = max(self.max_k, max(self.per_pos, default=-1) + 1)
            family(p + "spec_decode_num_accepted_tokens_per_pos", "counter", "Accepted tokens per draft position.",
                   [(f'position="{i}"', self.per_pos.get(i, 0)) for i in range(positions)])
            family(p + "generation_tokens", "counter", "Number of generation tokens processed.",
                   [("", self.generation_tokens)])
            family(p + "prompt_tokens", "counter", "Number of prefill tokens processed.", [("", self.prompt_tokens)])
            family(p + "request_success", "counter", "Count of successfully processed requests.",
                   [(f'finished_reason="{r}"', n) for r, n in sorted(self.success.items())] or
                   [('finished_reason="stop"', 0)])
            family(p + "request_errors", "counter", "Requests refused with an error status.",
                   [(f'code="{c}"', n) for c, n in sorted(self.errors.items())] or [('code="400"', 0)])
            family(p + "num_requests_running", "gauge", "Number of requests in model execution.",
                   [("", self.running)])
            family(p + "num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                   [("", self.waiting)])
            family(p + "kv_cache_usage_perc", "gauge",
                   "KV-cache usage: context held by the running request over the model's context. 1 means 100 "
                   "percent usage.", [("", float(self.kv_usage))])
        used = memory.get("cuda_allocated_bytes", memory.get("rss_bytes"))
        if used is not None:
            family(p + "memory_used_bytes", "gauge", "Device memory in use (CUDA allocator, or process RSS on CPU).",
                   [("", int(used))])
        if memory.get("rss_bytes") is not None:
            lines.append("# HELP process_resident_memory_bytes Resident memory size in bytes.")
            lines.append("# TYPE process_resident_memory_bytes gauge")
            lines.append(f"process_resident_memory_bytes {int(memory['rss_bytes'])}")
        return "\n".join(lines) + "\n"
