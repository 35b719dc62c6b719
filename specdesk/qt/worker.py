"""The engine's own thread: loading and generation run here, never on the GUI thread.

The Engine object lives only in this thread. Requests come in as queued signals carrying frozen
dataclasses; events go out as signals carrying the engine's frozen events. Cancelling is a
``threading.Event`` the decode loop checks between steps (superqt's GeneratorWorker habit), so Stop
takes effect within one step. The session log is written here, line by line and flushed before the
event is forwarded, so killing the app loses no completed step.
"""

from __future__ import annotations

import datetime as _dt
import gc
import logging
import re
import threading
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal, Slot

from specdesk.core.errors import SpecdeskError
from specdesk.core.settings import GenerationSettings

log = logging.getLogger(__name__)


class LoadCancelled(Exception):
    pass


@dataclass(frozen=True)
class LoadRequest:
    target: str = "demo-target"
    draft: str | None = None
    drafter: str | None = None  # "model", "ngram", "none"; None: the engine's default for the pair
    target_quant: str = "none"
    draft_quant: str = "none"
    double_quant: bool = False  # 4-bit double quantization (bitsandbytes applies it to both models)
    device: str = "auto"

    def to_dict(self) -> dict:
        return {"target": self.target, "draft": self.draft, "drafter": self.drafter,
                "target_quant": self.target_quant, "draft_quant": self.draft_quant,
                "double_quant": self.double_quant, "device": self.device}


@dataclass(frozen=True)
class EngineInfo:
    """What the GUI may know about the loaded engine: plain values only."""

    request: LoadRequest
    target: str
    draft: str | None
    drafter: str
    drafters: tuple[str, ...]
    device: str
    chat_template: bool
    max_context: int
    description: dict = field(default_factory=dict)

    @property
    def pair_label(self) -> str:
        t = self.description.get("target") or {}
        d = self.description.get("draft") or {}
        tq = f" ({t.get('quant')})" if t.get("quant") not in (None, "none") else ""
        if self.draft:
            dq = f" ({d.get('quant')})" if d.get("quant") not in (None, "none") else ""
            return f"{self.target}{tq} + {self.draft}{dq}"
        return f"{self.target}{tq} + {'n-gram' if self.drafter == 'ngram' else 'no draft'}"


@dataclass(frozen=True)
class GenerateRequest:
    tag: int
    purpose: str  # "reply" or "compare"
    settings: GenerationSettings
    drafter: str
    prompt: str = ""  # completion mode: the whole document so far
    messages: tuple[tuple[str, str], ...] = ()  # chat mode: (role, content) pairs


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text.rsplit("/", 1)[-1])[:60]


class EngineWorker(QObject):
    progress = Signal(str)
    loaded = Signal(object)  # EngineInfo
    load_failed = Signal(str)
    load_cancelled = Signal()
    started = Signal(int, int)  # tag, prompt tokens
    event = Signal(int, object)  # tag, PrefillEvent | StepEvent | DoneEvent
    failed = Signal(int, str)  # tag, one-line message
    log_opened = Signal(str)
    log_warning = Signal(str)

    def __init__(self, logs_dir=None) -> None:
        super().__init__()
        self._engine = None
        self._writer = None
        self._logs_dir = logs_dir
        self._log_broken = False

    # ---------------------------------------------------------------- loading

    @Slot(object, object)
    def load(self, req: LoadRequest, cancel: threading.Event) -> None:
        self._drop_engine()

        def say(msg: str) -> None:
            if cancel.is_set():
                raise LoadCancelled
            self.progress.emit(msg)

        try:
            say(f"Loading {req.target}…")
            import specdesk
            from specdesk.qt.tasks import warm_imports

            warm_imports()
            engine = specdesk.load(req.target, req.draft, drafter=req.drafter, target_quant=req.target_quant,
                                   draft_quant=req.draft_quant, double_quant=req.double_quant,
                                   device=req.device,
                                   progress=lambda m: say(m[:1].upper() + m[1:] + "…"))
            if cancel.is_set():
                raise LoadCancelled
        except LoadCancelled:
            self._drop_engine()
            self.load_cancelled.emit()
            return
        except SpecdeskError as e:
            self.load_failed.emit(str(e))
            return
        except Exception as e:  # a library bug or an odd checkpoint must not take the app down
            log.exception("loading failed")
            self.load_failed.emit(f"could not load {req.target}: {type(e).__name__}: {e}")
            return
        self._engine = engine
        self._log_broken = False
        desc = engine.describe()
        self.loaded.emit(EngineInfo(request=req, target=engine.target.name,
                                    draft=engine.draft.name if engine.draft else None, drafter=engine.drafter,
                                    drafters=tuple(engine.available_drafters()), device=str(engine.device),
                                    chat_template=engine.has_chat_template, max_context=engine.max_context,
                                    description=desc))

    def _drop_engine(self) -> None:
        self.close_log()
        if self._engine is not None:
            self._engine = None
            gc.collect()
            try:
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            except Exception:
                pass

    # ---------------------------------------------------------------- generation

    @Slot(object, object)
    def generate(self, req: GenerateRequest, cancel: threading.Event) -> None:
        eng = self._engine
        if eng is None:
            self.failed.emit(req.tag, "no model is loaded: choose models first (Models → Choose models…)")
            return
        try:
            if req.messages:
                ids = eng.chat_ids([{"role": r, "content": c} for r, c in req.messages])
                logged_prompt = ids
            else:
                ids = eng.encode(req.prompt)
                logged_prompt = req.prompt
            events = eng.stream(ids, cancel=cancel, drafter=req.drafter, settings=req.settings)
        except SpecdeskError as e:
            self.failed.emit(req.tag, str(e))
            return
        except Exception as e:
            log.exception("could not start generation")
            self.failed.emit(req.tag, f"could not start: {type(e).__name__}: {e}")
            return
        self.started.emit(req.tag, len(ids))
        writer = self._log_writer(req.settings)
        if writer is not None:
            self._log(lambda: writer.begin(logged_prompt, req.settings.to_dict(), req.drafter, len(ids),
                                           chat_template=bool(req.messages)))
        try:
            for ev in events:
                if writer is not None:
                    self._log(lambda: writer.event(ev))
                self.event.emit(req.tag, ev)
        except SpecdeskError as e:
            self.failed.emit(req.tag, str(e))
        except Exception as e:
            self.failed.emit(req.tag, _generation_error(e))

    # ---------------------------------------------------------------- session log

    def _log_writer(self, settings: GenerationSettings):
        if self._writer is not None or self._log_broken or self._engine is None:
            return self._writer
        from specdesk.core import userdirs
        from specdesk.core.sessionlog import SessionLogWriter
        from specdesk.hw.memory import memory_snapshot

        eng = self._engine
        folder = self._logs_dir or userdirs.logs_dir()
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        pair = _safe_name(eng.target.name) + "+" + (_safe_name(eng.draft.name) if eng.draft else eng.drafter)
        path = folder / f"{stamp}_{pair}.jsonl"
        n = 1
        while path.exists():
            n += 1
            path = folder / f"{stamp}_{pair}-{n}.jsonl"
        device = eng.device
        try:
            self._writer = SessionLogWriter(path, eng.describe(), settings.to_dict(),
                                            memory=lambda: memory_snapshot(device))
        except OSError as e:
            self._log_broken = True
            self.log_warning.emit(f"the session log cannot be written ({e.strerror or e}); generation goes on "
                                  f"without it")
            return None
        self.log_opened.emit(str(path))
        return self._writer

    def _log(self, write) -> None:
        """Write one log line; a full disk stops logging with one warning, never the generation."""
        if self._log_broken:
            return
        try:
            write()
        except OSError as e:
            self._log_broken = True
            self.log_warning.emit(f"the session log stopped: {e.strerror or e} (free some disk space; "
                                  f"this session's log is incomplete)")

    @Slot()
    def close_log(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError:
                pass
            self._writer = None

    @Slot()
    def shutdown(self) -> None:
        self._drop_engine()


def _generation_error(e: Exception) -> str:
    name = type(e).__name__
    if name == "OutOfMemoryError" or isinstance(e, MemoryError):
        return ("out of memory while generating: lower max new tokens or k, start a new chat (a shorter "
                "context), or load a smaller or quantized model")
    log.error("generation failed", exc_info=e)
    return f"generation failed: {name}: {e}"
