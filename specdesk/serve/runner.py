"""One engine thread behind a request queue.

HTTP handler threads turn requests into ``Job``s and put them on the queue; the engine thread runs them
one at a time, in arrival order, and sends each job's events back on the job's own queue. Only plain
values cross threads (the engine's frozen events, strings, ints). A job whose client went away is
cancelled through its ``threading.Event``: the decode loop stops at the next step, and a job still
waiting is dropped when its turn comes.

The engine comes from an ``EngineHost``: the one engine `specdesk serve` loaded, or the desktop app's,
shared with its chat under one lock (whoever holds the lock generates; the other waits).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from specdesk.core.errors import SpecdeskError
from specdesk.core.events import DoneEvent, PrefillEvent, StepEvent
from specdesk.serve.metrics import ServerMetrics
from specdesk.serve.protocol import ApiError, ParsedRequest, Timing

log = logging.getLogger(__name__)


class EngineHost:
    """Lends the engine to the server thread: ``with host.use() as engine`` (None while nothing is loaded)."""

    def __init__(self, engine=None, *, lock: threading.Lock | None = None, getter: Callable[[], object] | None = None):
        self._engine = engine
        self._getter = getter
        self.lock = lock or threading.Lock()

    def current(self):
        return self._getter() if self._getter is not None else self._engine

    @contextlib.contextmanager
    def use(self) -> Iterator[object]:
        with self.lock:
            yield self.current()


@dataclass
class Job:
    id: str
    request: ParsedRequest
    client: str
    timing: Timing
    cancel: threading.Event = field(default_factory=threading.Event)
    out: queue.Queue = field(default_factory=queue.Queue)
    # out carries ("error", ApiError) | ("start", prompt_tokens) | ("event", Event) | ("end", None)


class EngineLoop:
    def __init__(self, host: EngineHost, metrics: ServerMetrics, logs_dir: Path | None = None,
                 log_file: Path | None = None) -> None:
        self.host = host
        self.metrics = metrics
        self.logs_dir = logs_dir
        self.log_file = log_file
        self._q: queue.Queue = queue.Queue()
        self._writer = None
        self._writer_engine = None
        self._log_broken = False
        self.log_path: Path | None = None
        self.current: Job | None = None
        self._thread = threading.Thread(target=self._run, name="specdesk-serve-engine", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- queue

    def submit(self, job: Job) -> None:
        self._q.put(job)
        self.metrics.set_waiting(self.waiting())

    def waiting(self) -> int:
        return self._q.qsize()

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel the running job and every waiting one, then end the thread and close the log."""
        pending = []
        while True:
            try:
                pending.append(self._q.get_nowait())
            except queue.Empty:
                break
        for job in pending:
            if job is not None:
                job.cancel.set()
                job.out.put(("error", ApiError(503, "the server is shutting down", type="server_error",
                                               code="server_shutdown")))
        if self.current is not None:
            self.current.cancel.set()
        self._q.put(None)
        self._thread.join(timeout)
        self._close_log()

    def _run(self) -> None:
        while True:
            job = self._q.get()
            self.metrics.set_waiting(self.waiting())
            if job is None:
                return
            if job.cancel.is_set():
                job.out.put(("error", ApiError(499, "the client went away before its turn", code="cancelled")))
                continue
            self.current = job
            try:
                self._serve(job)
            except Exception as e:  # a library bug must not end the engine thread
                log.exception("request %s failed", job.id)
                job.out.put(("error", ApiError(500, f"generation failed: {type(e).__name__}: {e}",
                                               type="server_error", code="internal_error")))
            finally:
                self.current = None

    # ---------------------------------------------------------------- one job

    def _prepare(self, engine, job: Job):
        r = job.request
        if engine is None:
            raise ApiError(503, "no model is loaded (the app is loading or has no model)", type="server_error",
                           code="model_not_loaded")
        if r.drafter is not None and r.drafter not in engine.available_drafters():
            raise ApiError(400, f"drafter {r.drafter!r} is not available on this server "
                                f"({', '.join(engine.available_drafters())})", param="specdesk.drafter",
                           code="invalid_value")
        try:
            if r.kind == "chat":
                if not engine.has_chat_template:
                    raise ApiError(400, f"{engine.target.name} has no chat template: use /v1/completions",
                                   param="messages", code="no_chat_template")
                ids = engine.chat_ids([dict(m) for m in r.messages])
            else:
                ids = engine.encode(list(r.prompt) if isinstance(r.prompt, tuple) else r.prompt)
        except SpecdeskError as e:
            raise ApiError(400, str(e), param="messages" if r.kind == "chat" else "prompt") from None
        settings = r.settings
        ctx = engine.max_context
        if not r.max_tokens_given:  # the default never asks for more than the context holds
            settings = replace(settings, max_new_tokens=max(1, min(settings.max_new_tokens, ctx - len(ids))))
        if len(ids) + settings.max_new_tokens > ctx:
            raise ApiError(400, f"This model's maximum context length is {ctx} tokens. However, you requested "
                                f"{len(ids) + settings.max_new_tokens} tokens ({len(ids)} in the "
                                f"{'messages' if r.kind == 'chat' else 'prompt'}, {settings.max_new_tokens} in the "
                                f"completion). Please reduce the length of the "
                                f"{'messages' if r.kind == 'chat' else 'prompt'} or completion.",
                           param="messages" if r.kind == "chat" else "prompt", code="context_length_exceeded")
        try:
            events = engine.stream(ids, settings=settings, cancel=job.cancel, drafter=r.drafter)
        except SpecdeskError as e:
            raise ApiError(400, str(e)) from None
        return ids, settings, events

    def _serve(self, job: Job) -> None:
        with self.host.use() as engine:
            try:
                ids, settings, events = self._prepare(engine, job)
            except ApiError as e:
                job.out.put(("error", e))
                return
            job.timing.started = time.monotonic()
            self.metrics.started(len(ids))
            job.out.put(("start", len(ids)))
            writer = self._log_writer(engine, settings)
            r = job.request
            logged_prompt = list(ids) if r.kind == "chat" or isinstance(r.prompt, tuple) else r.prompt
            self._log(lambda: writer.begin(logged_prompt, settings.to_dict(), r.drafter or engine.drafter, len(ids),
                                           request={"id": job.id, "endpoint": r.kind, "client": job.client,
                                                    "model": r.model, "stream": r.stream}))
            ctx = engine.max_context
            reason = "abort"
            try:
                for ev in events:
                    self._log(lambda: writer.event(ev))
                    if isinstance(ev, StepEvent):
                        if job.timing.first_token is None:
                            job.timing.first_token = time.monotonic()
                        self.metrics.step(ev, ctx)
                    elif isinstance(ev, DoneEvent):
                        job.timing.finished = time.monotonic()
                        from specdesk.serve.protocol import FINISH

                        reason = FINISH.get(ev.stop_reason, "stop")
                    elif isinstance(ev, PrefillEvent):
                        pass
                    job.out.put(("event", ev))
            except SpecdeskError as e:
                job.out.put(("error", ApiError(400, str(e))))
            finally:
                self.metrics.finished(reason)
                job.out.put(("end", None))

    # ---------------------------------------------------------------- session log

    def _log_writer(self, engine, settings):
        if self._log_broken:
            return None
        if self._writer is not None and self._writer_engine is engine:
            return self._writer
        self._close_log()
        from specdesk.core import userdirs
        from specdesk.core.sessionlog import SessionLogWriter, new_log_path
        from specdesk.hw.memory import memory_snapshot

        path = self.log_file or new_log_path(self.logs_dir or userdirs.logs_dir(), engine, "_serve")
        device = engine.device
        try:
            self._writer = SessionLogWriter(path, {**engine.describe(), "server": True}, settings.to_dict(),
                                            memory=lambda: memory_snapshot(device))
        except OSError as e:
            log.warning("the session log cannot be written (%s); serving goes on without it", e.strerror or e)
            self._log_broken = True
            return None
        self._writer_engine = engine
        self.log_path = path
        return self._writer

    def _log(self, write) -> None:
        if self._log_broken or self._writer is None:
            return
        try:
            write()
        except OSError as e:
            log.warning("the session log stopped: %s", e.strerror or e)
            self._log_broken = True

    def _close_log(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._writer_engine = None
