"""A remote server behind the local engine's interface: the same events, so the app does not care which.

    engine = RemoteEngine.connect("http://127.0.0.1:8000/v1")       # specdesk serve, vLLM, llama.cpp, LM Studio
    for ev in engine.stream(engine.chat_ids(messages), settings=GenerationSettings(...)): ...

Each streamed chunk becomes a ``StepEvent``. From `specdesk serve` a chunk is exactly one engine step
and carries it (token ids, drafted, accepted, k, draft/verify seconds), so the events equal the local
ones. From another server a chunk carries text only: drafted and accepted are 0 (unknown per step; the
server's ``/metrics`` gives them, see :mod:`.figures`), the token count comes from vLLM's continuous usage
stats when it sends them, else one per chunk, and times are the client's. The ``DoneEvent`` takes the
final usage and, where the server reports them, the request's speculative totals (vLLM's
``metrics.speculative_decoding``, llama.cpp's ``timings.draft_n`` / ``draft_n_accepted``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from specdesk.core.errors import BadSetting
from specdesk.core.events import DoneEvent, Event, GenerationStats, PrefillEvent, StepEvent
from specdesk.core.remote.client import Endpoint, RemoteError
from specdesk.core.settings import GenerationSettings

UNKNOWN_ID = -1  # a token id the server did not send
STOP_REASONS = {"stop": "eos", "length": "max_new_tokens", "abort": "cancelled"}


@dataclass(frozen=True)
class RemoteModel:
    """Stands where a LoadedModel stands: its name (and what the server says of it)."""

    name: str
    path: str = ""
    quant: str = "remote"

    def describe(self) -> dict:
        return {"name": self.name, "path": self.path, "quant": self.quant, "dtype": "remote", "device": "remote"}


class RemotePrompt(list):
    """What ``chat_ids``/``encode`` give for a remote engine: the messages (or text) to send, as a JSON list."""

    def __init__(self, messages: list[dict] | None = None, text: str | None = None) -> None:
        super().__init__(messages or [])
        self.text = text


class RemoteEngine:
    is_remote = True

    def __init__(self, endpoint: Endpoint, model: str, card: dict, chat: bool, server: str) -> None:
        self.endpoint = endpoint
        self.model = model
        self.card = card
        self.server = server  # "specdesk", "vllm", "llamacpp" or "openai" (any other)
        self.chat = chat
        ext = card.get("specdesk") or {}
        self.target = RemoteModel(model, endpoint.base_url, str(ext.get("target_quant") or "remote"))
        self.draft = RemoteModel(ext["draft"]) if ext.get("draft") else None
        self.drafter = ext.get("drafter") or "model"
        self._drafters = tuple(ext.get("drafters") or ("model",))
        self.max_context = int(card.get("max_model_len") or card.get("context_length") or 1 << 20)

    @classmethod
    def connect(cls, url: str, api_key: str | None = None, model: str | None = None,
                mode: str = "auto") -> "RemoteEngine":
        """Ask the server for its models; ``mode`` "chat", "completion" or "auto" (chat unless it says not)."""
        ep = Endpoint(url, api_key)
        models = ep.models()
        if not models:
            raise RemoteError(f"{ep.base_url} lists no models")
        card = next((m for m in models if m["id"] == model), None) if model else models[0]
        if card is None:
            raise RemoteError(f"{ep.base_url} does not serve {model!r} (it serves "
                              f"{', '.join(m['id'] for m in models)})")
        owner = str(card.get("owned_by") or "")
        server = owner if owner in ("specdesk", "vllm", "llamacpp") else "openai"
        ext = card.get("specdesk") or {}
        if mode == "auto":
            chat = bool(ext.get("chat_template", True))
        elif mode in ("chat", "completion"):
            chat = mode == "chat"
        else:
            raise BadSetting(f"mode must be auto, chat or completion, not {mode!r}")
        return cls(ep, card["id"], card, chat, server)

    # ----------------------------------------------------------------- the engine's interface

    @property
    def device(self) -> str:
        return self.endpoint.base_url

    @property
    def has_chat_template(self) -> bool:
        return self.chat

    def available_drafters(self) -> tuple[str, ...]:
        return self._drafters

    def chat_ids(self, messages: list[dict]) -> RemotePrompt:
        return RemotePrompt([{"role": m["role"], "content": m["content"]} for m in messages])

    def encode(self, prompt) -> RemotePrompt:
        if not isinstance(prompt, str):
            raise BadSetting("a remote server takes text prompts")
        return RemotePrompt(text=prompt)

    def describe(self) -> dict:
        return {"target": self.target.describe(), "draft": self.draft.describe() if self.draft else None,
                "drafter": self.drafter, "device": self.device, "remote": {"url": self.endpoint.base_url,
                                                                            "server": self.server,
                                                                            "model": self.model,
                                                                            "mode": "chat" if self.chat
                                                                            else "completion"}}

    # ----------------------------------------------------------------- generation

    def _body(self, prompt: RemotePrompt, gs: GenerationSettings, drafter: str | None) -> tuple[str, dict]:
        body: dict = {"model": self.model, "max_tokens": gs.max_new_tokens, "temperature": gs.temperature,
                      "top_p": gs.top_p, "stream_options": {"include_usage": True}}
        if gs.seed is not None:
            body["seed"] = gs.seed
        if gs.stop:
            body["stop"] = list(gs.stop)
        if gs.top_k:
            body["top_k"] = gs.top_k  # vLLM and llama.cpp accept it; OpenAI ignores unknown fields at its peril
        if self.server == "specdesk":
            body["specdesk"] = {"k": gs.k, **({"drafter": drafter} if drafter else {})}
        elif drafter == "none":
            raise BadSetting(f"plain decoding on demand needs a specdesk server; {self.server} decides its own "
                             f"drafting")
        if self.server == "vllm":
            body["stream_options"]["continuous_usage_stats"] = True
        if prompt.text is not None:
            if self.chat:
                return "/chat/completions", {**body, "messages": [{"role": "user", "content": prompt.text}]}
            return "/completions", {**body, "prompt": prompt.text}
        if not self.chat:
            raise BadSetting("this connection is in completion mode: send text")
        return "/chat/completions", {**body, "messages": list(prompt)}

    def stream(self, prompt, *, cancel: threading.Event | None = None, drafter: str | None = None,
               controller=None, **settings) -> Iterator[Event]:
        gs = settings.pop("settings", None) or GenerationSettings(**settings)
        if not isinstance(prompt, RemotePrompt):
            prompt = self.encode(prompt) if isinstance(prompt, str) else RemotePrompt(list(prompt))
        path, body = self._body(prompt, gs, drafter)
        return self._events(path, body, gs, cancel)

    def _events(self, path: str, body: dict, gs: GenerationSettings, cancel) -> Iterator[Event]:
        t0 = time.perf_counter()
        chunks = self.endpoint.stream(path, body, cancel)
        texts: list[str] = []
        ids: list[int] = []
        index = drafted = accepted = 0
        draft_s = verify_s = 0.0
        prompt_tokens = None
        completion_seen = 0
        usage_final = None
        finish = None
        ext_done: dict | None = None
        spec: dict | None = None
        timings: dict | None = None
        start = last = None
        prefilled = False
        tail = ""
        for obj in chunks:
            now = time.perf_counter()
            if obj.get("usage") and not obj.get("choices"):
                usage_final = obj["usage"]
                spec = ((obj.get("metrics") or {}).get("speculative_decoding")) or spec
                timings = obj.get("timings") or timings
                continue
            if obj.get("timings"):
                timings = obj["timings"]
            choices = obj.get("choices") or []
            if not choices:
                continue
            ch = choices[0]
            text = (ch.get("delta") or {}).get("content") if "delta" in ch else ch.get("text")
            text = text or ""
            step = obj.get("specdesk") if isinstance(obj.get("specdesk"), dict) else None
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
                if step is not None and "stop_reason" in step:
                    ext_done = step
                    tail = text  # what the server held back for stop strings, sent with the finish
                    continue
            if step is not None and "token_ids" in step and "drafted" in step:
                if not prefilled:
                    prefilled = True
                    prompt_tokens = step.get("context_len", 0) - len(step["token_ids"])
                    yield PrefillEvent(prompt_tokens=max(0, prompt_tokens), seconds=now - t0)
                    start = now
                ev = StepEvent(**{k: step[k] for k in StepEvent.__dataclass_fields__ if k in step})
                ev = StepEvent(**{**ev.__dict__, "token_ids": tuple(ev.token_ids)})
                ids.extend(ev.token_ids)
                drafted += ev.drafted
                accepted += ev.accepted
                draft_s += ev.draft_s
                verify_s += ev.verify_s
                texts.append(ev.text)
                index += 1
                last = now
                yield ev
                continue
            if not text and not ch.get("token_ids"):
                continue
            if not prefilled:
                prefilled = True
                yield PrefillEvent(prompt_tokens=0, seconds=now - t0)
                start = last = now
            n = 1
            got_ids = ch.get("token_ids")  # vLLM's return_token_ids
            u = obj.get("usage")
            if isinstance(got_ids, list) and got_ids:
                n = len(got_ids)
            elif u and u.get("completion_tokens") is not None:  # vLLM's continuous usage stats
                n = max(0, int(u["completion_tokens"]) - completion_seen)
                completion_seen = int(u["completion_tokens"])
            tok = tuple(got_ids) if isinstance(got_ids, list) and got_ids else (UNKNOWN_ID,) * n
            ids.extend(tok)
            texts.append(text)
            ev = StepEvent(index=index, token_ids=tok, drafted=0, accepted=0, k=0, draft_s=0.0,
                           verify_s=now - last, step_s=now - last, elapsed_s=now - start,
                           context_len=len(ids), drafted_text="", target_text=text)
            index += 1
            last = now
            yield ev
        end = time.perf_counter()
        cancelled = cancel is not None and cancel.is_set()
        text = "".join(texts)
        if ext_done is not None:  # a specdesk server: its own totals, exactly
            st = ext_done.get("stats") or {}
            stats = GenerationStats(**{k: st[k] for k in GenerationStats.__dataclass_fields__ if k in st})
            yield DoneEvent(token_ids=tuple(ids), text=text + tail, stats=stats,
                            stop_reason="cancelled" if cancelled else ext_done.get("stop_reason", "eos"),
                            seed=ext_done.get("seed"), tail=tail)
            return
        if spec:
            drafted = int(spec.get("num_draft_tokens") or 0)
            accepted = int(spec.get("num_accepted_draft_tokens") or 0)
        elif timings and timings.get("draft_n") is not None:
            drafted = int(timings.get("draft_n") or 0)
            accepted = int(timings.get("draft_n_accepted") or 0)
        new = int(usage_final["completion_tokens"]) if usage_final and usage_final.get("completion_tokens") \
            is not None else len(ids)
        stats = GenerationStats(prompt_tokens=int((usage_final or {}).get("prompt_tokens") or prompt_tokens or 0),
                                new_tokens=new, target_forwards=index, drafted=drafted, accepted=accepted,
                                prefill_seconds=(start - t0) if start else end - t0,
                                decode_seconds=(last - start) if (start and last and last > start) else 0.0,
                                draft_seconds=draft_s, verify_seconds=verify_s)
        reason = "cancelled" if cancelled else STOP_REASONS.get(finish or "stop", "eos")
        yield DoneEvent(token_ids=tuple(ids), text=text, stats=stats, stop_reason=reason, seed=gs.seed)
