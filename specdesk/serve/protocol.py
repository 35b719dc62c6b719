"""The OpenAI-compatible wire format: requests in, response bodies and stream chunks out.

Requests are checked here, before they reach the engine, and every problem becomes an ``ApiError`` that
the server sends as OpenAI's error body (``{"error": {"message", "type", "param", "code"}}``) with a 4xx
status. Defaults follow OpenAI's API reference (temperature 1, top_p 1, completions' max_tokens 16);
``top_k`` is accepted as vLLM accepts it; a ``specdesk`` object may choose ``k`` and the ``drafter``.

Each response carries the speculative figures in two shapes clients already read:
- LM Studio's ``stats`` (``accepted_draft_tokens_count``, ``rejected_draft_tokens_count``,
  ``total_draft_tokens_count``, ``tokens_per_second``, ``time_to_first_token``, ...);
- vLLM's per-request ``metrics.speculative_decoding`` (vLLM v0.32.0, docs/features/speculative_decoding/
  acceptance_metrics.md: ``mean_acceptance_length`` = 1 + accepted / steps that drafted, ``draft_acceptance_rate``,
  ``acceptance_histogram`` of length k + 1, ``acceptance_histogram_by_draft_length``, ``num_spec_steps``,
  ``num_accepted_draft_tokens``, ``num_draft_tokens``, ``num_spec_tokens``), beside vLLM's timing fields.
In a stream they ride the final usage chunk (``stream_options.include_usage``), as in vLLM; every content
chunk also carries its engine step under ``specdesk`` (drafted, accepted, token ids, timings), which the
app's remote mode reads to plot a remote specdesk exactly as a local one.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from specdesk.core.errors import SpecdeskError
from specdesk.core.events import DoneEvent, StepEvent
from specdesk.core.pairing import DRAFTERS
from specdesk.core.settings import MAX_K, MAX_NEW_TOKENS, GenerationSettings

MAX_STOP = 4  # OpenAI's limit on stop sequences
CHAT_DEFAULT_MAX_TOKENS = 4096  # a chat request without max_tokens: the rest of the context, at most this
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class ApiError(Exception):
    """A request the server refuses: HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ParsedRequest:
    kind: str  # "chat" or "completion"
    model: str
    settings: GenerationSettings
    drafter: str | None
    stream: bool
    include_usage: bool
    max_tokens_given: bool
    messages: tuple[dict, ...] = ()
    prompt: str | tuple[int, ...] = ""


# ----------------------------------------------------------------------------- parsing

def _bad(message: str, param: str | None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _number(body: dict, key: str, default, kind=float, *, lo=None, hi=None):
    if key not in body or body[key] is None:
        return default
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
        raise _bad(f"'{key}' must be {'an integer' if kind is int else 'a number'}, got {v!r}", key, "invalid_type")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _bad(f"'{key}' must be between {lo} and {hi}, got {v!r}", key)
    return kind(v)


def _text_content(content, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text parts are understood
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
            out.append(part["text"])
        return "".join(out)
    if content is None:
        return ""
    raise _bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content",
               "invalid_type")


def _messages(body: dict) -> tuple[dict, ...]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _bad("'messages' must be a non-empty list of {role, content} objects", "messages",
                   "invalid_type" if "messages" in body else "missing_required_parameter")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a 'role'", f"messages[{i}]", "invalid_type")
        if m["role"] not in ("system", "developer", "user", "assistant"):
            raise _bad(f"messages[{i}].role {m['role']!r} is not supported (system, user, assistant)",
                       f"messages[{i}].role")
        role = "system" if m["role"] == "developer" else m["role"]
        out.append({"role": role, "content": _text_content(m.get("content"), i)})
    return tuple(out)


def _prompt(body: dict) -> str | tuple[int, ...]:
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one prompt
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return tuple(p)
    if "prompt" not in body:
        raise _bad("'prompt' is required", "prompt", "missing_required_parameter")
    raise _bad("'prompt' must be a string, a list of token ids, or a list of one of these (batches of several "
               "prompts are not supported)", "prompt", "invalid_type")


def _stop(body: dict) -> tuple[str, ...]:
    s = body.get("stop")
    if s is None:
        return ()
    if isinstance(s, str):
        s = [s]
    if not isinstance(s, list) or not all(isinstance(x, str) and x for x in s):
        raise _bad("'stop' must be a non-empty string or a list of them", "stop", "invalid_type")
    if len(s) > MAX_STOP:
        raise _bad(f"'stop' may hold at most {MAX_STOP} sequences, got {len(s)}", "stop")
    return tuple(s)


UNSUPPORTED_TRUE = ("logprobs", "echo", "tools", "functions", "tool_choice", "response_format", "logit_bias",
                    "best_of", "suffix")


def parse_request(kind: str, body, model_ids: tuple[str, ...], max_context: int) -> ParsedRequest:
    """Check a /v1/chat/completions (kind "chat") or /v1/completions ("completion") body."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", None, "invalid_type")
    model = body.get("model")
    if model is None:
        model = model_ids[0]
    if not isinstance(model, str):
        raise _bad("'model' must be a string", "model", "invalid_type")
    if model not in model_ids:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves {', '.join(model_ids)}",
                       param="model", code="model_not_found")
    for key in UNSUPPORTED_TRUE:
        v = body.get(key)
        if v not in (None, False, 0, [], {}) and not (key == "response_format" and v == {"type": "text"}):
            raise _bad(f"'{key}' is not supported by specdesk serve", key, "unsupported_parameter")
    if _number(body, "n", 1, int, lo=1, hi=128) != 1:
        raise _bad("only n=1 is supported (one engine, one sequence per request)", "n")
    for key in ("presence_penalty", "frequency_penalty"):
        if _number(body, key, 0.0, lo=-2.0, hi=2.0) != 0.0:
            raise _bad(f"'{key}' is not supported (the speculative output must stay the model's own)", key,
                       "unsupported_parameter")
    temperature = _number(body, "temperature", 1.0, lo=0.0, hi=2.0)
    top_p = _number(body, "top_p", 1.0, lo=0.0, hi=1.0)
    if top_p == 0.0:
        raise _bad("'top_p' must be greater than 0", "top_p")
    top_k = _number(body, "top_k", 0, int, lo=-1, hi=1 << 30)
    seed = _number(body, "seed", None, int, lo=0, hi=2**63 - 1)
    mt_key = "max_completion_tokens" if (kind == "chat" and body.get("max_completion_tokens") is not None) \
        else "max_tokens"
    max_tokens = _number(body, mt_key, None, int, lo=1, hi=MAX_NEW_TOKENS)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("'stream' must be true or false", "stream", "invalid_type")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise _bad("'stream_options' must be an object", "stream_options", "invalid_type")
    if opts and not stream:
        raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
    include_usage = bool(opts.get("include_usage", False))
    ext = body.get("specdesk") or {}
    if not isinstance(ext, dict):
        raise _bad("'specdesk' must be an object ({\"k\": 4 | \"auto\", \"drafter\": ...})", "specdesk",
                   "invalid_type")
    k = ext.get("k", "auto")  # as specdesk generate and the app
    if not (k == "auto" or (isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= MAX_K)):
        raise _bad(f"'specdesk.k' must be 0..{MAX_K} or \"auto\", got {k!r}", "specdesk.k")
    drafter = ext.get("drafter")
    if drafter is not None and drafter not in DRAFTERS:
        raise _bad(f"'specdesk.drafter' must be {', '.join(DRAFTERS)}, got {drafter!r}", "specdesk.drafter")

    if kind == "chat":
        messages, prompt = _messages(body), ""
    else:
        messages, prompt = (), _prompt(body)
    default = COMPLETION_DEFAULT_MAX_TOKENS if kind == "completion" else min(CHAT_DEFAULT_MAX_TOKENS, max_context)
    try:
        settings = GenerationSettings(max_new_tokens=max_tokens or default, temperature=float(temperature),
                                      top_k=max(0, top_k), top_p=float(top_p), seed=seed, k=k, stop=_stop(body))
    except SpecdeskError as e:
        raise _bad(str(e), None) from None
    return ParsedRequest(kind=kind, model=model, settings=settings, drafter=drafter, stream=stream,
                         include_usage=include_usage, max_tokens_given=max_tokens is not None,
                         messages=messages, prompt=prompt)


# ----------------------------------------------------------------------------- figures of one request

@dataclass
class RequestFigures:
    """What one request drafted and accepted, step by step, for its response and the server's counters."""

    k: int
    steps: int = 0
    spec_steps: int = 0  # steps that drafted at least one token (vLLM's num_spec_steps)
    drafted: int = 0
    accepted: int = 0
    tokens: int = 0
    histogram: dict = field(default_factory=dict)  # {draft length: [steps that accepted j]}

    def add(self, ev: StepEvent) -> None:
        self.steps += 1
        self.tokens += len(ev.token_ids)
        if ev.drafted:
            self.spec_steps += 1
            self.drafted += ev.drafted
            self.accepted += ev.accepted
            row = self.histogram.setdefault(ev.drafted, [0] * (ev.drafted + 1))
            row[min(ev.accepted, ev.drafted)] += 1

    def speculative_decoding(self) -> dict:
        """vLLM's ``metrics.speculative_decoding`` object."""
        k = max([self.k, *self.histogram.keys()]) if self.histogram else self.k
        dense = [0] * (k + 1)
        for row in self.histogram.values():
            for j, c in enumerate(row):
                dense[j] += c
        return {
            "mean_acceptance_length": 1 + self.accepted / self.spec_steps if self.spec_steps else 1.0,
            "draft_acceptance_rate": self.accepted / self.drafted if self.drafted else None,
            "acceptance_histogram": dense,
            "acceptance_histogram_by_draft_length": {str(d): list(r) for d, r in sorted(self.histogram.items())},
            "num_spec_steps": self.spec_steps,
            "num_accepted_draft_tokens": self.accepted,
            "num_draft_tokens": self.drafted,
            "num_spec_tokens": k,
        }


FINISH = {"eos": "stop", "stop_string": "stop", "max_new_tokens": "length", "cancelled": "abort"}


@dataclass
class Timing:
    """Wall times of one request, seconds from time.monotonic()."""

    received: float
    started: float | None = None
    first_token: float | None = None
    finished: float | None = None


def metrics_block(fig: RequestFigures, done: DoneEvent, timing: Timing) -> dict:
    """vLLM's per-request ``metrics`` object: timing fields plus ``speculative_decoding``."""
    s = done.stats
    ttft = (timing.first_token - timing.started) if (timing.first_token and timing.started) else None
    gen = s.decode_seconds
    itl = gen / (s.new_tokens - 1) if s.new_tokens > 1 else None
    return {"time_to_first_token_ms": ttft * 1000 if ttft is not None else None,
            "generation_time_ms": gen * 1000,
            "queue_time_ms": ((timing.started or timing.received) - timing.received) * 1000,
            "mean_itl_ms": itl * 1000 if itl is not None else None,
            "tokens_per_second": s.tokens_per_second,
            "speculative_decoding": fig.speculative_decoding()}


def lmstudio_stats(fig: RequestFigures, done: DoneEvent, timing: Timing, draft_model: str | None) -> dict:
    """LM Studio's ``stats`` object (its REST API's field names)."""
    s = done.stats
    ttft = (timing.first_token - timing.started) if (timing.first_token and timing.started) else None
    return {"tokens_per_second": s.tokens_per_second, "time_to_first_token": ttft,
            "generation_time": s.decode_seconds, "stop_reason": done.stop_reason, "draft_model": draft_model,
            "total_draft_tokens_count": fig.drafted, "accepted_draft_tokens_count": fig.accepted,
            "rejected_draft_tokens_count": fig.drafted - fig.accepted, "ignored_draft_tokens_count": 0}


def usage(done: DoneEvent) -> dict:
    """OpenAI's usage object; ``cached_tokens``: the prompt's tokens kept from the last request's cache (a
    conversation's earlier turns, a shared system prompt) instead of read again."""
    s = done.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.new_tokens,
            "total_tokens": s.prompt_tokens + s.new_tokens,
            "prompt_tokens_details": {"cached_tokens": s.cached_prompt_tokens}}


# ----------------------------------------------------------------------------- bodies

def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]


def _finish(done: DoneEvent) -> str:
    return FINISH.get(done.stop_reason, "stop")


def full_response(req: ParsedRequest, rid: str, created: int, done: DoneEvent, fig: RequestFigures, timing: Timing,
                  draft_model: str | None) -> dict:
    if req.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": done.text}, "logprobs": None,
                  "finish_reason": _finish(done)}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": done.text, "logprobs": None, "finish_reason": _finish(done)}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": req.model, "choices": [choice],
            "usage": usage(done), "stats": lmstudio_stats(fig, done, timing, draft_model),
            "metrics": metrics_block(fig, done, timing),
            "specdesk": {"stop_reason": done.stop_reason, "seed": done.seed, "token_ids": list(done.token_ids),
                         "stats": done.stats.to_dict()}}


def chunk(req: ParsedRequest, rid: str, created: int, text: str, *, role: bool = False,
          finish: str | None = None, step: StepEvent | None = None) -> dict:
    if req.kind == "chat":
        delta: dict = {"role": "assistant", "content": text} if role else ({"content": text} if text or finish is None
                                                                            else {})
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    out = {"id": rid, "object": obj, "created": created, "model": req.model, "choices": [choice]}
    if step is not None:
        out["specdesk"] = step.to_dict()
    return out


def final_chunks(req: ParsedRequest, rid: str, created: int, done: DoneEvent, fig: RequestFigures, timing: Timing,
                 draft_model: str | None) -> list[dict]:
    """The last text (held back by stop-string matching), the finish chunk, and the usage chunk if asked."""
    out = [chunk(req, rid, created, done.tail, finish=_finish(done))]
    out[-1]["specdesk"] = {"stop_reason": done.stop_reason, "seed": done.seed, "stats": done.stats.to_dict()}
    if req.include_usage:
        out.append({"id": rid, "object": out[0]["object"], "created": created, "model": req.model, "choices": [],
                    "usage": usage(done), "stats": lmstudio_stats(fig, done, timing, draft_model),
                    "metrics": metrics_block(fig, done, timing)})
    return out


def now() -> int:
    return int(time.time())
