"""The main window: chat on the left, live figures and plots on the right, the engine on its own thread.

The window owns no model. It sends frozen requests to the worker (worker.py) and draws the frozen
events that come back: the chat appends whole words, the plots append to ring buffers, the status bar
says what the engine is doing. Every user-caused problem ends as a message, never as a crash.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QThread, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QFrame, QHBoxLayout, QLabel, QMainWindow, QMessageBox,
                               QPlainTextEdit, QProgressDialog, QPushButton, QSplitter, QVBoxLayout)

from specdesk.core import userdirs
from specdesk.core.errors import SpecdeskError
from specdesk.core.events import DoneEvent, PrefillEvent, StepEvent
from specdesk.core.kernels import OWN as OWN_KERNELS
from specdesk.core.pairing import MODEL_DRAFTERS, default_drafter
from specdesk.core.speedpool import SpeedPool
from specdesk.qt import theme
from specdesk.qt.cards import FitLabel, MetricCards
from specdesk.qt.chat import ChatView, Footer, Span, WordBuffer
from specdesk.qt.controls import AUTO_K, ControlsPanel
from specdesk.qt.health import HealthBanners
from specdesk.qt.meminfo import read_memory
from specdesk.qt.plots import BUSY_REFRESH_MS, PlotsPanel
from specdesk.qt.series import StepSeries
from specdesk.qt.worker import EngineInfo, EngineWorker, GenerateRequest, LoadRequest

log = logging.getLogger(__name__)

CHAT_REFRESH_S = 0.1  # the reply streams into the chat at 10 Hz: one text insert per decoding step cost speed
MEMORY_MS = 500
DEMO_PAIR = LoadRequest("demo-target", "demo-draft", "model")


def _legend_chip(colour: str, bg: str, text: str) -> QLabel:
    lab = QLabel(f"<span style='color:{colour}; background:{bg}'>&nbsp;{text}&nbsp;</span>")
    return lab


class MainWindow(QMainWindow):
    # requests to the worker thread (queued connections)
    _load = Signal(object, object)
    _generate = Signal(object, object)

    # for tests and the screenshot command
    engine_ready = Signal(object)  # EngineInfo
    load_error = Signal(str)
    reply_done = Signal(object)  # DoneEvent
    compare_done = Signal(object)  # DoneEvent of the plain run
    generation_failed = Signal(str)
    busy_changed = Signal(bool)

    def __init__(self, logs_dir: Path | None = None, persist: bool = True) -> None:
        """logs_dir: where session logs go (default: the user data dir); persist: read and write the
        settings file (off for the screenshot command, which must neither use nor change the user's)."""
        super().__init__()
        self.persist = persist
        self.setWindowTitle("specdesk")
        self.resize(1440, 900)
        self.info: EngineInfo | None = None
        self.state = "no model"
        self.log_path: str | None = None
        self.last_error: str | None = None
        self.request: LoadRequest = DEMO_PAIR
        self._startup_request: LoadRequest | None = None
        self._startup_asked = False
        self._fallback_notice: str | None = None  # why the demo pair loaded instead of the asked pair
        self._cards_due = False  # the cards' redraw is queued behind the steps that arrived with it
        self._cancel = threading.Event()
        self._load_cancel = threading.Event()
        self._tag = 0
        self._active: GenerateRequest | None = None
        self._buffer = WordBuffer()
        self._history: list[tuple[str, str]] = []  # chat mode: (role, content)
        self._document = ""  # completion mode: everything so far, prompt and replies
        self._last_reply: tuple[GenerateRequest, DoneEvent, int] | None = None  # request, done, chat turn index
        self._baseline: StepSeries | None = None
        self._pool: SpeedPool | None = None  # a comparison's runs so far
        self._same: bool | None = None  # every plain run of it gave the reply's tokens (greedy; None: sampled)
        self._plain_done: DoneEvent | None = None  # its last plain run
        self._progress: QProgressDialog | None = None
        self._t0 = time.monotonic()
        self._closing = False
        self.memory_budget: int | None = None  # bytes the pre-reply memory check plans against (None: the device's)
        self.memory_limit: int | None = None  # the most specdesk may hold while replying (None: what is available)
        self._skip_memory_check = False  # "Send anyway" after a memory warning
        self._sent_text = ""
        self._welcome = False  # first run: the welcome stays in the chat once the models are loaded

        self._build()
        self._start_worker(logs_dir)
        if persist:
            self._restore_settings()

        self._cards_shown = 0.0
        self._unshown: list[Span] = []  # whole words streamed since the chat was last updated
        self._chat_shown = 0.0
        self._mem_timer = QTimer(self)
        self._mem_timer.setInterval(MEMORY_MS)
        self._mem_timer.timeout.connect(self._sample_memory)
        self._mem_timer.start()
        self._sample_memory()
        self._set_state("no model")

    # ================================================================= layout

    def _build(self) -> None:
        self.chat = ChatView()
        self.highlight_box = QCheckBox("Colour accepted draft tokens")
        self.highlight_box.setChecked(True)
        self.highlight_box.toggled.connect(self._toggle_highlight)
        self.mode_label = FitLabel("")
        self.mode_label.setObjectName("muted")
        legend = QHBoxLayout()
        legend.setSpacing(10)
        legend.addWidget(self.highlight_box)
        legend.addWidget(_legend_chip(theme.DRAFT, theme.DRAFT_BG, "draft guessed, target accepted"))
        legend.addWidget(_legend_chip(theme.TEXT, theme.PANEL_2, "target's own token"))
        legend.addStretch(1)

        self.input = QPlainTextEdit()
        self.input.setFont(theme.mono_font(10))
        self.input.setPlaceholderText("Load a model to start (Models → Choose models…)")
        self.input.setFixedHeight(92)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("primary")
        self.send_button.setShortcut(QKeySequence("Ctrl+Return"))
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("danger")
        self.stop_button.setShortcut(QKeySequence("Escape"))
        self.stop_button.clicked.connect(self.stop)
        self.new_button = QPushButton("New chat")
        self.new_button.clicked.connect(self.new_chat)
        self.compare_button = QPushButton("Compare with plain decoding")
        self.compare_button.setToolTip("Run the last prompt again with no drafter and show both speeds")
        self.compare_button.clicked.connect(self.compare)
        buttons = QHBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.new_button)
        buttons.addStretch(1)
        buttons.addWidget(self.compare_button)
        self.controls = ControlsPanel()

        left = QFrame()
        left.setObjectName("pane")
        lv = QVBoxLayout(left)
        lv.setContentsMargins(14, 12, 8, 12)
        lv.setSpacing(8)
        lv.addLayout(legend)
        self.health = HealthBanners()
        lv.addWidget(self.health)
        lv.addWidget(self.chat, 1)
        lv.addWidget(self.input)
        lv.addLayout(buttons)
        lv.addWidget(self.controls)

        self.pair_label = FitLabel("No model loaded")  # a long pair's name ends in … (tooltip: the whole name)
        self.pair_label.setObjectName("pair")
        change = QPushButton("Models…")
        change.clicked.connect(self.open_picker)
        plan = QPushButton("VRAM planner…")
        plan.clicked.connect(self.open_planner)
        vllm = QPushButton("vLLM…")
        vllm.setToolTip("The `vllm serve` command for this pair (speculative config, quantization, GPUs)")
        vllm.clicked.connect(self.open_vllm_export)
        for lab in (self.pair_label, self.mode_label):
            lab.setMinimumWidth(60)  # long model names clip instead of widening the window (a 1200-pixel screen)
        names = QVBoxLayout()
        names.setSpacing(0)
        names.addWidget(self.pair_label)
        names.addWidget(self.mode_label)
        head = QHBoxLayout()
        head.addLayout(names, 1)
        head.addWidget(change)
        head.addWidget(plan)
        head.addWidget(vllm)
        self.cards = MetricCards()
        self.plots = PlotsPanel()
        right = QFrame()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(8, 12, 14, 12)
        rv.setSpacing(10)
        rv.addLayout(head)
        rv.addWidget(self.cards)
        rv.addWidget(self.plots, 1)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 5)
        self.splitter.setStretchFactor(1, 6)
        self.splitter.setSizes([600, 840])
        self.setCentralWidget(self.splitter)

        sb = self.statusBar()
        # long texts end in … rather than being cut mid-word (the whole text on hover; the device's tooltip is
        # which CPU kernels run)
        self.device_label = FitLabel("device: –", tip=False)
        self.models_label = FitLabel("models: –")
        self.state_label = FitLabel("engine: –")
        self.memory_label = FitLabel("memory: –")
        for lab in (self.device_label, self.models_label, self.state_label):
            sb.addWidget(lab)
        sb.addPermanentWidget(self.memory_label)
        for lab in (self.device_label, self.models_label, self.state_label, self.memory_label):
            lab.setMinimumWidth(40)  # long model names clip here instead of widening the window past the screen
        self._build_menus()

    def _build_menus(self) -> None:
        mb = self.menuBar()
        session = mb.addMenu("&Session")
        self._action(session, "New chat", self.new_chat, "Ctrl+N")
        session.addSeparator()
        self._action(session, "Open past log…", self.open_log_dialog, "Ctrl+O")
        self.export_actions = [
            self._action(session, "Export as JSON Lines…", lambda: self._export_dialog("jsonl")),
            self._action(session, "Export as CSV (one row per step)…", lambda: self._export_dialog("csv")),
            self._action(session, "Export HTML report…", lambda: self._export_dialog("html"), "Ctrl+E"),
        ]
        session.addSeparator()
        self._action(session, "Quit", self.close, "Ctrl+Q")
        models = mb.addMenu("&Models")
        self._action(models, "Choose models…", self.open_picker, "Ctrl+M")
        self._action(models, "Add model folder…", self._add_folder)
        tools = mb.addMenu("&Tools")
        self.planner_action = self._action(tools, "VRAM fit planner…", self.open_planner, "Ctrl+P")
        self._action(tools, "vLLM command…", self.open_vllm_export)
        self._action(tools, "Compare with plain decoding", self.compare)
        self._action(tools, "Train a draft for this model…", self.open_distill)
        from specdesk.qt.server_tools import install

        self.server_tools = install(self, tools)  # Start server… / Stop server / Connect to a server…
        view = mb.addMenu("&View")
        self.highlight_action = QAction("Colour accepted draft tokens", self, checkable=True, checked=True)
        self.highlight_action.toggled.connect(self.highlight_box.setChecked)
        view.addAction(self.highlight_action)
        helpm = mb.addMenu("&Help")
        self._action(helpm, "Welcome: what the window shows", self.show_welcome, "F1")
        h = self.health  # the banners' one-click fixes
        h.use_k_auto.connect(lambda: self.controls.k_box.setValue(AUTO_K))
        h.use_drafter.connect(lambda d: self.controls.drafter_box.setCurrentIndex(self.controls.drafter_box.findData(d)))
        h.new_chat.connect(self.new_chat)
        h.open_planner.connect(self.open_planner)
        h.send_anyway.connect(self._send_anyway)
        h.shorter_reply.connect(self._send_shorter)

    def _action(self, menu, text, slot, shortcut: str | None = None) -> QAction:
        act = QAction(text, self)
        if shortcut:
            act.setShortcut(QKeySequence(shortcut))
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    # ================================================================= worker

    def _start_worker(self, logs_dir: Path | None) -> None:
        self._thread = QThread(self)
        self._thread.setObjectName("specdesk-engine")
        self.worker = EngineWorker(logs_dir)
        self.worker.moveToThread(self._thread)
        self._load.connect(self.worker.load)
        self._generate.connect(self.worker.generate)
        w = self.worker
        w.progress.connect(self._on_progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.load_cancelled.connect(self._on_load_cancelled)
        w.started.connect(self._on_started)
        w.event.connect(self._on_event)
        w.failed.connect(self._on_failed)
        w.log_opened.connect(self._on_log_opened)
        w.log_warning.connect(self._on_log_warning)  # a bound method: lambdas would run on the worker thread
        w.memory_warning.connect(self._on_memory_warning)
        w.out_of_memory.connect(self._on_out_of_memory)
        self._thread.start()

    # ================================================================= loading

    def load_pair(self, req: LoadRequest, startup: bool = False, asked: bool = False) -> None:
        """Load ``req``; ``startup``: the app's first load (on failure the demo pair loads instead), ``asked``: named
        on the command line rather than the pair saved from the last session."""
        if self.state in ("generating", "comparing", "stopping", "loading"):
            self._error("Busy", "Wait for the current reply to finish (or press Stop) before loading models.")
            return
        self.request = req
        self._startup_request = req if startup else None
        self._startup_asked = asked
        self.info = None
        self.log_path = None
        self._load_cancel = threading.Event()
        self._set_state("loading")
        self._progress = QProgressDialog(f"Loading {req.target}…", "Cancel", 0, 0, self)
        self._progress.setWindowTitle("Loading models")
        self._progress.setWindowModality(Qt.WindowModality.WindowModal)
        self._progress.setMinimumDuration(0)
        self._progress.setMinimumWidth(420)
        self._progress.canceled.connect(self._cancel_load)
        self._progress.show()
        self._load.emit(req, self._load_cancel)

    def _cancel_load(self) -> None:
        self._load_cancel.set()
        self.state_label.setText("engine: cancelling load…")

    def _close_progress(self) -> None:
        if self._progress is not None:
            self._progress.canceled.disconnect(self._cancel_load)
            self._progress.close()
            self._progress.deleteLater()
            self._progress = None

    def _on_progress(self, msg: str) -> None:
        if self._progress is not None:
            self._progress.setLabelText(msg)
        self.state_label.setText(f"engine: {msg}")

    def _on_loaded(self, info: EngineInfo) -> None:
        self._close_progress()
        self.info = info
        preferred = info.request.drafter or info.drafter
        if preferred in MODEL_DRAFTERS:  # a draft loaded: replies draft with it and with prompt lookup unless changed
            preferred = default_drafter(True)
        self.controls.set_available_drafters(info.drafters, preferred)
        self.pair_label.setText(info.pair_label)
        kernels = info.description.get("cpu_kernels")  # which CPU kernels run (core/kernels), and why
        own = kernels is not None and kernels.startswith(OWN_KERNELS)
        self.device_label.setText(f"device: {info.device}" + ("" if kernels is None else
                                                              " · own kernels" if own else " · torch's kernels"))
        self.device_label.setToolTip(kernels or "")
        t = info.description.get("target") or {}
        d = info.description.get("draft") or {}
        models = f"target {info.target} [{t.get('quant', 'none')}, {t.get('dtype', '?')}]"
        models += f" · draft {info.draft} [{d.get('quant', 'none')}, {d.get('dtype', '?')}]" if info.draft else \
            f" · drafter {info.drafter}"
        self.models_label.setText(models)
        mode = "chat mode (the model's chat template)" if info.chat_template else "completion mode (no chat template)"
        self.mode_label.setText(mode)
        self.input.setPlaceholderText(
            f"Message {info.target}…   Ctrl+Enter sends" if info.chat_template else
            f"Text or code for {info.target} to continue (completion mode)…   Ctrl+Enter sends")
        self.input.viewport().update()  # a new placeholder is not repainted on its own (seen on X11)
        self.health.pair_loaded(info.drafters)
        self.new_chat()
        if self._welcome:
            self.show_welcome()
        d = info.description.get("draft") or {}
        own = (" The draft was distilled for this model." if d.get("distilled_for_target") else
               f" The draft was distilled for {d['distilled_for']}, the same model in another file." if
               d.get("distilled_for") else "")
        self.chat.add_notice(f"Loaded {info.pair_label} on {info.device}: {mode}.{own}")
        if self._fallback_notice:  # the new chat above cleared the failure's notice: say it again, below the load's
            self.chat.add_notice(self._fallback_notice, error=True)
            self._fallback_notice = None
        self._set_state("idle")
        self._save_settings()
        self.engine_ready.emit(info)

    def _on_load_failed(self, msg: str) -> None:
        self._close_progress()
        self._set_state("no model")
        self.pair_label.setText("No model loaded")
        startup = self._startup_request
        self._startup_request = None
        if startup is not None and startup != DEMO_PAIR:
            what = "the models given on the command line" if self._startup_asked else "the last pair"
            failed = f"Could not load {what} ({msg})"
            self._fallback_notice = f"{failed}; the demo pair loaded instead."
            self.chat.add_notice(f"{failed}; loading the demo pair instead.", error=True)
            self.load_pair(DEMO_PAIR)
            return
        self.load_error.emit(msg)
        self._error("Could not load the models",
                    f"{msg}\n\nChoose another pair or quantization in Models → Choose models…, or check the "
                    f"VRAM planner to see what fits.")

    def _on_load_cancelled(self) -> None:
        self._close_progress()
        self._set_state("no model")
        self.pair_label.setText("No model loaded")
        self.chat.add_notice("Loading cancelled. Choose models in Models → Choose models….")
        self.load_error.emit("cancelled")

    # ================================================================= generation

    def send(self) -> None:
        if self.info is None:
            self._error("No model loaded", "Load a model first: Models → Choose models….")
            return
        if self.state != "idle":
            return
        text = self.input.toPlainText()
        if self.info.chat_template and not text.strip():
            return
        try:
            settings = self.controls.settings()
        except SpecdeskError as e:
            self.chat.add_notice(f"{e}", error=True)
            return
        drafter = self.controls.drafter()
        self._tag += 1
        memory = dict(check_memory=not self._skip_memory_check, memory_budget=self.memory_budget,
                      memory_limit=self.memory_limit)
        self._skip_memory_check = False
        if self.info.chat_template:
            req = GenerateRequest(self._tag, "reply", settings, drafter,
                                  messages=tuple(self._history) + (("user", text),), **memory)
        else:
            req = GenerateRequest(self._tag, "reply", settings, drafter, prompt=self._document + text, **memory)
        self._sent_text = text
        self.health.reply_started(drafter, settings.k)
        self._active = req
        self._cancel = threading.Event()
        self.input.clear()
        if text:
            self.chat.add_user(text, "You" if self.info.chat_template else "Prompt")
        self.chat.begin_reply(self.info.target)
        self._buffer = WordBuffer()
        self._unshown, self._chat_shown = [], 0.0
        self.plots.new_generation()
        self._cards_shown = 0.0
        self.cards.show_figures(0, None, None, None, 0)
        self.cards.show_speedup(None, note="press Compare")
        self._set_state("generating")
        self._generate.emit(req, self._cancel)

    def compare(self) -> None:
        """Run the last reply's prompt again with plain decoding; show both speeds and the ratio."""
        if self.state != "idle" or self._last_reply is None:
            if self._last_reply is None:
                self.chat.add_notice("Send a prompt first; Compare runs it again with plain decoding.")
            return
        _, done, _ = self._last_reply
        self._pool = SpeedPool(done.stats.new_tokens, done.stats.decode_seconds,
                               tokens_per_pass=done.stats.mean_accepted_length)
        self._same = True
        self._cancel = threading.Event()
        self._baseline = StepSeries()
        self.plots.set_baseline(self._baseline)
        self.health.plain_started()
        self.cards.show_speedup(None, note="measuring plain decoding…")
        self._set_state("comparing")
        self._compare_run("plain")

    def _compare_run(self, kind: str) -> None:
        """The comparison's next run: "plain" decoding, or "spec" (the reply again, its settings and seed)."""
        req, done, _ = self._last_reply
        self._tag += 1
        settings = req.settings
        if settings.seed is None and done.seed is not None:
            from dataclasses import replace

            settings = replace(settings, seed=done.seed)
        purpose, drafter = ("compare", "none") if kind == "plain" else ("respec", req.drafter)
        self._active = GenerateRequest(self._tag, purpose, settings, drafter, prompt=req.prompt,
                                       messages=req.messages)
        self._generate.emit(self._active, self._cancel)

    def stop(self) -> None:
        if self.state in ("generating", "comparing"):
            self._cancel.set()
            self._set_state("stopping")

    def new_chat(self) -> None:
        if self.state in ("generating", "comparing", "stopping"):
            return
        self.chat.clear_chat()
        self._history.clear()
        self._document = ""
        self._last_reply = None
        self.health.conversation_reset()
        self.plots.new_generation()
        self.cards.show_figures(0, None, None, None, 0)
        self.cards.show_speedup(None)

    def _on_started(self, tag: int, prompt_tokens: int) -> None:
        if self._active is not None and tag == self._active.tag:
            what = {"compare": "measuring plain decoding", "respec": "running the reply again, to compare"}.get(
                self._active.purpose, "generating")
            self.state_label.setText(f"engine: {what} ({prompt_tokens} prompt tokens)")

    def _on_event(self, tag: int, ev) -> None:
        req = self._active
        if req is None or tag != req.tag:
            return
        if isinstance(ev, StepEvent) and req.purpose != "respec":
            self.health.step(ev.drafted, ev.accepted, ev.draft_s, ev.verify_s, ev.context_len, ev.setup_s, ev.lookup)
        if req.purpose in ("compare", "respec"):
            first_plain = req.purpose == "compare" and self._pool.plain_runs == 0
            if isinstance(ev, StepEvent) and self._baseline is not None and first_plain:  # the plot: its first run
                self._baseline.add_step(ev)
                self.plots.set_baseline(self._baseline)
            elif isinstance(ev, DoneEvent):
                self._compare_run_done(req, ev)
            return
        if isinstance(ev, StepEvent):
            self._unshown += self._buffer.push(ev.drafted_text, True) + self._buffer.push(ev.target_text, False)
            self.plots.add_step(ev)
            now = time.monotonic()
            if now - self._chat_shown >= CHAT_REFRESH_S:  # a text insert per step costs decoding too
                self._chat_shown = now
                self.chat.append_spans(self._unshown)
                self._unshown = []
            if now - self._cards_shown >= BUSY_REFRESH_MS / 1000 and not self._cards_due:
                # at the plots' pace (repainting costs decoding), once the steps that arrived together are all in:
                # drawn at the first of a batch, the cards lagged the histogram by the rest (10 tokens beside 97 steps)
                self._cards_shown = now
                self._cards_due = True
                QTimer.singleShot(0, self, self._show_cards)
        elif isinstance(ev, DoneEvent):
            self._finish_reply(req, ev)
        elif isinstance(ev, PrefillEvent):
            kept = f", {ev.cached_tokens} kept from the last reply" if ev.cached_tokens else ""
            self.state_label.setText(f"engine: generating ({ev.prompt_tokens} prompt tokens{kept}, "
                                     f"prefill {ev.seconds * 1000:.0f} ms)")

    def _take_unshown(self) -> list[Span]:
        """The reply's text not in the chat yet: whole words held back between refreshes, then the word buffer."""
        spans = self._unshown + self._buffer.flush()
        self._unshown = []
        return spans

    def _finish_reply(self, req: GenerateRequest, done: DoneEvent) -> None:
        spans = self._take_unshown()
        if done.tail:
            spans.append(Span(done.tail, False))
        self.chat.append_spans(spans)
        st = done.stats
        self.chat.end_reply(Footer(tokens=st.new_tokens, tokens_per_second=st.tokens_per_second,
                                   acceptance_rate=st.acceptance_rate, mean_accepted_length=st.mean_accepted_length,
                                   stop_reason=done.stop_reason, drafter=_drafter_label(req),
                                   prompt_tokens=st.prompt_tokens, kept_tokens=st.cached_prompt_tokens,
                                   prefill_seconds=st.prefill_seconds))
        self.plots.refresh()
        self.cards.show_figures(st.new_tokens, st.tokens_per_second, st.acceptance_rate, st.mean_accepted_length,
                                st.target_forwards)
        if req.messages:
            self._history = list(req.messages) + [("assistant", done.text)]
        else:
            self._document = req.prompt + done.text
        self._last_reply = (req, done, self.chat.last_reply_index())
        self.health.reply_finished(req.drafter, req.settings.k, req.settings.temperature == 0, st.drafted, st.accepted)
        self._active = None
        self._set_state("idle")
        self.reply_done.emit(done)

    def _compare_run_done(self, run: GenerateRequest, ev: DoneEvent) -> None:
        """One run of a comparison ended: pool it (core/speedpool.py), then the next run or the verdict."""
        if self._last_reply is None or ev.stop_reason == "cancelled":
            self._finish_compare(ev)
            return
        req, done, _ = self._last_reply
        plain = run.purpose == "compare"
        if plain:
            self._plain_done = ev
            if req.settings.temperature == 0:
                self._same = self._same and tuple(ev.token_ids) == tuple(done.token_ids)
            else:
                self._same = None
        self._pool.add(plain, ev.stats.new_tokens, ev.stats.decode_seconds)
        nxt = self._pool.next_run()
        if nxt is None:
            self._finish_compare(self._plain_done)
            return
        if self._pool.remeasured and self._pool.plain_runs == 0:  # the first plain run was not believed: its
            self._baseline = StepSeries()                         # curve goes too, the re-run's is drawn
            self.plots.set_baseline(self._baseline)
        rnd = self._pool.plain_runs + (nxt == "plain")
        self.cards.show_speedup(None, note=f"measuring side by side, run {rnd} of up to {self._pool.max_runs}…")
        self._compare_run(nxt)

    def _finish_compare(self, plain: DoneEvent) -> None:
        self._active = None
        self.plots.refresh()
        self._set_state("idle")
        if self._last_reply is None:
            return
        req, done, turn = self._last_reply
        if plain.stop_reason == "cancelled":
            self.cards.show_speedup(None, note="comparison stopped")
            self.chat.add_notice("Comparison stopped before plain decoding finished.")
            self.compare_done.emit(plain)
            return
        pool, same = self._pool, self._same
        spec_tps, plain_tps, ratio = pool.spec_tps, pool.plain_tps, pool.speedup
        runs = pool.plain_runs
        if turn is not None and turn < len(self.chat.turns) and self.chat.turns[turn].footer is not None:
            old = self.chat.turns[turn].footer
            from dataclasses import replace

            self.chat.set_footer(turn, replace(old, plain_tokens_per_second=plain_tps, identical_to_plain=same,
                                               compared_tokens_per_second=spec_tps if pool.pooled else None,
                                               compare_runs=runs))
        self.cards.show_speedup(ratio, plain_tps)
        self.health.compared(ratio)  # a measurement settles what the slow-drafting banner estimated
        each = (f" · the reply run again: {runs} run{'s' if runs > 1 else ''} each, alternating, pooled"
                if pool.pooled else "")
        if pool.remeasured:
            each += " (measured again: one plain run beside the reply gave more than its tokens per pass allow)"
        if pool.implausible():
            each += (f" · ⚠ above what {pool.tokens_per_pass:.2f} tokens a pass allows: the machine's speed changed "
                     f"during the runs (other work?); Compare again when it is quieter")
        msg = (f"Plain decoding: {plain_tps or 0:.1f} tok/s ({plain.stats.new_tokens} tokens, "
               f"{plain.stats.target_forwards} target passes) · speculative ({_drafter_label(req)}): "
               f"{spec_tps or 0:.1f} tok/s · " + (f"speed-up {ratio:.2f}×" if ratio else "speed-up n/a") + each)
        if same is not None:
            msg += " · output identical ✓" if same else " · output differs (expected only with sampling)"
        self.chat.add_notice(msg)
        self.compare_done.emit(plain)

    def _on_failed(self, tag: int, msg: str) -> None:
        req = self._active
        if req is None or tag != req.tag:
            return
        self._active = None
        if req.purpose == "reply":
            self.chat.append_spans(self._take_unshown())
            hint = ""
            if "context" in msg:
                hint = " Start a New chat or lower max new tokens."
            self.chat.add_notice(msg + hint, error=True)
        else:
            self.chat.add_notice(f"Comparison failed: {msg}", error=True)
            self.cards.show_speedup(None, note="comparison failed")
        self.last_error = msg
        self._set_state("idle")
        self.generation_failed.emit(msg)

    def _on_memory_warning(self, tag: int, fit) -> None:
        """The planner says this reply will not fit: it was not started; the prompt goes back to the input."""
        if self._active is None or tag != self._active.tag:
            return
        self._active = None
        self.chat.pop_turns(2 if self._sent_text else 1)  # the prompt and the empty reply
        self.input.setPlainText(self._sent_text)
        self._set_state("idle")
        self.health.memory_warning(fit)
        self.generation_failed.emit(fit.message())

    def _send_anyway(self) -> None:
        self._skip_memory_check = True
        self.send()

    def _show_cards(self) -> None:
        self._cards_due = False
        if self._active is None or self._active.purpose != "reply":
            return  # the reply ended meanwhile: its DoneEvent drew the final figures
        s = self.plots.steps
        self.cards.show_figures(s.tokens, s.tps_cumulative.last, s.acceptance_rate, s.mean_accepted_length, s.steps)

    def _send_shorter(self, max_new: int) -> None:
        self.controls.max_new.setValue(max_new)
        self.send()

    def _on_out_of_memory(self, tag: int, msg: str) -> None:
        """The worker ended the reply and freed its memory: say so where the reply stopped."""
        if self._active is None or tag != self._active.tag:
            return
        self._on_failed(tag, msg + " (the reply was stopped and its memory freed)")
        s = self.plots.steps  # the cards as the reply ended (they refresh at the plots' pace while it streams)
        self.cards.show_figures(s.tokens, s.tps_cumulative.last, s.acceptance_rate, s.mean_accepted_length, s.steps)
        self.plots.refresh()
        self.health.out_of_memory(msg)

    def _on_log_warning(self, msg: str) -> None:
        self.chat.add_notice(msg, error=True)

    def _on_log_opened(self, path: str) -> None:
        self.log_path = path
        self.statusBar().showMessage(f"Recording to {path}", 6000)

    # ================================================================= state

    def _set_state(self, state: str) -> None:
        self.state = state
        busy = state in ("generating", "comparing", "stopping", "loading")
        ready = self.info is not None and not busy
        self.send_button.setEnabled(ready)
        self.stop_button.setEnabled(state in ("generating", "comparing"))
        self.new_button.setEnabled(not busy)
        self.compare_button.setEnabled(ready and self._last_reply is not None)
        self.controls.setEnabled(not busy)
        label = {"idle": "ready", "no model": "no model loaded"}.get(state, state)
        self.state_label.setText(f"engine: {label}")
        self.plots.set_busy(state in ("generating", "comparing", "stopping"))
        self.busy_changed.emit(busy)

    def _sample_memory(self) -> None:
        device = self.info.device if self.info is not None else "cpu"
        r = read_memory(device)
        self.plots.add_memory(time.monotonic() - self._t0, r.used, r.free, r.used_label, r.free_label)
        self.memory_label.setText(r.summary())

    def _toggle_highlight(self, on: bool) -> None:
        self.chat.set_highlight(on)
        if self.highlight_action.isChecked() != on:
            self.highlight_action.setChecked(on)

    def _error(self, title: str, text: str) -> QMessageBox:
        """A non-blocking message box (the event loop keeps running; tests read ``last_error``)."""
        self.last_error = text
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        return box

    # ================================================================= dialogs

    def open_picker(self, current: LoadRequest | None = None):
        from specdesk.qt.model_picker import ModelPickerDialog

        dlg = ModelPickerDialog(self, current=current if isinstance(current, LoadRequest) else self.request)
        dlg.plan_requested.connect(lambda choice: self.open_planner(choice, picker=dlg))
        dlg.accepted.connect(lambda: self.load_pair(dlg.choice()))
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()
        self.picker = dlg
        return dlg

    def open_planner(self, choice: LoadRequest | None = None, picker=None):
        from specdesk.qt.planner_dialog import PlannerDialog

        device = self.info.device.split(":")[0] if self.info is not None else None
        dlg = PlannerDialog(self, choice if isinstance(choice, LoadRequest) else self.request, picker=picker,
                            device=device, k=self.controls.k(), tree=self.controls.tree())
        if picker is None:  # "Use this" from the main window opens the picker set to the recommendation
            dlg.use_requested.connect(lambda req: (dlg.close(), self.open_picker(req)))
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()
        self.planner = dlg
        return dlg

    def open_vllm_export(self):
        from specdesk.qt.vllm_dialog import VllmDialog

        dlg = VllmDialog(self, self.request)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()
        self.vllm_dialog = dlg
        return dlg

    def open_distill(self):
        from specdesk.qt.distill_dialog import DistillDialog

        dlg = DistillDialog(self, self.request.target)
        dlg.use_requested.connect(lambda made, target=dlg.target: self._use_distilled(target, *made))
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()
        self.distill_dialog = dlg
        return dlg

    def _use_distilled(self, target: str, draft: str | None, drafter: str | None) -> None:
        """The Train dialog's "Use it": the target again, with the draft it trained or the table it counted."""
        r = self.request
        self.load_pair(LoadRequest(target=target, draft=draft, drafter=drafter, target_quant=r.target_quant,
                                   double_quant=r.double_quant, device=r.device))

    def show_welcome(self) -> None:
        """What the colours, the cards and the plots mean, and how to load your own model (first run, Help)."""
        from specdesk.qt.welcome import welcome_html

        self.chat.add_html(welcome_html())
        if self.info is not None:  # shown once the models are loaded: the first run is over
            self._welcome = False

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if folder:
            from specdesk.core.discovery import folder_entries

            userdirs.add_folder(folder)
            found = folder_entries(folder)
            usable = [e for e in found if e.usable]
            if usable:
                self.statusBar().showMessage(f"Added {folder}: {len(usable)} model{'s' if len(usable) > 1 else ''}, "
                                             f"listed in Models → Choose models…", 6000)
            else:  # say so now, not only as an "unusable" row in the Models dialog
                why = found[0].reason if found else "no model folder or GGUF file in it"
                self._error("No model in this folder", f"{folder} holds no model specdesk can load ({why}). It is "
                            f"remembered, so models put there later are listed; Models → Choose models… shows it.")

    def open_log_dialog(self) -> None:
        folder = userdirs.logs_dir()
        path, _ = QFileDialog.getOpenFileName(self, "Open a session log", str(folder if folder.exists() else Path.home()),
                                              "Session logs (*.jsonl);;All files (*)")
        if path:
            self.open_log(path)

    def open_log(self, path: str):
        from specdesk.qt.export import open_log
        from specdesk.qt.log_viewer import LogViewerDialog

        try:
            log_ = open_log(path)
        except SpecdeskError as e:
            self._error("Cannot open the log", str(e))
            return None
        dlg = LogViewerDialog(log_, self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()
        return dlg

    def _export_dialog(self, kind: str) -> None:
        if self.log_path is None:
            self._error("Nothing to export", "This session has no generation yet: send a prompt first.")
            return
        ext = {"jsonl": "JSON Lines (*.jsonl)", "csv": "CSV (*.csv)", "html": "HTML report (*.html)"}[kind]
        default = str(Path.home() / (Path(self.log_path).stem + "." + kind))
        path, _ = QFileDialog.getSaveFileName(self, "Export session", default, ext)
        if path:
            self.export_to(path, kind)

    def export_to(self, dest: str, kind: str) -> bool:
        """Export this session's log; a failure (disk full, no permission) is a dialog, not a crash."""
        from specdesk.qt import export

        if self.log_path is None:
            self._error("Nothing to export", "This session has no generation yet: send a prompt first.")
            return False
        try:
            if kind == "jsonl":
                export.export_jsonl(self.log_path, dest)
            else:
                log_ = export.open_log(self.log_path)
                (export.write_csv if kind == "csv" else export.write_html)(log_, dest)
        except SpecdeskError as e:
            self._error("Export failed", str(e))
            return False
        self.statusBar().showMessage(f"Exported {dest}", 6000)
        return True

    # ================================================================= settings and closing

    def _restore_settings(self) -> None:
        s = userdirs.load_settings().get("gui") or {}
        if isinstance(s.get("controls"), dict):
            self.controls.set_values(s["controls"])
        if "highlight" in s:
            self.highlight_box.setChecked(bool(s["highlight"]))
        self._welcome = not s.get("welcomed")
        if self._welcome:
            self.show_welcome()
        for key, fn in (("geometry", self.restoreGeometry), ("splitter", self.splitter.restoreState)):
            if isinstance(s.get(key), str):
                try:
                    fn(QByteArray(base64.b64decode(s[key])))
                except (ValueError, TypeError):
                    pass

    def saved_pair(self) -> LoadRequest | None:
        pair = (userdirs.load_settings().get("gui") or {}).get("pair")
        if not isinstance(pair, dict):
            return None
        try:
            return LoadRequest(**{k: pair[k] for k in LoadRequest.__dataclass_fields__ if k in pair})
        except TypeError:
            return None

    def _save_settings(self) -> None:
        if not self.persist:
            return
        s = {"controls": self.controls.values(), "highlight": self.highlight_box.isChecked(), "welcomed": True,
             "geometry": base64.b64encode(bytes(self.saveGeometry().data())).decode("ascii"),
             "splitter": base64.b64encode(bytes(self.splitter.saveState().data())).decode("ascii")}
        if self.info is not None and isinstance(self.info.request, LoadRequest):  # not a server connection
            s["pair"] = self.info.request.to_dict()
        else:
            old = (userdirs.load_settings().get("gui") or {}).get("pair")
            if old:
                s["pair"] = old
        try:
            userdirs.update_settings(gui=s)
        except OSError as e:  # a read-only config dir must not stop the app from closing
            log.warning("could not save settings: %s", e)

    def closeEvent(self, event) -> None:
        """Stop the worker cleanly: cancel (the loop stops within one step), then wait for the thread."""
        if not self._closing:
            self._closing = True
            self._save_settings()
            self.server_tools.shutdown()
            self._cancel.set()
            self._load_cancel.set()
            self._mem_timer.stop()
            self.hide()
            self._thread.quit()
            self._thread.wait()
            self.worker.close_log()
        super().closeEvent(event)


def _drafter_label(req: GenerateRequest) -> str:
    k = req.settings.k
    return {"model": f"draft model, k={k}", "model+lookup": f"draft model + lookup, k={k}",
            "phrases": f"phrases + lookup, k={k}", "ngram": f"n-gram, k={k}",
            "none": "plain decoding"}.get(req.drafter, req.drafter)
