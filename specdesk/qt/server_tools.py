"""The app as the front end of a server: Tools → Start server… / Stop server, Connect to a server….

- Start server… serves the loaded pair over HTTP (specdesk.serve), in this process and on this engine:
  the chat and the server take turns on the engine's lock, so nothing is loaded twice. The status bar
  shows the URL; the server panel plots what the server's /metrics says.
- Connect to a server… loads a ``RemoteRequest`` instead of a local pair: the worker builds core's
  ``RemoteEngine``, whose events are the local engine's, so the chat, the plots and the session log work
  unchanged; the server panel plots the remote /metrics (vLLM, llama.cpp or specdesk names).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit,
                               QSpinBox, QVBoxLayout)

from specdesk.core.errors import SpecdeskError

log = logging.getLogger(__name__)

DEFAULT_PORT = 8000
DEFAULT_URL = "http://127.0.0.1:8000/v1"


@dataclass(frozen=True)
class RemoteRequest:
    """What the worker loads to chat with a server (see EngineWorker.load)."""

    url: str
    api_key: str | None = None
    model: str | None = None
    mode: str = "auto"  # auto, chat, completion

    @property
    def target(self) -> str:
        return self.model or self.url

    drafter = None

    def connect(self, say):
        from specdesk.core.remote.engine import RemoteEngine

        say(f"Connecting to {self.url}…")
        return RemoteEngine.connect(self.url, self.api_key, self.model, self.mode)

    def to_dict(self) -> dict:
        return {"remote": self.url, "model": self.model, "mode": self.mode}


def _lay_out(dialog: QDialog, note_text: str, form: QFormLayout, ok_text: str) -> None:
    """A note, the form, and OK (named ``ok_text``) / Cancel: the two server dialogs' shape."""
    note = QLabel(note_text)
    note.setWordWrap(True)
    note.setObjectName("muted")
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
    buttons.button(QDialogButtonBox.StandardButton.Ok).setText(ok_text)
    buttons.accepted.connect(dialog.accept)
    buttons.rejected.connect(dialog.reject)
    lay = QVBoxLayout(dialog)
    lay.addWidget(note)
    lay.addLayout(form)
    lay.addWidget(buttons)


class StartServerDialog(QDialog):
    def __init__(self, parent=None, port: int = DEFAULT_PORT) -> None:
        super().__init__(parent)
        self.setWindowTitle("Start server")
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setValue(port)
        self.port.setSpecialValueText("any free port")
        self.everywhere = QCheckBox("Listen on every network interface (needs an API key)")
        self.key = QLineEdit()
        self.key.setPlaceholderText("optional on this machine; required on the network")
        form = QFormLayout()
        form.addRow("Port", self.port)
        form.addRow("", self.everywhere)
        form.addRow("API key", self.key)
        _lay_out(self, "Serves the loaded pair at an OpenAI-compatible URL (chat and completions, streaming), with "
                       "Prometheus metrics. The chat and the server take turns on the engine.", form, "Start")

    def values(self) -> tuple[str, int, str | None]:
        return ("0.0.0.0" if self.everywhere.isChecked() else "127.0.0.1", self.port.value(),
                self.key.text().strip() or None)


class ConnectDialog(QDialog):
    def __init__(self, parent=None, url: str = DEFAULT_URL) -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect to a server")
        self.url = QLineEdit(url)
        self.key = QLineEdit()
        self.key.setPlaceholderText("if the server needs one")
        self.model = QLineEdit()
        self.model.setPlaceholderText("the first the server lists")
        self.mode = QComboBox()
        for label, key in (("chat if the server says so (auto)", "auto"), ("chat", "chat"),
                           ("completion", "completion")):
            self.mode.addItem(label, key)
        form = QFormLayout()
        form.addRow("URL", self.url)
        form.addRow("API key", self.key)
        form.addRow("Model", self.model)
        form.addRow("Mode", self.mode)
        _lay_out(self, "Any OpenAI-compatible endpoint: specdesk serve, vLLM, llama.cpp's llama-server, LM Studio. "
                       "Its /metrics (vllm:, llamacpp: or specdesk: names) is plotted live.", form, "Connect")

    def request(self) -> RemoteRequest:
        return RemoteRequest(self.url.text().strip(), self.key.text().strip() or None,
                             self.model.text().strip() or None, self.mode.currentData())


class ServerTools(QObject):
    """Owns the app's server and the server panel; added to the main window's Tools menu."""

    def __init__(self, win, menu) -> None:
        super().__init__(win)
        from specdesk.qt.server_plots import ServerPanel

        self.win = win
        self.server = None
        menu.addSeparator()
        self.start_action = self._add(menu, "Start server…", self.open_start_dialog)
        self.stop_action = self._add(menu, "Stop server", self.stop_server)
        self.connect_action = self._add(menu, "Connect to a server…", self.open_connect_dialog)
        self.local_action = self._add(menu, "Back to local models", self.back_to_local)
        self.status = QLabel("")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status.setMinimumWidth(40)  # a long URL clips rather than widening the window
        win.statusBar().addPermanentWidget(self.status)
        self.panel = ServerPanel()
        self.panel.hide()
        win.plots.parentWidget().layout().addWidget(self.panel)
        win.engine_ready.connect(self._on_engine)
        self._sync()

    def _add(self, menu, text, slot) -> QAction:
        act = QAction(text, self.win)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    @property
    def remote(self) -> bool:
        return self.win.info is not None and self.win.info.request.__class__ is RemoteRequest

    def _sync(self) -> None:
        running = self.server is not None
        self.start_action.setEnabled(not running and not self.remote)
        self.stop_action.setEnabled(running)
        self.local_action.setEnabled(self.remote)
        if running:
            self.status.setText(f"serving at {self.server.url}")
        elif self.remote:
            self.status.setText(f"connected to {self.win.info.device}")
        else:
            self.status.setText("")

    def _on_engine(self, info) -> None:
        if self.remote:
            self.stop_server()
            self.panel.watch(info.device, info.request.api_key)
        elif self.server is None:
            self.panel.stop()
        self._sync()

    # ---------------------------------------------------------------- serving the loaded pair

    def open_start_dialog(self):
        dlg = StartServerDialog(self.win)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.accepted.connect(lambda: self.start_server(*dlg.values()))
        dlg.open()
        return dlg

    def start_server(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, api_key: str | None = None) -> bool:
        from specdesk.serve import EngineHost, SpecdeskServer

        if self.win.info is None or self.remote:
            self.win._error("No local model", "Load a local pair first (Models → Choose models…).")
            return False
        if self.server is not None:
            return True
        worker = self.win.worker
        try:
            self.server = SpecdeskServer(EngineHost(lock=worker.engine_lock, getter=worker.local_engine),
                                         address=host, port=port, api_key=api_key,
                                         logs_dir=getattr(worker, "_logs_dir", None)).start()
        except SpecdeskError as e:
            self.win._error("Could not start the server", str(e))
            return False
        self.panel.watch(self.server.url, api_key)
        self.win.chat.add_notice(f"Serving {self.win.info.pair_label} at {self.server.url} "
                                 f"(OpenAI-compatible; metrics at {self.server.url[:-3]}/metrics).")
        self._sync()
        return True

    def stop_server(self) -> None:
        if self.server is None:
            return
        server, self.server = self.server, None
        server.stop()
        self.panel.stop()
        self.win.chat.add_notice("Server stopped.")
        self._sync()

    # ---------------------------------------------------------------- chatting with a server

    def open_connect_dialog(self):
        dlg = ConnectDialog(self.win, url=self.server.url if self.server else DEFAULT_URL)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.accepted.connect(lambda: self.connect_to(dlg.request()))
        dlg.open()
        return dlg

    def connect_to(self, req: RemoteRequest) -> None:
        self.stop_server()
        self.win.load_pair(req)

    def back_to_local(self) -> None:
        from specdesk.qt.main_window import DEMO_PAIR

        self.panel.stop()
        self.win.load_pair((self.win.saved_pair() if self.win.persist else None) or DEMO_PAIR)

    def shutdown(self) -> None:
        self.panel.stop()
        if self.server is not None:
            self.server.stop()
            self.server = None


def install(win, menu) -> ServerTools:
    return ServerTools(win, menu)
