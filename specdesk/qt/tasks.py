"""Run a short plain-Python function off the GUI thread and get its result back as a signal.

For model discovery and draft compatibility checks (they read tokenizers from disk): the picker stays
responsive while a Hugging Face cache with many models is scanned.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

log = logging.getLogger(__name__)


_import_lock = threading.Lock()
_warm = False


def warm_imports() -> None:
    """Import transformers' lazily-resolved names once, under a lock.

    transformers resolves ``AutoConfig`` & co. on first attribute access, and two threads doing that
    at the same time can see "cannot import name"; the engine thread and these tasks both call this
    before touching transformers.
    """
    global _warm
    if _warm:
        return
    with _import_lock:
        if not _warm:
            from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: F401

            _warm = True


def _pool() -> QThreadPool:
    """One thread: tasks are short, and running them one at a time keeps library imports single-file."""
    global _serial
    if _serial is None:
        _serial = QThreadPool()
        _serial.setMaxThreadCount(1)
    return _serial


_serial: QThreadPool | None = None


class _Relay(QObject):
    """Lives in the GUI thread; its bound-method slots therefore run there (queued connections)."""

    result = Signal(object)
    error = Signal(str)

    def __init__(self, on_result, on_error, owner: QObject | None = None) -> None:
        super().__init__()
        self._on_result, self._on_error = on_result, on_error
        self._owner_gone = False
        if owner is not None:  # a dialog closed before its answer came: the answer has nowhere to go
            owner.destroyed.connect(self._forget_owner)
        self.result.connect(self._deliver)
        self.error.connect(self._fail)

    def _forget_owner(self) -> None:
        self._owner_gone = True

    def _deliver(self, value) -> None:
        _alive.discard(self)
        if not self._owner_gone:
            self._on_result(value)

    def _fail(self, msg: str) -> None:
        _alive.discard(self)
        if self._on_error is not None and not self._owner_gone:
            self._on_error(msg)


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], object], relay: _Relay) -> None:
        super().__init__()
        self.fn = fn
        self.relay = relay

    def run(self) -> None:
        try:
            warm_imports()
            value = self.fn()
        except Exception as e:  # shown to the user as one line
            log.debug("background task failed", exc_info=True)
            self.relay.error.emit(str(e) or type(e).__name__)
            return
        self.relay.result.emit(value)


_alive: set[_Relay] = set()  # relays must outlive their job; dropped once it reported


def run_task(fn: Callable[[], object], on_result: Callable[[object], None],
             on_error: Callable[[str], None] | None = None, owner: QObject | None = None) -> None:
    """Run ``fn`` on the task thread; its result or error comes back on the GUI thread, unless ``owner`` (the
    widget the callbacks draw into) was destroyed meanwhile."""
    relay = _Relay(on_result, on_error, owner)
    _alive.add(relay)
    _pool().start(_Job(fn, relay))
