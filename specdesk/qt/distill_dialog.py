"""Tools → Train a draft for this model…: ``specdesk distill`` on a worker thread, with progress, ETA, the held-out
agreement plotted as it trains, cancel (a checkpoint is kept) and resume."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QObject, QThread, Signal, Slot
from PySide6.QtWidgets import (QComboBox, QDialog, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QProgressBar,
                               QPushButton, QVBoxLayout)

from specdesk.core.errors import SpecdeskError


def default_out(target: str) -> Path:
    from specdesk.core import userdirs

    name = Path(str(target)).name.removesuffix(".gguf") or "model"
    return userdirs.data_dir() / "drafts" / f"{name}-draft"


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class DistillWorker(QObject):
    """Iterates core's distill generator; only its frozen events cross to the GUI thread."""

    event = Signal(object)
    failed = Signal(str)
    finished = Signal()

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.cancel = threading.Event()

    @Slot()
    def run(self) -> None:
        from specdesk.core.distill.pipeline import distill
        from specdesk.qt.tasks import warm_imports

        try:
            warm_imports()
            for ev in distill(self.config, self.cancel):
                self.event.emit(ev)
        except SpecdeskError as e:
            self.failed.emit(str(e))
        except Exception as e:  # shown as one line; the details go to the log
            import logging

            logging.getLogger(__name__).exception("distillation failed")
            self.failed.emit(f"{type(e).__name__}: {e}")
        finally:
            self.finished.emit()


class DistillDialog(QDialog):
    """``overrides``: DistillConfig fields to set (tests use a tiny budget). After a finished run "Use it" emits
    ``use_requested`` with (draft folder or None, drafter or None): what to load the target with."""

    use_requested = Signal(object)

    DRAFT_HELP = ("The target answers chat prompts, then a small draft learns its replies. Cancel keeps a checkpoint; "
                  "Resume goes on from it.")
    PHRASES_HELP = ("The target answers chat prompts and the phrases it keeps writing are counted: no training. The "
                    "table is kept for this model, which drafts with it when loaded without a draft. Cancel keeps "
                    "the answered prompts; Resume goes on.")

    def __init__(self, parent, target: str, overrides: dict | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a draft for this model")
        self.resize(720, 520)
        self.target = target
        self.overrides = dict(overrides or {})
        self.out_edit = QLineEdit(str(default_out(target)))
        self.minutes = QDoubleSpinBox()
        self.minutes.setRange(0.1, 24 * 60)
        self.minutes.setValue(30)
        self.minutes.setSuffix(" min of training")
        form = QFormLayout()
        form.addRow("Target", QLabel(str(target)))
        form.addRow("Draft folder", self.out_edit)
        form.addRow("Time", self.minutes)
        self.kind = QComboBox()
        self.kind.addItem("Draft model: layers of its own (any engine)", "draft")
        self.kind.addItem("EAGLE head: reads the target's hidden states (specdesk)", "eagle")
        self.kind.addItem("Phrases only: no training, a table of the target's phrases (minutes)", "phrases")
        self.kind.currentIndexChanged.connect(self._kind_changed)
        form.addRow("Kind", self.kind)
        self.prompt_set = QComboBox()
        self.prompt_set.addItem("Varied chat: 19 kinds of request from specdesk's templates", "varied")
        self.prompt_set.addItem("The model's own: requests it writes itself (its domain, its language)", "self")
        self.prompt_set.addItem("Templates: code, rewriting, explaining, lists, questions", "templates")
        self.prompt_set.setToolTip("What the target answers for the draft to learn from. \"The model's own\" suits "
                                   "a fine-tune: it writes the kind of request it was tuned on.")
        form.addRow("Prompts", self.prompt_set)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFormat("")
        self.status = QLabel(self.DRAFT_HELP)
        self.status.setWordWrap(True)
        self.plot = pg.PlotWidget()
        self.plot.setLabel("left", "held-out agreement")
        self.plot.setLabel("bottom", "training minutes")
        item = self.plot.getPlotItem()
        for axis in ("left", "bottom"):
            item.getAxis(axis).enableAutoSIPrefix(False)  # agreement 0.2 read as "200 (x0.001)" otherwise
        item.getAxis("left").setTicks([[(v, f"{v:.0%}") for v in (0, .25, .5, .75, 1)]])
        self.plot.setYRange(0, 1, padding=0.02)
        self.curve = self.plot.plot([], [], pen=pg.mkPen(width=2), symbol="o", symbolSize=5)
        self.start_button = QPushButton("Start")
        self.resume_button = QPushButton("Resume")
        self.cancel_button = QPushButton("Cancel")
        self.close_button = QPushButton("Close")
        self.use_button = QPushButton("Use it")
        self.use_button.setToolTip("Load this model with what the run made")
        self.use_button.clicked.connect(self._use)
        self._made: tuple[str | None, str | None] | None = None  # (draft, drafter) of the run that finished
        self.start_button.clicked.connect(lambda: self.start(resume=False))
        self.resume_button.clicked.connect(lambda: self.start(resume=True))
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)
        row = QHBoxLayout()
        for b in (self.start_button, self.resume_button, self.cancel_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.use_button)
        row.addWidget(self.close_button)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        lay.addWidget(self.plot, 1)
        lay.addStretch(0)  # takes the plot's room while it is hidden (Phrases only), so the rest stays on top
        lay.addLayout(row)
        self._layout = lay
        self.out_edit.textChanged.connect(self._update_buttons)
        self._thread: QThread | None = None
        self.worker: DistillWorker | None = None
        self.last_event = None
        self.error: str | None = None
        self._update_buttons()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _kind_changed(self) -> None:
        """Phrases only: the time box trains nothing, and the target's own prompts suit a table best."""
        phrases_only = self.kind.currentData() == "phrases"
        self.minutes.setEnabled(not phrases_only)
        self.plot.setVisible(not phrases_only)  # nothing trains: no agreement to plot
        self._layout.setStretch(self._layout.indexOf(self.plot) + 1, 1 if phrases_only else 0)
        if not self.running:
            self.status.setText(self.PHRASES_HELP if phrases_only else self.DRAFT_HELP)
        if phrases_only and self.prompt_set.isEnabled():
            self.prompt_set.setCurrentIndex(self.prompt_set.findData("self"))

    def _update_buttons(self) -> None:
        from specdesk.core.distill.workdir import WorkDir

        out = Path(self.out_edit.text()).expanduser()
        can_resume = WorkDir(out).exists()  # settings alone (cancelled while the target loaded): start afresh
        if can_resume:  # a run goes on with the kind and the prompts it started with
            try:
                settings = json.loads((out / ".distill" / "settings.json").read_text())
            except (OSError, ValueError):
                settings = {}
            kind = "phrases" if settings.get("phrases_only") else settings.get("kind", "draft")
            self.kind.setCurrentIndex(max(0, self.kind.findData(kind)))
            self.prompt_set.setCurrentIndex(max(0, self.prompt_set.findData(settings.get("prompts", "templates"))))
        self.kind.setEnabled(not self.running and not can_resume)
        self.prompt_set.setEnabled(not self.running and not can_resume)
        self.use_button.setEnabled(not self.running and self._made is not None)
        self.start_button.setEnabled(not self.running and not can_resume)
        self.resume_button.setEnabled(not self.running and can_resume)
        self.cancel_button.setEnabled(self.running)

    def start(self, resume: bool) -> None:
        from specdesk.core.distill.pipeline import DistillConfig, prompt_set_for

        if self.running:
            return
        phrases_only = self.kind.currentData() == "phrases"
        cfg = DistillConfig(target=self.target, out=Path(self.out_edit.text()).expanduser(), resume=resume,
                            minutes=self.minutes.value(), kind="draft" if phrases_only else self.kind.currentData(),
                            prompts=None if resume else self.prompt_set.currentData(), phrases_only=phrases_only)
        if phrases_only:
            from specdesk.core.distill.pipeline import PHRASES_ONLY_PROMPTS

            cfg.train_prompts = PHRASES_ONLY_PROMPTS
        for key, value in self.overrides.items():
            setattr(cfg, key, value)
        cfg.prompts = prompt_set_for(cfg)  # a resumed run answers the set it began with
        how = "--phrases-only" if phrases_only else f"--kind {cfg.kind} --minutes {self.minutes.value():g}"
        cfg.command = (f"specdesk distill --target {self.target} --out {self.out_edit.text()} {how} "
                       f"--prompt-set {cfg.prompts}" + (" --resume" if resume else ""))
        self.error = None
        self._made = None
        self.worker = DistillWorker(cfg)
        self._thread = QThread(self)
        self._thread.setObjectName("specdesk-distill")
        self.worker.moveToThread(self._thread)
        self._thread.started.connect(self.worker.run)
        self.worker.event.connect(self._on_event)
        self.worker.failed.connect(self._on_failed)
        self.worker.finished.connect(self._on_finished)
        self.status.setText("starting…")
        self._thread.start()
        self._update_buttons()

    def cancel(self) -> None:
        if self.worker is not None:
            self.worker.cancel.set()
            self.status.setText("cancelling (writing a checkpoint)…")

    def _on_event(self, ev) -> None:
        self.last_event = ev
        if self.kind.currentData() == "phrases":  # answering the prompts is the whole run (the box is locked meanwhile)
            weights = {"load": (0, 0.02), "prompts": (0.02, 0.2), "data": (0.22, 0.76), "write": (0.98, 0.02)}
        else:
            weights = {"load": (0, 0.02), "prompts": (0.02, 0.06), "data": (0.08, 0.24), "features": (0.32, 0.06),
                       "train": (0.38, 0.6), "write": (0.98, 0.02)}
        start, span = weights.get(ev.phase, (1.0, 0.0))
        if ev.phase == "done":
            value = 1000 if ev.fraction >= 1.0 else self.progress.value()  # finished, or cancelled where it was
        else:
            value = int(1000 * (start + span * ev.fraction))
        self.progress.setValue(value)
        eta = _eta(ev.eta_s)
        label = {"prompts": "target writing prompts", "data": "target answering prompts",
                 "features": "target hidden states",
                 "train": "training"}.get(ev.phase, ev.phase)
        if ev.phase == "done":  # finished, or cancelled (the bar stays where it stopped)
            self.progress.setFormat("done" if ev.fraction >= 1.0 else "stopped: Resume goes on from the checkpoint")
        else:
            self.progress.setFormat(f"{label}: {ev.fraction:.0%}" + (f" (ETA {eta})" if eta else ""))
        self.status.setText(ev.message)
        if ev.curve:
            self.curve.setData([t / 60 for _, t, _ in ev.curve], [a for _, _, a in ev.curve])

    def _on_failed(self, message: str) -> None:
        self.error = message
        self.status.setText(f"error: {message}")

    def _on_finished(self) -> None:
        ev = self.last_event
        if self.error is None and ev is not None and ev.phase == "done" and ev.fraction >= 1.0:
            out = Path(self.out_edit.text()).expanduser()  # the box is locked while a run goes
            # a table (drafter phrases: the load finds it kept for this target), or the draft folder
            self._made = (None, "phrases") if self.kind.currentData() == "phrases" else (str(out), None)
            self.status.setText(f"{ev.message.rstrip('.')}. Use it loads the model with it now.")
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
        self._thread = None
        self.worker = None
        self._update_buttons()

    def _use(self) -> None:
        if self._made is not None:
            self.use_requested.emit(self._made)
            self.close()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if self.worker is not None:
            self.worker.cancel.set()
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
            self._thread = None
        super().closeEvent(event)
