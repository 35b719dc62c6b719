"""The engine's own thread: loading and generation run here, never on the GUI thread.

The Engine object lives only in this thread. Requests come in as queued signals carrying frozen
dataclasses; events go out as signals carrying the engine's frozen events. Cancelling is a
``threading.Event`` the decode loop checks between steps (superqt's GeneratorWorker habit), so Stop
takes effect within one step. The session log is written here, line by line and flushed before the
event is forwarded, so killing the app loses no completed step.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal, Slot

from specdesk.core.errors import OutOfMemory, SpecdeskError
from specdesk.core.events import StepEvent
from specdesk.core.settings import GenerationSettings

log = logging.getLogger(__name__)

# Decoding steps reach the window in batches at most this often: each queued signal woke the window's thread, and on
# a 2-core CPU each wake-up took a core from the two decoding threads in the middle of a pass (SmolLM2 q4 decoded at
# ~150 tokens/s in the window against ~245 on the command line; the window's thread mostly switching in and out).
# The events are the same, in order, one signal each: Qt delivers a batch in one wake-up.
STEP_BATCH_S = 0.05


class LoadCancelled(Exception):
    pass


@dataclass(frozen=True)
class LoadRequest:
    target: str = "demo-target"
    draft: str | None = None
    drafter: str | None = None  # "model", "ngram", "none"; None: the engine's default for the pair
    # loading.auto_quant: on a CPU q4 for a 4-bit GGUF file, q8 for a 5-8-bit one or a float model of 100 MB and more
    # that the lean decoder runs, else as stored
    target_quant: str = "auto"
    draft_quant: str = "auto"
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
    check_memory: bool = False  # plan this prompt + reply against the memory left before starting
    memory_budget: int | None = None  # bytes for that check; None: the device's (hw.memory.memory_budget)
    memory_limit: int | None = None  # the most this process may hold while generating; None: what was
    # available when the reply started (plus what it already held)


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
    memory_warning = Signal(int, object)  # tag, core.plan.check.GenerationFit: the reply was not started
    out_of_memory = Signal(int, str)  # tag, one-line message: the reply ended and its memory was freed

    def __init__(self, logs_dir=None) -> None:
        super().__init__()
        self._engine = None
        self._writer = None
        self._logs_dir = logs_dir
        self._log_broken = False
        # whoever generates holds it: this thread for the chat, or the app's HTTP server (Tools → Start server…)
        self.engine_lock = threading.Lock()

    def local_engine(self):
        """The loaded local engine, for the app's server (None while loading, or when connected to a server)."""
        eng = self._engine
        return None if getattr(eng, "is_remote", False) else eng

    # ---------------------------------------------------------------- loading

    @Slot(object, object)
    def load(self, req: LoadRequest, cancel: threading.Event) -> None:
        with self.engine_lock:
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
            if hasattr(req, "connect"):  # a remote server (qt/server_tools.RemoteRequest)
                engine = req.connect(lambda m: say(m))
            else:
                engine = specdesk.load(req.target, req.draft, drafter=req.drafter, target_quant=req.target_quant,
                                       draft_quant=req.draft_quant, double_quant=req.double_quant,
                                       device=req.device,
                                       progress=lambda m: say(m[:1].upper() + m[1:] + "…"))
                say("Warming up…")
                engine.warm_up()  # a fraction of a second: the first reply is then timed as the ones after it
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
        with self.engine_lock:
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
            _return_memory()

    # ---------------------------------------------------------------- generation

    @Slot(object, object)
    def generate(self, req: GenerateRequest, cancel: threading.Event) -> None:
        eng = self._engine
        if eng is None:
            self.failed.emit(req.tag, "no model is loaded: choose models first (Models → Choose models…)")
            return
        remote = getattr(eng, "is_remote", False)  # a server: its memory and its prompt tokens are its own
        try:
            if req.messages:
                ids = eng.chat_ids([{"role": r, "content": c} for r, c in req.messages])
                logged_prompt = ids
            else:
                ids = eng.encode(req.prompt)
                logged_prompt = req.prompt
            if req.check_memory and not remote:
                fit = self._fit(req, len(ids))
                if fit is not None and not fit.fits:
                    self.memory_warning.emit(req.tag, fit)
                    return
            extra = {} if remote else {"memory_budget": self._memory_budget(req)}
            events = eng.stream(ids, cancel=cancel, drafter=req.drafter, settings=req.settings, **extra)
        except SpecdeskError as e:
            self.failed.emit(req.tag, str(e))
            return
        except Exception as e:
            log.exception("could not start generation")
            self.failed.emit(req.tag, f"could not start: {type(e).__name__}: {e}")
            return
        n_prompt = None if remote else len(ids)
        while not self.engine_lock.acquire(timeout=0.1):  # the app's server is answering a request
            if cancel.is_set():
                self.failed.emit(req.tag, "stopped while the app's server was answering a request")
                return
        oom = None
        try:
            self.started.emit(req.tag, n_prompt or 0)
            writer = self._log_writer(req.settings)
            if writer is not None:
                self._log(lambda: writer.begin(logged_prompt, req.settings.to_dict(), req.drafter, n_prompt,
                                               chat_template=bool(req.messages)))
            held: list = []  # steps not sent yet (STEP_BATCH_S)

            def send_held() -> None:
                for h in held:
                    self.event.emit(req.tag, h)
                held.clear()
            sent = time.monotonic()
            try:
                try:
                    for ev in events:
                        if writer is not None:
                            self._log(lambda: writer.event(ev))
                        held.append(ev)
                        now = time.monotonic()
                        if isinstance(ev, StepEvent) and now - sent < STEP_BATCH_S:
                            continue
                        sent = now
                        send_held()
                finally:  # a failure's message comes after the steps that were made
                    send_held()
            except OutOfMemory as e:
                oom = str(e)
            except SpecdeskError as e:
                self.failed.emit(req.tag, str(e))
            except Exception as e:
                if _is_out_of_memory(e):
                    oom = f"out of memory while generating ({type(e).__name__})"
                else:
                    msg = _generation_error(e)
                    if writer is not None:
                        self._log(lambda: writer.error(msg))
                    self.failed.emit(req.tag, msg)
            if oom is not None:  # out of the except block: the exception's frames no longer hold the tensors
                events.close()
                del events
                self._free_generation()
                if writer is not None:
                    self._log(lambda: writer.error(oom))
                self.out_of_memory.emit(req.tag, oom)
        finally:
            self.engine_lock.release()

    # ---------------------------------------------------------------- memory

    def _fit(self, req: GenerateRequest, prompt_tokens: int):
        """The planner's verdict on this prompt + reply (None when it cannot be made: never blocks a reply)."""
        from specdesk.core.plan.check import check_generation
        from specdesk.hw.memory import memory_budget

        eng = self._engine
        device = str(eng.device)
        try:
            if req.memory_budget is not None:
                budget, source = req.memory_budget, "the app's memory budget"
            else:
                b = memory_budget(device)
                if b.bytes is None:
                    return None
                budget, source = b.bytes, b.source
            return check_generation(str(eng.target.path), str(eng.draft.path) if eng.draft else None,
                                    drafter=req.drafter, target_quant=eng.target.quant,
                                    draft_quant=eng.draft.quant if eng.draft else "none",
                                    double_quant=eng.target.double_quant, dtype=eng.target.dtype, device=device,
                                    prompt_tokens=prompt_tokens, max_new_tokens=req.settings.max_new_tokens,
                                    k=req.settings.k, tree=req.settings.tree, budget_bytes=budget,
                                    budget_source=source)
        except Exception as e:  # a model the planner cannot describe: generate without the check
            log.info("memory check skipped: %s", e)
            return None

    def _memory_budget(self, req: GenerateRequest):
        from specdesk.core.membudget import MemoryBudget
        from specdesk.hw.memory import memory_budget, process_reader

        device = str(self._engine.device)
        limit = req.memory_limit
        if limit is None:
            b = memory_budget(device)
            if b.bytes is None:
                return None
            limit = b.bytes
        return MemoryBudget(limit, process_reader(device), "GPU memory" if device.startswith("cuda") else "RAM")

    def _free_generation(self) -> None:
        """After an out-of-memory: drop the generation's KV caches and return the memory."""
        release = getattr(self._engine, "release_buffers", None)  # a remote engine holds no local buffers
        if release is not None:
            release()
        _return_memory()

    # ---------------------------------------------------------------- session log

    def _log_writer(self, settings: GenerationSettings):
        if self._writer is not None or self._log_broken or self._engine is None:
            return self._writer
        from specdesk.core import userdirs
        from specdesk.core.sessionlog import SessionLogWriter, new_log_path
        from specdesk.hw.memory import memory_snapshot

        eng = self._engine
        path = new_log_path(self._logs_dir or userdirs.logs_dir(), eng)
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
            self._writer.close()
            self._writer = None

    @Slot()
    def shutdown(self) -> None:
        self._drop_engine()


def _return_memory() -> None:
    """Collect what was dropped, and hand torch's cached GPU blocks back to the driver."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def _is_out_of_memory(e: Exception) -> bool:
    """torch's CUDA out-of-memory, Python's MemoryError, or the CPU allocator failing."""
    return (type(e).__name__ == "OutOfMemoryError" or isinstance(e, MemoryError)
            or (isinstance(e, RuntimeError) and "can't allocate memory" in str(e)))


def _generation_error(e: Exception) -> str:
    name = type(e).__name__
    log.error("generation failed", exc_info=e)
    return f"generation failed: {name}: {e}"
